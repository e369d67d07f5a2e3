package line_test

import (
	"context"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"usher/internal/ratelimit"
	"usher/internal/testenv"
	"usher/internal/waitqueue/linetest"
	"usher/internal/waitqueue/roles"
)

// A join's one round trip before its publish: LookupLimited answers what
// Lookup and the rate limiter's Allow answer apart — the same entry, the
// same decision, the same budget charged — request after request, refused
// ones included (looked up all the same, charged to no limit).
func TestLookupLimitedIsLookupAndAllowInOneStep(t *testing.T) {
	rdb := testenv.Redis(t)
	s, q := roles.New(rdb), testenv.Name(t)
	ctx := context.Background()
	linetest.JoinAll(t, s, q, "ann", "bob")
	if _, err := linetest.Leave(ctx, s, q, 2, "bob"); err != nil {
		t.Fatal(err)
	}
	// The same limits on keys of another queue, decided by the limiter
	// alone: what each decision must be.
	other := q + "-apart"
	lim := ratelimit.New(ratelimit.Direct(rdb))
	user := ratelimit.Policy{Name: "peruser", Rate: 5, Burst: 3}
	ip := ratelimit.Policy{Name: "perip", Rate: 20, Burst: 4}
	checks := func(queue, u string) []ratelimit.Check {
		return []ratelimit.Check{
			{Key: ratelimit.Key(queue, "ip", "192.0.2.1"), Policy: ip},
			{Key: ratelimit.Key(queue, "u", u), Policy: user},
		}
	}
	t0 := time.UnixMicro(1_900_000_000_000_000)
	refused := 0
	for i, step := range []time.Duration{0, 0, 0, 0, 10 * time.Millisecond, 60 * time.Millisecond, 200 * time.Millisecond, 200 * time.Millisecond, time.Second} {
		now := t0.Add(step)
		for _, u := range []string{"ann", "bob", "cy"} {
			got, gotD, err := s.LookupLimited(ctx, q, u, ratelimit.NewPlan(now, checks(q, u)...))
			if err != nil {
				t.Fatal(err)
			}
			want, err := s.Lookup(ctx, q, u)
			if err != nil {
				t.Fatal(err)
			}
			wantD, err := lim.Allow(ctx, now, checks(other, u)...)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("request %d of %s: entry %+v, want Lookup's %+v", i, u, got, want)
			}
			if !reflect.DeepEqual(gotD, wantD) {
				t.Errorf("request %d of %s: decision %+v, want Allow's %+v", i, u, gotD, wantD)
			}
			if !gotD.Allowed {
				refused++
			}
		}
	}
	if refused == 0 {
		t.Fatal("no request was refused: the test checks nothing of a refusal")
	}
	if c, d, err := s.LookupLimited(ctx, q, "ann", ratelimit.NewPlan(t0)); err != nil || !d.Allowed || len(d.Results) != 0 || !c.Found || c.Seq != 1 {
		t.Errorf("no limit on: %+v, %+v, %v; want ann's entry 1, allowed with no results", c, d, err)
	}
}

// Batched, many concurrent calls of one user within one instant are one
// script call each: a burst of 10 lets exactly 10 through.
func TestLookupLimitedHoldsItsBurstUnderConcurrency(t *testing.T) {
	rdb := testenv.Redis(t)
	s, q := roles.New(rdb), testenv.Name(t)
	s.EnableBatching()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = s.RunBatches(ctx, 2) }()
	plan := func() ratelimit.Plan {
		return ratelimit.NewPlan(time.UnixMicro(1_900_000_000_000_000),
			ratelimit.Check{Key: ratelimit.Key(q, "u", "dee"), Policy: ratelimit.Policy{Name: "peruser", Rate: 1, Burst: 10}})
	}
	var allowed atomic.Int32
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, d, err := s.LookupLimited(ctx, q, "dee", plan())
			if err != nil || c.Found {
				t.Errorf("LookupLimited = %+v, %v; want no entry", c, err)
			}
			if d.Allowed {
				allowed.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := allowed.Load(); n != 10 {
		t.Errorf("%d of 64 allowed, want the burst: 10", n)
	}
}
