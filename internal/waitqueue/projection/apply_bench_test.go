package projection_test

import (
	"context"
	"fmt"
	"testing"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/roles"
)

// BenchmarkApplyEntries1000 applies 1,000 join events to the line in one
// script call, as the admitter's follower does.
func BenchmarkApplyEntries1000(b *testing.B) {
	ctx := context.Background()
	s := roles.New(testenv.Redis(b))
	q := testenv.Name(b)
	seq := uint64(0)
	evs := make([]waitqueue.EntryEvent, 1000)
	for b.Loop() {
		prev := seq
		for i := range evs {
			seq++
			evs[i] = waitqueue.EntryEvent{StreamSeq: seq, User: fmt.Sprintf("u%d", seq)}
		}
		if _, err := s.ApplyEntries(ctx, q, epoch, prev, evs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*1000)/b.Elapsed().Seconds(), "joins/s")
}
