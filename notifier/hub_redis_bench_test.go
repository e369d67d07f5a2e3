package main

import (
	"context"
	"fmt"
	"testing"

	"usher/internal/testenv"
	"usher/internal/waitqueue/linetest"
)

// BenchmarkPositionTickOnRedis is one queue's position tick against a real
// line of as many waiting shoppers as the notifier holds streams, all
// ranked once already: redis-µs/tick is Redis's CPU (INFO cpu) a tick, the
// work the queue's shard does for this notifier's streams each second. It
// stays flat however many streams are held (resyncPerTick).
func BenchmarkPositionTickOnRedis(b *testing.B) {
	for _, n := range []int{1000, 20000} {
		b.Run(fmt.Sprintf("streams=%d", n), func(b *testing.B) {
			s, q := linetest.New(b)
			linetest.JoinAll(b, s, q, linetest.Users(n)...)
			h := newBenchHub(s)
			for i := range n {
				h.register(newClient(q, uint64(i+1)))
			}
			ctx := context.Background()
			h.refresh(ctx, q, &pacer{}) // first ranks
			rdb := testenv.Redis(b)
			before, tick := testenv.RedisCPU(b, rdb), int64(0)
			for b.Loop() {
				tick++
				h.refresh(ctx, q, &pacer{tick: tick})
			}
			b.ReportMetric(float64((testenv.RedisCPU(b, rdb)-before).Microseconds())/float64(b.N), "redis-µs/tick")
		})
	}
}
