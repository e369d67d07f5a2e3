package projection_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"usher/internal/testenv"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/roles"
)

// BenchmarkShoppersLeaveRedisAtItsBaseline measures that Redis holds only
// what is live: USHER_BENCH_SHOPPERS shoppers (100,000 by default) join,
// are admitted and finish (their tokens expire), and once their tombstones
// have expired Redis is back at the memory it had before they came.
// Reported: used_memory before, at the peak and after, in bytes, and the
// keys left.
//
//	USHER_BENCH_SHOPPERS=1000000 go test ./internal/waitqueue/projection -run '^$' -bench ShoppersLeave -benchtime 1x -timeout 30m
func BenchmarkShoppersLeaveRedisAtItsBaseline(b *testing.B) {
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("USHER_BENCH_SHOPPERS")); err == nil && v > 0 {
		n = v
	}
	url, _ := testenv.RedisServer(b)
	rdb, err := waitqueue.DialURL(url, 8)
	if err != nil {
		b.Fatal(err)
	}
	defer rdb.Close()
	ctx := context.Background()
	mem := func(field string) int64 {
		info, err := rdb.Info(ctx, "memory").Result()
		if err != nil {
			b.Fatal(err)
		}
		for _, l := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(l, field+":"); ok {
				m, _ := strconv.ParseInt(v, 10, 64)
				return m
			}
		}
		return 0
	}
	used := func() int64 { return mem("used_memory") }
	for b.Loop() {
		s := roles.New(rdb)
		s.SetTombstoneTTL(2 * time.Second)
		q := testenv.Name(b)
		base, baseData := used(), mem("used_memory_dataset")
		b.ReportMetric(float64(baseData), "dataset-base-B")
		const batch = 1000
		evs := make([]waitqueue.EntryEvent, 0, batch)
		for seq := 1; seq <= n; seq += batch {
			evs = evs[:0]
			for i := seq; i < seq+batch && i <= n; i++ {
				evs = append(evs, waitqueue.EntryEvent{StreamSeq: uint64(i), User: "user-" + strconv.Itoa(i)})
			}
			if _, err := s.ApplyEntries(ctx, q, epoch, uint64(seq-1), evs); err != nil {
				b.Fatal(err)
			}
		}
		peak := used()
		// Admitted 10,000 a tick with one-second tokens, announced; the
		// tokens run out unused and their shoppers are done.
		tk := waitqueue.Tick{Epoch: epoch, TargetActive: 10_000, MaxAdmitPerTick: 10_000, TickLength: 10 * time.Millisecond, TokenTTL: time.Second}
		for admitted := 0; admitted < n; {
			r := testenv.Tick(b, s, q, tk)
			admitted += r.Admitted
			announceAll(b, s, q)
			if r.Admitted == 0 {
				time.Sleep(100 * time.Millisecond) // the slots free when the tokens expire
			}
		}
		time.Sleep(1100 * time.Millisecond)
		testenv.Tick(b, s, q, tk) // expires the last tokens
		// Redis expires the tombstones by itself; wait until it has.
		deadline := time.Now().Add(5 * time.Minute)
		for keys(b, rdb) > 8 && time.Now().Before(deadline) {
			time.Sleep(500 * time.Millisecond)
		}
		// Redis shrinks its key table some seconds after the keys went.
		time.Sleep(3 * time.Second)
		after, dataset := used(), mem("used_memory_dataset")
		b.ReportMetric(float64(dataset), "dataset-after-B")
		b.ReportMetric(float64(base), "base-B")
		b.ReportMetric(float64(peak), "peak-B")
		b.ReportMetric(float64(after), "after-B")
		b.ReportMetric(float64(keys(b, rdb)), "keys-left")
		b.Logf("%d shoppers: used_memory %d B before, %d B with all waiting, %d B after (%+d B, dataset %d B); keys left: %d",
			n, base, peak, after, after-base, dataset, keys(b, rdb))
	}
}

func announceAll(b *testing.B, s *roles.All, q string) {
	for {
		out, err := s.Outbox(context.Background(), q, 10_000)
		if err != nil {
			b.Fatal(err)
		}
		if len(out) == 0 {
			return
		}
		seqs := make([]uint64, len(out))
		for i, a := range out {
			seqs[i] = a.Seq
		}
		if err := s.Announced(context.Background(), q, seqs); err != nil {
			b.Fatal(err)
		}
	}
}

func keys(b *testing.B, rdb redis.UniversalClient) int64 {
	n, err := rdb.DBSize(context.Background()).Result()
	if err != nil {
		b.Fatal(err)
	}
	return n
}
