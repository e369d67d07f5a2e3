package ratelimit_test

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"usher/internal/ratelimit"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Stop()
	os.Exit(code)
}

func newLimiter(t testing.TB) *ratelimit.Limiter {
	t.Helper()
	return ratelimit.New(ratelimit.Direct(testenv.Redis(t)))
}

// t0 is a fixed clock reading: the script only ever sees the caller's time.
var t0 = time.UnixMicro(1_800_000_000_000_000)

func TestGCRA(t *testing.T) {
	p := ratelimit.Policy{Name: "peruser", Rate: 5, Burst: 3} // one every 200 ms
	type step struct {
		at            time.Duration // since t0
		wantAllowed   bool
		wantRemaining int
		wantRetry     time.Duration
		wantReset     time.Duration
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"a burst at once, then refused until one interval passed", []step{
			{0, true, 2, 0, 200 * time.Millisecond},
			{0, true, 1, 0, 400 * time.Millisecond},
			{0, true, 0, 0, 600 * time.Millisecond},
			{0, false, 0, 200 * time.Millisecond, 600 * time.Millisecond},
			{199 * time.Millisecond, false, 0, time.Millisecond, 401 * time.Millisecond},
			{200 * time.Millisecond, true, 0, 0, 600 * time.Millisecond},
		}},
		{"the sustained rate is always allowed", []step{
			{0, true, 2, 0, 200 * time.Millisecond},
			{200 * time.Millisecond, true, 2, 0, 200 * time.Millisecond},
			{400 * time.Millisecond, true, 2, 0, 200 * time.Millisecond},
		}},
		{"a quiet client gets its whole burst back, no more", []step{
			{0, true, 2, 0, 200 * time.Millisecond},
			{0, true, 1, 0, 400 * time.Millisecond},
			{time.Hour, true, 2, 0, 200 * time.Millisecond},
		}},
		{"a clock behind the last request is no way round the limit", []step{
			{time.Second, true, 2, 0, 200 * time.Millisecond},
			{time.Second, true, 1, 0, 400 * time.Millisecond},
			{time.Second, true, 0, 0, 600 * time.Millisecond},
			{0, false, 0, 1200 * time.Millisecond, 1600 * time.Millisecond},
		}},
	}
	l := newLimiter(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := ratelimit.Key(testenv.Name(t), "u", "alice")
			for i, s := range tt.steps {
				d, err := l.Allow(context.Background(), t0.Add(s.at), ratelimit.Check{Key: key, Policy: p})
				if err != nil {
					t.Fatal(err)
				}
				got := d.Results[0]
				if d.Allowed != s.wantAllowed || got.Remaining != s.wantRemaining || got.RetryAfter != s.wantRetry || got.ResetAfter != s.wantReset {
					t.Errorf("step %d at +%v: allowed %v remaining %d retry %v reset %v, want %v %d %v %v",
						i, s.at, d.Allowed, got.Remaining, got.RetryAfter, got.ResetAfter,
						s.wantAllowed, s.wantRemaining, s.wantRetry, s.wantReset)
				}
			}
		})
	}
}

// A request refused by one limit is charged to none: the per-IP budget of
// a shared address is not eaten by one user hammering past their own limit.
func TestRefusedRequestsChargeNoLimit(t *testing.T) {
	l := newLimiter(t)
	q := testenv.Name(t)
	ip := ratelimit.Check{Key: ratelimit.Key(q, "ip", "192.0.2.1"), Policy: ratelimit.Policy{Name: "perip", Rate: 1, Burst: 3}}
	user := ratelimit.Check{Key: ratelimit.Key(q, "u", "bob"), Policy: ratelimit.Policy{Name: "peruser", Rate: 1, Burst: 1}}
	ctx := context.Background()
	if d, _ := l.Allow(ctx, t0, ip, user); !d.Allowed {
		t.Fatalf("first request refused: %+v", d)
	}
	for range 5 {
		d, err := l.Allow(ctx, t0, ip, user)
		if err != nil {
			t.Fatal(err)
		}
		denied, ok := d.Denied()
		if d.Allowed || !ok || denied.Policy.Name != "peruser" || d.Results[0].Remaining != 2 {
			t.Fatalf("Allow over the user limit = %+v, want refused by peruser with 2 left on perip", d)
		}
	}
	other := ratelimit.Check{Key: ratelimit.Key(q, "u", "carol"), Policy: user.Policy}
	d, _ := l.Allow(ctx, t0, ip, other)
	if got, want := d.Results[0].Remaining, 1; !d.Allowed || got != want {
		t.Fatalf("another user on the same IP: allowed %v, perip remaining %d, want allowed with %d left", d.Allowed, got, want)
	}
}

func TestLimitsThatAreOffCostNothing(t *testing.T) {
	// A limiter without Redis: any call to it would fail.
	l := ratelimit.New(nil)
	d, err := l.Allow(context.Background(), t0, ratelimit.Check{Key: "k", Policy: ratelimit.Policy{Name: "perip"}})
	if err != nil || !d.Allowed || len(d.Results) != 0 {
		t.Fatalf("Allow with every limit off = %+v, %v; want allowed without results", d, err)
	}
}

// However many gateways decide at once, exactly the burst gets through: the
// decision is one atomic script.
func TestConcurrentDecisionsAreExact(t *testing.T) {
	line := waitqueue.NewClient(testenv.Redis(t))
	line.EnableBatching()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go line.RunBatches(ctx, 4)
	for name, run := range map[string]ratelimit.Runner{"direct": ratelimit.Direct(testenv.Redis(t)), "batched": line} {
		t.Run(name, func(t *testing.T) {
			l := ratelimit.New(run)
			c := ratelimit.Check{Key: ratelimit.Key(testenv.Name(t), "orders", "all"), Policy: ratelimit.Policy{Name: "orders", Rate: 1, Burst: 50}}
			var allowed atomic.Int64
			var wg sync.WaitGroup
			for range 500 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					d, err := l.Allow(ctx, t0, c)
					if err != nil {
						t.Error(err)
					}
					if d.Allowed {
						allowed.Add(1)
					}
				}()
			}
			wg.Wait()
			if got, want := allowed.Load(), int64(50); got != want {
				t.Fatalf("%d of 500 concurrent requests allowed, want exactly the burst %d", got, want)
			}
		})
	}
}

func TestHeaderFields(t *testing.T) {
	ip := ratelimit.Policy{Name: "perip", Rate: 50, Burst: 100}
	user := ratelimit.Policy{Name: "peruser", Rate: 5, Burst: 5}
	rs := []ratelimit.Result{
		{Policy: ip, Allowed: true, Remaining: 99, ResetAfter: 20 * time.Millisecond},
		{Policy: user, Allowed: false, Remaining: 0, RetryAfter: 150 * time.Millisecond, ResetAfter: time.Second},
	}
	if got, want := ratelimit.PolicyField(rs), `"perip";q=100;w=2, "peruser";q=5;w=1`; got != want {
		t.Errorf("PolicyField = %s, want %s", got, want)
	}
	if got, want := ratelimit.Field(rs), `"perip";r=99;t=1, "peruser";r=0;t=1`; got != want {
		t.Errorf("Field = %s, want %s", got, want)
	}
}

func TestSeconds(t *testing.T) {
	tests := []struct {
		in   time.Duration
		want int
	}{{0, 0}, {-time.Second, 0}, {time.Microsecond, 1}, {time.Second, 1}, {time.Second + 1, 2}}
	for _, tt := range tests {
		if got := ratelimit.Seconds(tt.in); got != tt.want {
			t.Errorf("Seconds(%v) = %d, want %d", tt.in, got, tt.want)
		}
	}
}
