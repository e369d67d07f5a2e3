package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"usher/internal/event"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
)

// BenchmarkUsherctl measures replay (events/s to io.Discard) and rebuild
// (shoppers/s into an empty Redis) for a queue of USHERCTL_BENCH_JOINS
// joins (default 100000), of which the first 20 are admitted; then the
// same rebuild once the orders stream also holds as many order events of
// another queue (beside-orders: the orders stream keeps every queue's
// events for 30 days). Run:
//
//	USHERCTL_BENCH_JOINS=1000000 go test ./usherctl -run '^$' -bench Usherctl -benchtime 1x -timeout 30m
func BenchmarkUsherctl(b *testing.B) {
	n := 100_000
	if v := os.Getenv("USHERCTL_BENCH_JOINS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			b.Fatalf("USHERCTL_BENCH_JOINS=%q: want a positive integer", v)
		}
	}
	w := newWorld(b)
	w.redisURL, _ = testenv.RedisServer(b)
	q := "bench"
	start := time.Now()
	publishJoins(b, w.js, q, n)
	now := time.Now()
	for seq := uint64(1); seq <= 20; seq++ {
		w.admit(q, seq, fmt.Sprintf("u%d", seq-1), now, now.Add(time.Hour))
	}
	b.Logf("published %d joins in %v", n, time.Since(start).Round(time.Millisecond))

	b.Run("replay", func(b *testing.B) {
		for b.Loop() {
			c := &cli{getenv: func(k string) string { return map[string]string{"USHER_NATS_URL": w.natsURL}[k] },
				stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard, now: time.Now}
			if err := c.run(context.Background(), []string{"replay", "--stream", "entries", "--queue", q, "--max", strconv.Itoa(n)}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
	})
	b.Run("rebuild", func(b *testing.B) { benchRebuild(b, w, q, n) })
	b.Run("beside-orders", func(b *testing.B) {
		publishOrders(b, w.js, "elsewhere", n) // before b.Loop: not timed
		benchRebuild(b, w, q, n)
	})
}

// benchRebuild rebuilds queue q of n shoppers into an empty Redis.
func benchRebuild(b *testing.B, w *world, q string, n int) {
	var redisCPU time.Duration
	for b.Loop() {
		b.StopTimer()
		flush(b, w.redisURL)
		before := redisCPUTime(b, w.redisURL)
		b.StartTimer()
		r := w.usherctl("rebuild", "--queue", q)
		if r.err != nil {
			b.Fatal(r.err)
		}
		b.StopTimer()
		redisCPU += redisCPUTime(b, w.redisURL) - before
		b.StartTimer()
		b.Log(strings.SplitN(r.stdout, "\n", 2)[0]) // how long the read took, and the whole rebuild
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "shoppers/s")
	b.ReportMetric(float64(redisCPU.Microseconds())/float64(n*b.N), "redis-µs/shopper")
}

// publishJoins publishes n joins of distinct users as the gateway does.
func publishJoins(b *testing.B, js jetstream.JetStream, q string, n int) {
	at := time.Now()
	publishEach(b, js, n, func(i int) (string, string, []byte, error) {
		user := "u" + strconv.Itoa(i)
		id := q + "/" + user + "/0"
		body, err := event.Marshal(id, event.TypeJoined, user, at, event.Joined{Queue: q, User: user, JoinedAt: at})
		return event.EnterSubject(q), id, body, err
	})
}

// publishOrders publishes n order requests of queue q, each for a token of
// its own.
func publishOrders(b *testing.B, js jetstream.JetStream, q string, n int) {
	at := time.Now()
	publishEach(b, js, n, func(i int) (string, string, []byte, error) {
		id := "ord-" + q + "-" + strconv.Itoa(i)
		user := "u" + strconv.Itoa(i)
		body, err := event.Marshal(id, event.TypeOrderRequested, user, at, event.OrderRequested{OrderID: id,
			TokenID: q + ":" + strconv.Itoa(i+1), Queue: q, User: user, SKU: "sku", Quantity: 1,
			TokenExpiresAt: at.Add(time.Hour), RequestedAt: at})
		return event.OrderRequestedSubject(q), id, body, err
	})
}

// publishEach publishes the n messages msg makes (subject, message id,
// body), asynchronously with a bounded window of acks outstanding.
func publishEach(b *testing.B, js jetstream.JetStream, n int, msg func(i int) (subject, id string, body []byte, err error)) {
	b.Helper()
	const window = 4096
	pending := make([]jetstream.PubAckFuture, 0, window)
	wait := func() {
		for _, f := range pending {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				b.Fatal(err)
			}
		}
		pending = pending[:0]
	}
	for i := range n {
		subject, id, body, err := msg(i)
		if err != nil {
			b.Fatal(err)
		}
		f, err := js.PublishAsync(subject, body, jetstream.WithMsgID(id))
		if err != nil {
			b.Fatal(err)
		}
		if pending = append(pending, f); len(pending) == window {
			wait()
		}
	}
	wait()
}

// redisCPUTime is the CPU time Redis at url has used so far.
func redisCPUTime(b *testing.B, url string) time.Duration {
	b.Helper()
	rdb, err := waitqueue.DialURL(url, 1)
	if err != nil {
		b.Fatal(err)
	}
	defer rdb.Close()
	return testenv.RedisCPU(b, rdb)
}

func flush(b *testing.B, url string) {
	b.Helper()
	rdb, err := waitqueue.DialURL(url, 1)
	if err != nil {
		b.Fatal(err)
	}
	defer rdb.Close()
	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		b.Fatal(err)
	}
}
