package line_test

import (
	"context"
	"strconv"
	"testing"

	"usher/internal/waitqueue/linetest"
)

// BenchmarkPollOfAWaitingShopper is a shopper's poll, the gateway's most
// frequent call to Redis, in a line of 1,000: one script call, its
// arguments and its 12-field reply. It reports allocations, the part of
// its cost the Go side controls.
func BenchmarkPollOfAWaitingShopper(b *testing.B) {
	ctx := context.Background()
	s, q := linetest.New(b)
	linetest.JoinAll(b, s, q, linetest.Users(1000)...)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Poll(ctx, q, 500); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkIngestOfAJoin is the gateway's ingest of a join it just
// published, into a line of 1,000.
func BenchmarkIngestOfAJoin(b *testing.B) {
	ctx := context.Background()
	s, q := linetest.New(b)
	linetest.JoinAll(b, s, q, linetest.Users(1000)...)
	seq := uint64(1000)
	b.ReportAllocs()
	for b.Loop() {
		seq++
		if _, err := s.Ingest(ctx, q, epoch, seq, "j"+strconv.FormatUint(seq, 10), 0); err != nil {
			b.Fatal(err)
		}
	}
}
