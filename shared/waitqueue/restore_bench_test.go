package waitqueue_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"usher/shared/testenv"
	"usher/shared/waitqueue"
)

// BenchmarkRestore restores a lost line of 100,000 shoppers (20 admitted,
// the rest waiting, each a user of their own) into an empty queue, as a
// rebuild does after its read: Redis's share of usherctl rebuild. It
// reports records/s and Redis's CPU per record (INFO cpu).
func BenchmarkRestore(b *testing.B) {
	const n = 100_000
	ctx := context.Background()
	rdb := testenv.Redis(b)
	s := waitqueue.New(rdb)
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
		before := redisCPU(b, rdb)
		b.StartTimer()
		res, err := s.Restore(ctx, q, recs)
		if err != nil {
			b.Fatal(err)
		}
		if res.Created[waitqueue.Waiting] != n-20 {
			b.Fatalf("Restore = %+v, want %d waiting created", res, n-20)
		}
		b.StopTimer()
		cpu += redisCPU(b, rdb) - before
		if err := rdb.Eval(ctx, "for _, k in ipairs(redis.call('KEYS', ARGV[1])) do redis.call('UNLINK', k) end return 0", nil,
			"usher:{"+q+"}:*").Err(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(n*b.N), "redis-µs/record")
}

// redisCPU is the CPU time Redis has used so far (INFO cpu, user and
// system).
func redisCPU(b *testing.B, rdb redis.UniversalClient) time.Duration {
	b.Helper()
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("INFO cpu %s: %v", line, err)
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}
