package drop_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"usher/internal/keyspace"
	"usher/internal/lottery"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/roles"
)

// BenchmarkDrawOfAPreQueue measures the draw of a scheduled drop's
// pre-queue of USHER_BENCH_PREQUEUE shoppers (100,000 by default; the
// figure in BENCHMARKS.md is 1,000,000), as the admitter does it: read the
// pre-queue, sort it by lottery, place it in one script. Reported: the
// time of each step, Redis's used_memory before and after the draw, and an
// anchor measured in the same run on the same Redis — ZADD of as many
// members in pipelined batches of 10,000 — so that the figure is a ratio.
//
//	USHER_BENCH_PREQUEUE=1000000 go test ./internal/waitqueue/drop -run '^$' -bench DrawOfAPreQueue -benchtime 1x -timeout 30m
func BenchmarkDrawOfAPreQueue(b *testing.B) {
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("USHER_BENCH_PREQUEUE")); err == nil && v > 0 {
		n = v
	}
	url, _ := testenv.RedisServer(b)
	rdb, err := waitqueue.DialURL(url, 8) // the services' client: the draw fits its timeouts
	if err != nil {
		b.Fatal(err)
	}
	defer rdb.Close()
	ctx := context.Background()
	seed, _ := lottery.NewSeed()
	for b.Loop() {
		s := roles.New(rdb)
		q := testenv.Name(b)
		const batch = 1000
		evs := make([]waitqueue.EntryEvent, 0, batch)
		for seq := 1; seq <= n; seq += batch {
			evs = evs[:0]
			for i := seq; i < seq+batch && i <= n; i++ {
				evs = append(evs, waitqueue.EntryEvent{StreamSeq: uint64(i), User: "user-" + strconv.Itoa(i) + "@example.com",
					Kind: waitqueue.PreQueue})
			}
			if _, err := s.ApplyEntries(ctx, q, epoch, uint64(seq-1), evs); err != nil {
				b.Fatal(err)
			}
		}
		before := usedMemory(b, rdb)
		// While the order is staged it takes as much again as the
		// pre-queue set.
		staged, err := rdb.MemoryUsage(ctx, keyspace.Of(q).PreQueue(), 0).Result()
		if err != nil {
			b.Fatal(err)
		}

		t0 := time.Now()
		pre, _, version, err := s.PreQueue(ctx, q)
		if err != nil || len(pre) != n {
			b.Fatalf("PreQueue = %d entries, %v", len(pre), err)
		}
		t1 := time.Now()
		list := make([]lottery.Entry, len(pre))
		for i, e := range pre {
			list[i] = lottery.Entry{Seq: e.Seq, User: e.User}
		}
		sorted := lottery.Sorted(seed, list)
		order := make([]uint64, len(sorted))
		for i, e := range sorted {
			order[i] = e.Seq
		}
		digest := lottery.Digest(sorted)
		if err := rdb.Do(ctx, "SLOWLOG", "RESET").Err(); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		placed, err := s.Draw(ctx, q, epoch, version, order, digest)
		if err != nil || placed != n {
			b.Fatalf("Draw = %d, %v", placed, err)
		}
		t3 := time.Now()
		// The longest Redis was busy with one command of the draw (the
		// slow log keeps those over 10 ms).
		slow, err := rdb.Do(ctx, "SLOWLOG", "GET", 1000).Slice()
		if err != nil {
			b.Fatal(err)
		}
		var busy time.Duration
		var busiest string
		for _, e := range slow {
			f := e.([]any)
			if d := time.Duration(f[2].(int64)) * time.Microsecond; d > busy {
				args := f[3].([]any)
				busy, busiest = d, fmt.Sprint(args[0])
			}
		}
		settle := time.Now()
		for {
			left, err := s.SettleDraw(ctx, q)
			if err != nil {
				b.Fatal(err)
			}
			if left == 0 {
				break
			}
		}
		settled := time.Since(settle)
		after := usedMemory(b, rdb)

		// The anchor: as many ZADDs, pipelined.
		anchorKey := "anchor:{" + q + "}"
		t4 := time.Now()
		for i := 0; i < n; i += 10_000 {
			_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				for j := i; j < i+10_000 && j < n; j++ {
					p.ZAdd(ctx, anchorKey, redis.Z{Score: float64(j), Member: j})
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		anchor := time.Since(t4)
		rdb.Del(ctx, anchorKey)

		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		b.ReportMetric(ms(t1.Sub(t0)), "read-ms")
		b.ReportMetric(ms(t2.Sub(t1)), "sort-ms")
		b.ReportMetric(ms(t3.Sub(t2)), "stage+script-ms")
		b.ReportMetric(ms(busy), "longest-command-ms")
		b.ReportMetric(ms(settled), "settle-ms")
		b.ReportMetric(ms(t3.Sub(t0)), "draw-ms")
		b.ReportMetric(ms(anchor), "anchor-zadd-ms")
		b.ReportMetric(float64(t3.Sub(t0))/float64(anchor), "draw/anchor")
		b.ReportMetric(float64(before), "mem-before-B")
		b.ReportMetric(float64(after), "mem-after-B")
		b.ReportMetric(float64(staged), "mem-staged-B")
		b.Logf("draw of %d: read %s, sort %s, stage and place %s (longest single command %s: %s), total %s; settled in batches over %s; anchor %d pipelined ZADDs %s (ratio %.2f); used_memory %d B before, %d B after, %d B more while staged",
			n, t1.Sub(t0).Round(time.Millisecond), t2.Sub(t1).Round(time.Millisecond), t3.Sub(t2).Round(time.Millisecond),
			busy.Round(time.Millisecond), busiest, t3.Sub(t0).Round(time.Millisecond), settled.Round(time.Millisecond), n, anchor.Round(time.Millisecond),
			float64(t3.Sub(t0))/float64(anchor), before, after, staged)
		rdb.FlushAll(ctx)
	}
}

func usedMemory(b *testing.B, rdb redis.UniversalClient) int64 {
	b.Helper()
	info, err := rdb.Info(context.Background(), "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "used_memory:"); ok {
			m, _ := strconv.ParseInt(v, 10, 64)
			return m
		}
	}
	return 0
}
