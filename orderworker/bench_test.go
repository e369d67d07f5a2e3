package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"usher/internal/event"
	"usher/internal/orders"
	"usher/internal/testenv"

	"github.com/nats-io/nats.go/jetstream"
)

// holds records every connection hold time.
type holds struct {
	mu sync.Mutex
	d  []time.Duration
}

func (h *holds) add(d time.Duration) { h.mu.Lock(); h.d = append(h.d, d); h.mu.Unlock() }

func (h *holds) report(b *testing.B) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.d) == 0 {
		return
	}
	slices.Sort(h.d)
	var sum time.Duration
	for _, d := range h.d {
		sum += d
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(sum/time.Duration(len(h.d))), "hold-mean-ms")
	b.ReportMetric(ms(h.d[len(h.d)/2]), "hold-p50-ms")
	b.ReportMetric(ms(h.d[len(h.d)*99/100]), "hold-p99-ms")
	b.ReportMetric(ms(h.d[len(h.d)-1]), "hold-max-ms")
}

// benchDatabase is USHER_BENCH_DATABASE_URL when set (a cluster with the
// durability settings being measured), else a fresh database on the test
// cluster (fsync off: commit costs nothing there).
func benchDatabase(b *testing.B) string {
	if u := os.Getenv("USHER_BENCH_DATABASE_URL"); u != "" {
		return u
	}
	return testenv.PostgresURL(b)
}

// BenchmarkOrderTransactions runs the order path's database work, the two
// one-statement transactions (place: stock and order; pay: payment id),
// with N concurrent workers all ordering ONE hot SKU on a 40-connection
// pool, and reports orders per second and the connection hold time.
func BenchmarkOrderTransactions(b *testing.B) {
	url := benchDatabase(b)
	for _, workers := range []int{1, 4, 8, 16, 40} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			h := &holds{}
			db, err := orders.Open(url, orders.Options{MaxConns: 40, Hold: h.add})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			ctx := context.Background()
			if err := db.Migrate(ctx); err != nil {
				b.Fatal(err)
			}
			sku := fmt.Sprintf("hot-%d-%d", workers, time.Now().UnixNano())
			if _, err := db.SetStock(ctx, sku, 1<<40); err != nil {
				b.Fatal(err)
			}
			// Warm the pool so connection set-up is not measured as hold.
			for range 40 {
				db.Ping(ctx)
			}
			h.d = h.d[:0]
			var next atomic.Int64
			var wg sync.WaitGroup
			cpu0 := testenv.ProcessCPU()
			b.ResetTimer()
			start := time.Now()
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						tok := fmt.Sprintf("%s:e1:%d", sku, i)
						o, err := db.Place(ctx, orders.Order{ID: orders.ID(tok), TokenID: tok, Queue: sku, User: "u",
							SKU: sku, Quantity: 1, Deadline: time.Now().Add(time.Minute)})
						if err != nil || o.Status != orders.Pending {
							b.Errorf("place: %v %s", err, o.Status)
							return
						}
						if _, err := db.Pay(ctx, o.ID, "pay_"+o.ID); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "orders/s")
			reportCPU(b, cpu0, testenv.ProcessCPU())
			h.report(b)
		})
	}
}

// BenchmarkOrderPath runs the whole order path, JetStream to PAID, with
// pgsim at its default latency (200 ms mean, long tail) and one worker:
// b.N orders are requested at once and drained. It reports orders per
// second and the order latency from transaction 1 to the final status
// (the payment included; the wait in the stream is not). The tokens are
// claimed and the requests published before the clock starts, as gateways
// would have claimed and published them, and the clock starts with the
// worker, its start-up counted: one by one, a claim and a publish each,
// the loop itself takes 2.6 ms an order and the benchmark would measure
// it (≈ 380 orders/s) instead of the order path; published asynchronously
// inside the window, the publishing would take 130 µs of the two cores'
// CPU an order from the path. The worker runs with the default ack wait
// (30 s, not the tests' 1 s): with the tests' every order in flight past
// a third of a second would tell the broker it was still working.
func BenchmarkOrderPath(b *testing.B) { orderPath(b, false) }

// BenchmarkOrderPathAdmissionCheck is BenchmarkOrderPath with and without
// the read of each order's admission from USHER_ADMISSIONS (one get by
// stream sequence from the stream's leader): without it the admissions
// are answered from memory, every other step the same. The difference
// between the two is what the check costs an order.
func BenchmarkOrderPathAdmissionCheck(b *testing.B) {
	b.Run("record=stream", func(b *testing.B) { orderPath(b, false) })
	b.Run("record=memory", func(b *testing.B) { orderPath(b, true) })
}

// memoryAdmissions answers the admission check from the admissions the
// world recorded, as the stream would, without asking it.
type memoryAdmissions struct{ w *world }

func (m memoryAdmissions) Admission(_ context.Context, seq uint64) (event.Admitted, string, error) {
	a, ok := m.w.recorded[seq]
	if !ok {
		return event.Admitted{}, "", errNotRecorded
	}
	return a, event.AdmittedSubject(a.Queue), nil
}

// orderPath is BenchmarkOrderPath; fromMemory answers the admission check
// without the stream (see BenchmarkOrderPathAdmissionCheck).
func orderPath(b *testing.B, fromMemory bool) {
	w := newWorld(b, queueCfg(1<<20), 1<<40, 200)
	toks := w.admit(b.N)
	port, err := testenv.FreePort()
	if err != nil {
		b.Fatal(err)
	}
	ops := fmt.Sprintf("127.0.0.1:%d", port)
	ats := make([]time.Time, len(toks))
	for i, tok := range toks {
		ats[i] = w.redeem(tok)
	}
	ids := make([]string, len(toks))
	acks := make([]jetstream.PubAckFuture, len(toks))
	for i, tok := range toks {
		id, msgID, body := w.requestEvent(tok, "", ats[i])
		f, err := w.js.PublishAsync(event.OrderRequestedSubject(w.queue), body, jetstream.WithMsgID(msgID))
		if err != nil {
			b.Fatal(err)
		}
		ids[i], acks[i] = id, f
	}
	for _, f := range acks {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			b.Fatal(err)
		}
	}
	cpu0 := testenv.ProcessCPU()
	b.ResetTimer()
	start := time.Now()
	h := hooks{}
	if fromMemory {
		h.admissions = memoryAdmissions{w}
	}
	w.start(h, "USHER_PAYMENT_TIMEOUT", "2s", "USHER_ORDER_ACK_WAIT", "30s", "USHER_ORDER_CONCURRENCY", os.Getenv("USHER_BENCH_CONCURRENCY"),
		"USHER_ORDERWORKER_ADDR", ops, "USHER_DB_POOL", os.Getenv("USHER_BENCH_DB_POOL"),
		"USHER_ORDER_WRITERS", os.Getenv("USHER_BENCH_WRITERS"), "USHER_ORDER_BATCH", os.Getenv("USHER_BENCH_BATCH"))
	w.waitFinal(10*time.Minute, ids...)
	elapsed := time.Since(start)
	b.StopTimer()
	reportCPU(b, cpu0, testenv.ProcessCPU())
	var lat []time.Duration
	paid := 0
	for _, id := range ids {
		o := w.order(id)
		if o.Status == orders.Paid {
			paid++
		}
	}
	rows, err := w.db.Latencies(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	lat = rows
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "orders/s")
	b.ReportMetric(float64(b.N-paid), "not-paid")
	mean, under20 := holdFromMetrics(b, "http://"+ops+"/metrics")
	b.ReportMetric(mean*1000, "hold-mean-ms")
	b.ReportMetric(under20*100, "hold-%<=20ms")
	if len(lat) > 0 {
		b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
		b.ReportMetric(ms(lat[len(lat)*95/100]), "p95-ms")
		b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
	}
}

// reportCPU reports the CPU each part of the order path used per order
// between two readings: this test binary (the worker, the embedded NATS
// server, the benchmark's own publishing), PostgreSQL, Redis and pgsim.
func reportCPU(b *testing.B, before, after map[string]time.Duration) {
	self, _ := os.ReadFile("/proc/self/comm")
	parts := []struct{ comm, unit string }{
		{strings.TrimSpace(string(self)), "cpu-µs/order-test"}, {"postgres", "cpu-µs/order-postgres"},
		{"redis-server", "cpu-µs/order-redis"}, {"pgsim", "cpu-µs/order-pgsim"},
	}
	for _, p := range parts {
		if d, ok := after[p.comm]; ok {
			b.ReportMetric(float64(d-before[p.comm])/float64(time.Microsecond)/float64(b.N), p.unit)
		}
	}
}

// holdFromMetrics reads the worker's connection hold histogram: the mean,
// and the share of holds at or under 20 ms (>= 0.99 means p99 <= 20 ms).
func holdFromMetrics(b *testing.B, url string) (mean, under20 float64) {
	res, err := http.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	defer res.Body.Close()
	var sum, count, le20 float64
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		v, _ := strconv.ParseFloat(f[1], 64)
		switch {
		case strings.HasPrefix(line, "usher_db_connection_hold_seconds_sum"):
			sum = v
		case strings.HasPrefix(line, "usher_db_connection_hold_seconds_count"):
			count = v
		case strings.HasPrefix(line, `usher_db_connection_hold_seconds_bucket{le="0.02"}`):
			le20 = v
		}
	}
	if count == 0 {
		return 0, 0
	}
	return sum / count, le20 / count
}
