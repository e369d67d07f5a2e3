package ratelimit_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"usher/internal/ratelimit"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
)

// benchChecks is what a join decides: its IP and its user, each on its own
// key out of 10,000, under limits high enough that every request passes
// (the allowed path is the one that writes).
func benchChecks(q string, i int64) []ratelimit.Check {
	n := strconv.FormatInt(i%10_000, 10)
	p := ratelimit.Policy{Rate: ratelimit.MaxRate, Burst: ratelimit.MaxRate}
	return []ratelimit.Check{
		{Key: ratelimit.Key(q, "ip", "10.0."+n), Policy: p},
		{Key: ratelimit.Key(q, "u", "user-"+n), Policy: p},
	}
}

// BenchmarkAllow is one decision after another on one connection: its
// ns/op is a Redis round trip plus the script.
func BenchmarkAllow(b *testing.B) {
	l := newLimiter(b)
	q := testenv.Name(b)
	ctx := context.Background()
	b.ReportAllocs()
	var i int64
	for b.Loop() {
		if _, err := l.Allow(ctx, time.Now(), benchChecks(q, i)...); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkAllowParallel runs decisions from many goroutines (-cpu sets
// GOMAXPROCS; SetParallelism multiplies it), directly on a pooled client
// and through the gateway's batching Store; decisions/s is the throughput.
func BenchmarkAllowParallel(b *testing.B) {
	for _, mode := range []string{"direct", "batched"} {
		b.Run(mode, func(b *testing.B) {
			var run ratelimit.Runner = ratelimit.Direct(testenv.Redis(b))
			if mode == "batched" {
				line := waitqueue.NewClient(testenv.Redis(b))
				line.EnableBatching()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				go line.RunBatches(ctx, 4)
				run = line
			}
			l := ratelimit.New(run)
			q := testenv.Name(b)
			var n atomic.Int64
			b.SetParallelism(32)
			b.ReportAllocs()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					if _, err := l.Allow(ctx, time.Now(), benchChecks(q, n.Add(1))...); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "decisions/s")
		})
	}
}
