package adaptive_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"usher/internal/adaptive"
	"usher/internal/keyspace"
	"usher/internal/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Stop()
	os.Exit(code)
}

const window = 100 * time.Millisecond

// earlyInAWindow waits until Redis time is in the first fifth of a window,
// so that the steps and records a test means for one window fall in it:
// begun late in a window, they straddled its end on a loaded machine under
// the race detector (the second step found the next window due).
func earlyInAWindow(t *testing.T, rdb redis.UniversalClient) {
	t.Helper()
	ms := window.Milliseconds()
	testenv.Eventually(t, 5*time.Second, func() error {
		now, err := rdb.Time(context.Background()).Result()
		if err != nil {
			return err
		}
		if at := now.UnixMilli() % ms; at >= ms/5 {
			return fmt.Errorf("%d ms into a %d ms window", at, ms)
		}
		return nil
	}, "Redis time early in a window")
}

// nextWindow waits until Redis time enters a window after w and returns it.
func nextWindow(t *testing.T, st *adaptive.Store, q string, p adaptive.Params, w int64) adaptive.Step {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		s, err := st.Step(context.Background(), q, p)
		if err != nil {
			t.Fatal(err)
		}
		if s.Window > w {
			return s
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no window after %d within 5 s", w)
	return adaptive.Step{}
}

func params(start int) adaptive.Params {
	return adaptive.Params{Window: window, Bounds: adaptive.Bounds{Min: 2, Max: 50, Start: start}, Lease: time.Second}
}

// A controller starts at the configured start; from the second window
// after it, the first step of each window claims its decision for one
// caller, with the previous window's figures as the order workers recorded
// them; a commit makes the new limit everyone's.
func TestStepClaimsEachWindowOnce(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	st, q := adaptive.NewStore(rdb), testenv.Name(t)
	p := params(20)
	earlyInAWindow(t, rdb)

	s, err := st.Step(ctx, q, p)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Started || s.Limit != 20 || s.Reason != adaptive.ReasonStart || s.Due {
		t.Fatalf("first step = %+v, want started at 20, nothing due", s)
	}
	if again, _ := st.Step(ctx, q, p); again.Due || again.Started {
		t.Fatalf("a second step in the start window = %+v, want nothing due", again)
	}
	first := nextWindow(t, st, q, p, s.Window)
	if first.Due || first.Limit != 20 {
		t.Fatalf("the first step of the window after the start = %+v, want 20 and nothing due", first)
	}
	// The order workers' figures, in the first whole window.
	for range 3 {
		if err := st.Record(ctx, q, window, adaptive.Sample{Orders: 2, LatencyMs: 500, MaxMs: 300, Holds: 4, SlowHolds: 1, HoldMaxMs: 12.5}); err != nil {
			t.Fatal(err)
		}
	}
	due := nextWindow(t, st, q, p, first.Window)
	if !due.Due {
		t.Fatalf("the first step of the next window = %+v, want its decision claimed", due)
	}
	other, err := st.Step(ctx, q, p)
	if err != nil {
		t.Fatal(err)
	}
	if other.Due || other.Limit != 20 {
		t.Fatalf("another admitter's step in a claimed window = %+v, want the limit and nothing due", other)
	}
	want := adaptive.Sample{Orders: 6, LatencyMs: 1500, MaxMs: 300, Holds: 12, SlowHolds: 3, HoldMaxMs: 12.5}
	if due.Window != first.Window+1 || due.Last.Sample != want {
		t.Fatalf("claimed window %d with figures %+v, want window %d with %+v", due.Window, due.Last.Sample, first.Window+1, want)
	}
	next, d := adaptive.Decide(p.Bounds, due.State, due.Last)
	if err := st.Commit(ctx, q, p, due, next, d, due.Last, due.EventLimit); err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(ctx, q, p, due, next, d, due.Last, due.EventLimit); !errors.Is(err, adaptive.ErrNotDecided) {
		t.Fatalf("a second commit of the window = %v, want ErrNotDecided", err)
	}
	after, err := st.Step(ctx, q, p)
	if err != nil {
		t.Fatal(err)
	}
	if after.Limit != d.Limit || after.Reason != d.Reason {
		t.Fatalf("after the commit the step says %d (%s), want %d (%s)", after.Limit, after.Reason, d.Limit, d.Reason)
	}
	status, err := st.Status(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if !status.Found || status.Limit != d.Limit || status.Reason != d.Reason || status.Orders != 6 || status.DecidedAt.IsZero() {
		t.Fatalf("Status = %+v, want %d (%s) over 6 orders", status, d.Limit, d.Reason)
	}
}

// The window a controller started in is never judged: only the orders that
// began and ended within it finished in it, the short ones. Its figures,
// however bad or good, reach no decision; the first claim, a window later,
// has that window's figures.
func TestTheStartWindowIsNotJudged(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	st, q := adaptive.NewStore(rdb), testenv.Name(t)
	p := params(20)
	earlyInAWindow(t, rdb)
	s, err := st.Step(ctx, q, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Record(ctx, q, window, adaptive.Sample{Orders: 9, LatencyMs: 9 * 80, MaxMs: 95}); err != nil {
		t.Fatal(err)
	}
	after := nextWindow(t, st, q, p, s.Window)
	if after.Due {
		t.Fatalf("the step after the start window = %+v (figures %+v), want nothing due", after, after.Last.Sample)
	}
	whole := adaptive.Sample{Orders: 40, LatencyMs: 40 * 250, MaxMs: 700}
	if err := st.Record(ctx, q, window, whole); err != nil {
		t.Fatal(err)
	}
	due := nextWindow(t, st, q, p, after.Window)
	if !due.Due || due.Window != s.Window+2 || due.Last.Sample != whole {
		t.Fatalf("first claim = window %d due %v with %+v, want window %d with %+v", due.Window, due.Due, due.Last.Sample, s.Window+2, whole)
	}
}

// Several admitters stepping at once make exactly one decision per window.
func TestOneDecisionPerWindowAcrossAdmitters(t *testing.T) {
	ctx := context.Background()
	q := testenv.Name(t)
	p := params(10)
	var mu sync.Mutex
	claims := map[int64]int{}
	var wg sync.WaitGroup
	stop := time.Now().Add(time.Second)
	for range 4 {
		st := adaptive.NewStore(testenv.Redis(t)) // an admitter of its own
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				s, err := st.Step(ctx, q, p)
				if err != nil {
					t.Error(err)
					return
				}
				if s.Due {
					mu.Lock()
					claims[s.Window]++
					mu.Unlock()
					next, d := adaptive.Decide(p.Bounds, s.State, s.Last)
					if err := st.Commit(ctx, q, p, s, next, d, s.Last, s.EventLimit); err != nil {
						t.Error(err)
					}
				}
				time.Sleep(3 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	if len(claims) < 5 {
		t.Fatalf("%d windows decided in 1 s of 0.1 s windows, want at least 5", len(claims))
	}
	for w, n := range claims {
		if n != 1 {
			t.Errorf("window %d claimed %d times, want once", w, n)
		}
	}
}

// A claim whose holder died before committing lapses after its lease: the
// window is decided by someone else, once.
func TestALapsedClaimIsTakenOver(t *testing.T) {
	ctx := context.Background()
	st, q := adaptive.NewStore(testenv.Redis(t)), testenv.Name(t)
	p := params(10)
	p.Window = time.Second // the lease must lapse within the window
	p.Lease = 50 * time.Millisecond
	s, err := st.Step(ctx, q, p)
	if err != nil {
		t.Fatal(err)
	}
	dead := nextWindow(t, st, q, p, s.Window+1)
	if !dead.Due {
		t.Fatalf("step = %+v, want the window claimed", dead)
	}
	time.Sleep(80 * time.Millisecond)
	taken, err := st.Step(ctx, q, p)
	if err != nil {
		t.Fatal(err)
	}
	if taken.Window != dead.Window {
		t.Skipf("the window ended meanwhile (%d → %d): a slow machine", dead.Window, taken.Window)
	}
	if !taken.Due {
		t.Fatalf("a step after the lease = %+v, want the window claimed again", taken)
	}
	next, d := adaptive.Decide(p.Bounds, taken.State, taken.Last)
	if err := st.Commit(ctx, q, p, taken, next, d, taken.Last, taken.EventLimit); err != nil {
		t.Fatal(err)
	}
	// The first holder comes back: too late.
	if err := st.Commit(ctx, q, p, dead, next, d, dead.Last, dead.EventLimit); !errors.Is(err, adaptive.ErrNotDecided) {
		t.Fatalf("the lapsed holder's commit = %v, want ErrNotDecided", err)
	}
}

// A new targetActive starts the controller again there: an operator's
// explicit word wins over what the controller learnt.
func TestANewStartRestartsTheController(t *testing.T) {
	ctx := context.Background()
	st, q := adaptive.NewStore(testenv.Redis(t)), testenv.Name(t)
	p := params(10)
	s, err := st.Step(ctx, q, p)
	if err != nil {
		t.Fatal(err)
	}
	due := nextWindow(t, st, q, p, s.Window+1)
	next, d := adaptive.Decide(p.Bounds, adaptive.State{Limit: 40}, adaptive.Window{})
	if err := st.Commit(ctx, q, p, due, next, d, adaptive.Window{}, 40); err != nil {
		t.Fatal(err)
	}
	if s, _ := st.Step(ctx, q, p); s.Limit != 40 {
		t.Fatalf("limit %d after the commit, want 40", s.Limit)
	}
	p.Bounds.Start = 30
	s, err = st.Step(ctx, q, p)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Started || s.Limit != 30 || s.Reason != adaptive.ReasonStart {
		t.Fatalf("after targetActive 30: %+v, want restarted at 30", s)
	}
}

// Every key the adaptive admission writes carries the queue's hash tag
// and a lifetime (keyspace: LimitTTL, OrderWindowTTL).
func TestKeysHaveOwnersAndLifetimes(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	st, q := adaptive.NewStore(rdb), testenv.Name(t)
	if _, err := st.Step(ctx, q, params(10)); err != nil {
		t.Fatal(err)
	}
	if err := st.Record(ctx, q, window, adaptive.Sample{Orders: 1, LatencyMs: 10}); err != nil {
		t.Fatal(err)
	}
	var keys []string
	iter := rdb.Scan(ctx, 0, keyspace.Of(q).Pattern(), 100).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if len(keys) != 2 {
		t.Fatalf("keys %v, want the limit and one window", keys)
	}
	for _, k := range keys {
		ttl, err := rdb.TTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		want := keyspace.OrderWindowTTL(window)
		if k == keyspace.Of(q).Limit() {
			want = keyspace.LimitTTL
		}
		if ttl <= 0 || ttl > want {
			t.Errorf("%s lives %v, want (0, %v]", k, ttl, want)
		}
	}
}
