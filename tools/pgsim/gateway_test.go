package main

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The latency model is a statistics check on the pure draw function: the
// sample mean matches the configured mean, the median sits below it by the
// log-normal factor exp(-sigma²/2), and the tail is long.
func TestDrawLatencyIsLogNormalWithConfiguredMean(t *testing.T) {
	const n = 200_000
	for _, tc := range []struct {
		mean  time.Duration
		sigma float64
	}{
		{200 * time.Millisecond, 0.5},
		{50 * time.Millisecond, 1.0},
		{time.Millisecond, 0.25},
	} {
		r := rand.New(rand.NewPCG(1, 2))
		samples := make([]float64, n)
		var sum float64
		for i := range samples {
			d := drawLatency(r, tc.mean, tc.sigma)
			if d < 0 {
				t.Fatalf("negative latency %v", d)
			}
			samples[i] = float64(d)
			sum += samples[i]
		}
		mean := float64(tc.mean)
		if got := sum / n; math.Abs(got-mean)/mean > 0.03 {
			t.Errorf("mean=%v sigma=%v: sample mean %v, want within 3%%", tc.mean, tc.sigma, time.Duration(got))
		}
		slices.Sort(samples)
		wantMedian := mean * math.Exp(-tc.sigma*tc.sigma/2)
		if got := samples[n/2]; math.Abs(got-wantMedian)/wantMedian > 0.03 {
			t.Errorf("mean=%v sigma=%v: median %v, want about %v", tc.mean, tc.sigma, time.Duration(got), time.Duration(wantMedian))
		}
		if p99 := samples[n*99/100]; p99 < 1.5*mean {
			t.Errorf("mean=%v sigma=%v: p99 %v shows no long tail", tc.mean, tc.sigma, time.Duration(p99))
		}
	}
}

func TestDrawLatencyEdgeCases(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	for range 100 {
		if d := drawLatency(r, 7*time.Millisecond, 0); d != 7*time.Millisecond {
			t.Fatalf("sigma 0 gave %v, want the constant mean", d)
		}
		if d := drawLatency(r, 0, 0.5); d != 0 {
			t.Fatalf("mean 0 gave %v, want 0", d)
		}
		if d := drawLatency(r, 10*time.Minute, maxTail); d < 0 || d > maxLatency {
			t.Fatalf("extreme draw %v is outside [0, %v]", d, maxLatency)
		}
	}
}

func TestDrawLatencyIsDeterministicForASeed(t *testing.T) {
	a := rand.New(rand.NewPCG(9, 9))
	b := rand.New(rand.NewPCG(9, 9))
	for range 1000 {
		if x, y := drawLatency(a, time.Second, 0.5), drawLatency(b, time.Second, 0.5); x != y {
			t.Fatalf("same seed drew %v and %v", x, y)
		}
	}
}

func testCharge() ChargeRequest { return ChargeRequest{OrderID: "o", Amount: 100, Currency: "KRW"} }

// When the leader's client gives up, a request that joined it takes over
// and captures the key itself: one charge, by the survivor.
func TestJoinerTakesOverWhenLeaderGivesUp(t *testing.T) {
	clock := newGateClock()
	gw := NewGateway(GatewayOptions{Clock: clock, LatencyMean: time.Second})

	leaderCtx, cancelLeader := context.WithCancel(t.Context())
	leaderErr := make(chan error, 1)
	go func() {
		_, err := gw.Charge(leaderCtx, "k", testCharge())
		leaderErr <- err
	}()
	eventually(t, "the leader is in flight", func() bool { return gw.InFlight() == 1 })

	type result struct {
		res ChargeResult
		err error
	}
	joiner := make(chan result, 1)
	go func() {
		res, err := gw.Charge(t.Context(), "k", testCharge())
		joiner <- result{res, err}
	}()
	eventually(t, "the joiner is in flight", func() bool { return gw.InFlight() == 2 })

	cancelLeader()
	if err := <-leaderErr; !errors.Is(err, ErrCanceled) || !errors.Is(err, context.Canceled) {
		t.Fatalf("leader error = %v, want ErrCanceled wrapping context.Canceled", err)
	}
	if n := gw.Charges("k"); n != 0 {
		t.Fatalf("charges after the leader gave up = %d, want 0", n)
	}
	clock.open()
	got := <-joiner
	if got.err != nil || got.res.Replayed || got.res.Payment.ID == "" {
		t.Fatalf("joiner = %+v, %v; want a fresh capture", got.res, got.err)
	}
	if n := gw.Charges("k"); n != 1 {
		t.Fatalf("charges = %d, want 1", n)
	}
}

func TestResetDuringFlightRecordsNothing(t *testing.T) {
	clock := newGateClock()
	gw := NewGateway(GatewayOptions{Clock: clock})
	errc := make(chan error, 1)
	go func() {
		_, err := gw.Charge(t.Context(), "k", testCharge())
		errc <- err
	}()
	eventually(t, "the charge is in flight", func() bool { return gw.InFlight() == 1 })
	gw.Reset()
	clock.open()
	if err := <-errc; !errors.Is(err, ErrReset) {
		t.Fatalf("error = %v, want ErrReset", err)
	}
	if s := gw.Stats(); s != (Stats{}) {
		t.Fatalf("stats = %+v, want none", s)
	}
	if res, err := gw.Charge(t.Context(), "k", testCharge()); err != nil || res.Replayed {
		t.Fatalf("after reset = %+v, %v; want a fresh capture", res, err)
	}
}

func TestReplayHonoursContext(t *testing.T) {
	clock := newGateClock()
	gw := NewGateway(GatewayOptions{Clock: clock})
	clock.open()
	if _, err := gw.Charge(t.Context(), "k", testCharge()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := gw.Charge(ctx, "k", testCharge()); !errors.Is(err, ErrCanceled) {
		t.Fatalf("replay with a canceled context = %v, want ErrCanceled", err)
	}
	if n := gw.Charges("k"); n != 1 {
		t.Fatalf("charges = %d, want 1", n)
	}
}

func TestPaymentIDsAreDeterministicForASeed(t *testing.T) {
	ids := func() []string {
		gw := NewGateway(GatewayOptions{Clock: instantClock{}, Rand: rand.New(rand.NewPCG(5, 5))})
		var out []string
		for _, k := range []string{"a", "b", "c"} {
			res, err := gw.Charge(t.Context(), k, testCharge())
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, res.Payment.ID)
		}
		return out
	}
	a, b := ids(), ids()
	if !slices.Equal(a, b) {
		t.Fatalf("ids differ for the same seed: %v vs %v", a, b)
	}
	if a[0] == a[1] || a[1] == a[2] || a[0] == a[2] {
		t.Fatalf("ids are not unique: %v", a)
	}
}

// A lookup never answers "not found" for a charge that may still capture:
// it waits for the charge in flight and answers what it became.
func TestLookupWaitsForTheChargeInFlight(t *testing.T) {
	tests := []struct {
		name    string
		end     func(clock *gateClock, cancelLeader context.CancelFunc)
		wantErr error // nil: the lookup finds the capture
	}{
		{"the charge captures", func(c *gateClock, _ context.CancelFunc) { c.open() }, nil},
		{"the charge's client gives up", func(_ *gateClock, cancel context.CancelFunc) { cancel() }, ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newGateClock()
			gw := NewGateway(GatewayOptions{Clock: clock})
			leaderCtx, cancelLeader := context.WithCancel(t.Context())
			defer cancelLeader()
			charged := make(chan ChargeResult, 1)
			go func() {
				res, _ := gw.Charge(leaderCtx, "k", testCharge())
				charged <- res
			}()
			eventually(t, "the charge is in flight", func() bool { return gw.InFlight() == 1 })

			type answer struct {
				p   Payment
				err error
			}
			looked := make(chan answer, 1)
			go func() {
				p, err := gw.Lookup(t.Context(), "k")
				looked <- answer{p, err}
			}()
			select {
			case a := <-looked:
				t.Fatalf("Lookup answered %+v, %v while the charge was in flight", a.p, a.err)
			case <-time.After(50 * time.Millisecond):
			}
			tt.end(clock, cancelLeader)
			a := <-looked
			if tt.wantErr != nil {
				if !errors.Is(a.err, tt.wantErr) {
					t.Fatalf("Lookup = %+v, %v, want %v", a.p, a.err, tt.wantErr)
				}
				return
			}
			res := <-charged
			if a.err != nil || a.p.ID != res.Payment.ID || a.p.Status != StatusCaptured {
				t.Fatalf("Lookup = %+v, %v, want the captured payment %s", a.p, a.err, res.Payment.ID)
			}
		})
	}
}

// A lookup waiting for a charge in flight gives up with its own context.
func TestLookupHonoursItsContext(t *testing.T) {
	clock := newGateClock()
	defer clock.open()
	gw := NewGateway(GatewayOptions{Clock: clock})
	go gw.Charge(t.Context(), "k", testCharge())
	eventually(t, "the charge is in flight", func() bool { return gw.InFlight() == 1 })
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if _, err := gw.Lookup(ctx, "k"); !errors.Is(err, ErrCanceled) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lookup = %v, want ErrCanceled wrapping the deadline", err)
	}
}

// Void gives the money back once: voiding again returns the same voided
// payment, and the key never captures again.
func TestVoidIsIdempotentAndFinal(t *testing.T) {
	gw := NewGateway(GatewayOptions{Clock: instantClock{}})
	if _, err := gw.Void(t.Context(), "k"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Void(unknown) = %v, want ErrNotFound", err)
	}
	res, err := gw.Charge(t.Context(), "k", testCharge())
	if err != nil {
		t.Fatal(err)
	}
	first, err := gw.Void(t.Context(), "k")
	if err != nil || first.ID != res.Payment.ID || first.Status != StatusVoided || first.VoidedAt.IsZero() {
		t.Fatalf("Void = %+v, %v, want payment %s voided", first, err, res.Payment.ID)
	}
	again, err := gw.Void(t.Context(), "k")
	if err != nil || again != first {
		t.Fatalf("second Void = %+v, %v, want %+v", again, err, first)
	}
	if _, err := gw.Charge(t.Context(), "k", testCharge()); !errors.Is(err, ErrVoided) {
		t.Fatalf("Charge after Void = %v, want ErrVoided", err)
	}
	if got, want := gw.Stats(), (Stats{Total: 1, Keys: 1, MaxPerKey: 1, Voided: 1}); got != want {
		t.Fatalf("Stats = %+v, want %+v", got, want)
	}
}

// In capture-hang mode a charge is captured and recorded like any other;
// only its answer is marked as never to be delivered, a replay's too.
func TestCaptureHangRecordsTheCapture(t *testing.T) {
	gw := NewGateway(GatewayOptions{Clock: instantClock{}})
	gw.SetMode(ModeCaptureHang, nil)
	first, err := gw.Charge(t.Context(), "k", testCharge())
	if err != nil || !first.Unanswered || first.Replayed {
		t.Fatalf("Charge = %+v, %v, want a fresh capture left unanswered", first, err)
	}
	replay, err := gw.Charge(t.Context(), "k", testCharge())
	if err != nil || !replay.Unanswered || !replay.Replayed || replay.Payment.ID != first.Payment.ID {
		t.Fatalf("replay = %+v, %v, want the same payment, unanswered", replay, err)
	}
	if p, err := gw.Lookup(t.Context(), "k"); err != nil || p.ID != first.Payment.ID || p.Status != StatusCaptured {
		t.Fatalf("Lookup = %+v, %v, want the capture", p, err)
	}
	if n := gw.Charges("k"); n != 1 {
		t.Fatalf("charges = %d, want 1", n)
	}
}

// With KeyInUseConflict (as Stripe): a charge whose key has one in flight
// is answered ErrKeyInUse at once, and the charge in flight, though its
// caller gave up, still captures — the retry's 409 says nothing about
// whether money moved.
func TestAKeyInUseIsAConflictAndTheChargeInFlightStillCaptures(t *testing.T) {
	clock := newGateClock()
	gw := NewGateway(GatewayOptions{Clock: clock, KeyInUse: KeyInUseConflict})
	first, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := gw.Charge(first, "k", testCharge())
		done <- err
	}()
	eventually(t, "the first charge is in flight", func() bool { return gw.InFlight() == 1 })
	cancel() // its client timed out
	if _, err := gw.Charge(t.Context(), "k", testCharge()); !errors.Is(err, ErrKeyInUse) {
		t.Fatalf("a retry while the first is in flight = %v, want ErrKeyInUse", err)
	}
	if n := gw.Charges("k"); n != 0 {
		t.Fatalf("charges while in flight = %d, want 0", n)
	}
	clock.open()
	if err := <-done; err != nil {
		t.Fatalf("the first charge = %v, want it captured though its caller left", err)
	}
	if p, ok := gw.Recorded("k"); !ok || p.Status != StatusCaptured || gw.Charges("k") != 1 {
		t.Fatalf("recorded = %+v, %v, charges %d: want one capture", p, ok, gw.Charges("k"))
	}
	if res, err := gw.Charge(t.Context(), "k", testCharge()); err != nil || !res.Replayed {
		t.Fatalf("a retry after the capture = %+v, %v, want the replay", res, err)
	}
}

// Decline mode refuses every new charge (nothing captured) and leaves what
// was captured before as it was.
func TestDeclineModeRefusesNewChargesOnly(t *testing.T) {
	gw := NewGateway(GatewayOptions{Clock: instantClock{}})
	if _, err := gw.Charge(t.Context(), "before", testCharge()); err != nil {
		t.Fatal(err)
	}
	gw.SetMode(ModeDecline, nil)
	if _, err := gw.Charge(t.Context(), "k", testCharge()); !errors.Is(err, ErrRefused) {
		t.Fatalf("Charge in decline mode = %v, want ErrRefused", err)
	}
	if _, err := gw.Lookup(t.Context(), "k"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Lookup of the declined key = %v, want ErrNotFound", err)
	}
	if res, err := gw.Charge(t.Context(), "before", testCharge()); err != nil || !res.Replayed {
		t.Fatalf("a key captured before = %+v, %v, want its replay", res, err)
	}
	gw.SetMode(ModeNormal, nil)
	if res, err := gw.Charge(t.Context(), "k", testCharge()); err != nil || res.Replayed {
		t.Fatalf("the declined key in normal mode = %+v, %v, want a fresh capture", res, err)
	}
}
