package projection_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"usher/internal/testenv"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/roles"
)

// BenchmarkRestore restores a lost line of 100,000 shoppers (20 admitted,
// the rest waiting, each a user of their own) into an empty queue, as a
// rebuild does after its read: Redis's share of usherctl rebuild. It
// reports records/s and Redis's CPU per record (INFO cpu).
func BenchmarkRestore(b *testing.B) {
	const n = 100_000
	ctx := context.Background()
	rdb := testenv.Redis(b)
	s := roles.New(rdb)
	now := time.Now()
	recs := make([]waitqueue.Record, n)
	for i := range recs {
		seq := uint64(i + 1)
		recs[i] = waitqueue.Record{Seq: seq, Status: waitqueue.Waiting, User: "u" + strconv.Itoa(i)}
		if i < 20 {
			recs[i].Status, recs[i].TokenID = waitqueue.Admitted, waitqueue.TokenID("q", epoch, seq)
			recs[i].ReadyAt, recs[i].ExpiresAt = now, now.Add(time.Hour)
		}
	}
	var cpu time.Duration
	for b.Loop() {
		b.StopTimer()
		q := testenv.Name(b)
		before := testenv.RedisCPU(b, rdb)
		b.StartTimer()
		res, err := s.Restore(ctx, q, recs)
		if err != nil {
			b.Fatal(err)
		}
		if res.Created[waitqueue.Waiting] != n-20 {
			b.Fatalf("Restore = %+v, want %d waiting created", res, n-20)
		}
		b.StopTimer()
		cpu += testenv.RedisCPU(b, rdb) - before
		if err := rdb.Eval(ctx, "for _, k in ipairs(redis.call('KEYS', ARGV[1])) do redis.call('UNLINK', k) end return 0", nil,
			"usher:{"+q+"}:*").Err(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(n*b.N), "redis-µs/record")
}
