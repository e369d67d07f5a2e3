package line_test

import (
	"context"
	"strconv"
	"testing"

	"usher/internal/testenv"
	"usher/internal/waitqueue"
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

// BenchmarkIngestOfAGroupOf64 is the gateway's ingest of one
// usher.joins.v2 message listing 64 joins, into a line of 1,000: the call
// group commit makes once per message. redis-µs/join is Redis's CPU (INFO
// cpu) per join: the queue's shard's share of a join, the hot queue's
// ceiling.
func BenchmarkIngestOfAGroupOf64(b *testing.B) {
	ctx := context.Background()
	s, q := linetest.New(b)
	linetest.JoinAll(b, s, q, linetest.Users(1000)...)
	rdb := testenv.Redis(b)
	joins := make([]waitqueue.ListedJoin, 64)
	seq := uint64(1000)
	before, n := testenv.RedisCPU(b, rdb), 0
	b.ReportAllocs()
	for b.Loop() {
		seq++
		for i := range joins {
			joins[i] = waitqueue.ListedJoin{User: "g" + strconv.FormatUint(seq, 10) + "-" + strconv.Itoa(i)}
		}
		if _, err := s.IngestJoins(ctx, q, epoch, seq, joins); err != nil {
			b.Fatal(err)
		}
		n += len(joins)
	}
	b.ReportMetric(float64((testenv.RedisCPU(b, rdb)-before).Microseconds())/float64(n), "redis-µs/join")
}
