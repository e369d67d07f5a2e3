package adaptive_test

import (
	"container/heap"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"usher/internal/adaptive"
)

// plant is a synthetic order path: up to capacity orders in flight take
// baseMs each; beyond it they queue, so latency grows with the limit and
// throughput does not (Little's law: capacity / baseMs orders per ms).
// Window means carry the noise of a log-normal latency (cv 0.53, pgsim's
// tail of 0.5) averaged over the window's orders.
type plant struct {
	capacity float64
	baseMs   float64
	cv       float64
	rng      *rand.Rand
}

func newPlant(capacity, baseMs float64, seed uint64) *plant {
	return &plant{capacity: capacity, baseMs: baseMs, cv: 0.53, rng: rand.New(rand.NewPCG(seed, 7))}
}

// latency is the order latency with limit orders in flight.
func (p *plant) latency(limit int) float64 { return p.baseMs * max(1, float64(limit)/p.capacity) }

// window is one second with limit in flight and shoppers waiting.
func (p *plant) window(limit int) adaptive.Window {
	lat := p.latency(limit)
	orders := int64(math.Round(float64(limit) / lat * 1000))
	mean := lat
	if orders > 0 {
		mean *= max(0.2, 1+p.cv/math.Sqrt(float64(orders))*p.rng.NormFloat64())
	}
	return adaptive.Window{
		Sample:  adaptive.Sample{Orders: orders, LatencyMs: mean * float64(orders), MaxMs: 3 * mean},
		Waiting: 1000, Active: int64(limit),
	}
}

// throughput is orders per second with limit in flight.
func (p *plant) throughput(limit int) float64 { return float64(limit) / p.latency(limit) * 1000 }

// run drives the controller n windows against p and returns the limits.
func run(b adaptive.Bounds, p *plant, n int, change func(i int, p *plant)) ([]int, []adaptive.Reason) {
	st := adaptive.Start(b)
	limit := b.Clamp(st.Limit)
	var limits []int
	var reasons []adaptive.Reason
	for i := range n {
		if change != nil {
			change(i, p)
		}
		var d adaptive.Decision
		st, d = adaptive.Decide(b, st, p.window(limit))
		limit = d.Limit
		limits = append(limits, limit)
		reasons = append(reasons, d.Reason)
	}
	return limits, reasons
}

// From any start, the limit converges to the order path's capacity and
// then stays within a band around it: never below 0.7× capacity (on
// average at least 90 % of the best throughput) and never above 1.75×
// (latency at most 1.75× the no-load latency) — for a capacity of 40 and
// more; a capacity of 8 moves in steps of 3 and its band is [4, 18].
// The band is the controller's stated oscillation: it raises up to
// RaiseBelow × baseline and cuts back at Tolerance × baseline. Drain
// windows (one in DrainEvery, at half the limit by design) are outside
// the band but count in the throughput.
func TestConvergesWithinABand(t *testing.T) {
	tests := []struct {
		name     string
		capacity float64
		start    int
		lo, hi   float64 // the band
		within   int     // windows to converge
	}{
		{"small order path, start above it", 8, 20, 4, 18, 40},
		{"capacity 40, start at 20", 40, 20, 28, 70, 20},
		{"capacity 120, start at 20", 120, 20, 84, 210, 30},
		{"capacity 300, start at 5", 300, 5, 210, 525, 60},
	}
	for _, tt := range tests {
		var late []int
		for seed := uint64(1); seed <= 20; seed++ {
			p := newPlant(tt.capacity, 250, seed)
			b := adaptive.Bounds{Min: 1, Max: 1000, Start: tt.start}
			limits, reasons := run(b, p, 400, nil)
			in := func(i int) bool {
				l := float64(limits[i])
				return reasons[i] == adaptive.ReasonDrain || (l >= tt.lo && l <= tt.hi)
			}
			converged := len(limits)
			for i := len(limits) - 1; i >= 0 && in(i); i-- {
				converged = i
			}
			if converged > 2*tt.within {
				t.Errorf("%s (seed %d): in the band [%.0f, %.0f] for good from window %d, want from %d at the latest: %v",
					tt.name, seed, tt.lo, tt.hi, converged, 2*tt.within, limits[:min(len(limits), converged+10)])
				continue
			}
			if converged > tt.within {
				late = append(late, converged)
			}
			lo, hi, xSum, drains := math.Inf(1), 0.0, 0.0, 0
			for i := converged; i < len(limits); i++ {
				xSum += p.throughput(limits[i])
				if reasons[i] == adaptive.ReasonDrain {
					drains++
					continue
				}
				lo, hi = min(lo, float64(limits[i])), max(hi, float64(limits[i]))
			}
			// One drain in DrainEvery, and a recheck FirstDrain windows after each
			// drain that cut (on the small path, whose 32 orders a window are
			// noisy, several do).
			if max := (len(limits)-converged)/adaptive.DrainEvery + 10; drains > max {
				t.Errorf("%s (seed %d): %d drain windows, want at most %d", tt.name, seed, drains, max)
			}
			best := tt.capacity / 250 * 1000
			got := xSum / float64(len(limits)-converged)
			if got < 0.9*best {
				t.Errorf("%s (seed %d): mean throughput %.1f/s, want ≥ 90 %% of %.1f/s", tt.name, seed, got, best)
			}
			t.Logf("%s (seed %d): converged at window %d, then [%.0f, %.0f] (%.2f–%.2f × capacity), %d drains, throughput %.0f %% of the best",
				tt.name, seed, converged, lo, hi, lo/tt.capacity, hi/tt.capacity, drains, 100*got/best)
		}
		if len(late) > 2 {
			t.Errorf("%s: %d of 20 runs converged later than window %d (at %v), want at most 2", tt.name, len(late), tt.within, late)
		}
	}
}

// When the payment gateway slows from 200 ms to 1 s the limit falls at
// once (by half within two windows, to the floor within eight) and holds low while it stays
// slow; when it recovers, the limit climbs back to the capacity band.
func TestFollowsASlowdown(t *testing.T) {
	p := newPlant(40, 200, 3)
	b := adaptive.Bounds{Min: 5, Max: 160, Start: 20}
	limits, reasons := run(b, p, 200, func(i int, p *plant) {
		switch i {
		case 60:
			p.baseMs = 1000
		case 90:
			p.baseMs = 200
		}
	})
	before := limits[59]
	if float64(before) < 0.7*40 {
		t.Fatalf("before the slowdown the limit was %d, want ≥ 28 (converged)", before)
	}
	if !reasons[60].Lowered() && !reasons[61].Lowered() {
		t.Errorf("no cut in the two windows after the slowdown: %v", reasons[58:64])
	}
	if got := limits[61]; got > (before+1)/2 {
		t.Errorf("two windows into the slowdown the limit is %d, want at most half of %d: %v", got, before, limits[58:66])
	}
	if got := limits[67]; got > b.Min {
		t.Errorf("eight windows into the slowdown the limit is %d, want the floor %d: %v", got, b.Min, limits[58:70])
	}
	for i := 67; i < 90; i++ {
		if limits[i] > 2*b.Min {
			t.Errorf("window %d of the slowdown: limit %d, want it held low (≤ %d)", i, limits[i], 2*b.Min)
		}
	}
	back := -1
	for i := 90; i < len(limits); i++ {
		if float64(limits[i]) >= 0.7*40 {
			back = i - 90
			break
		}
	}
	if back < 0 || back > 20 {
		t.Errorf("after the recovery the limit took %d windows to come back to ≥ 28, want ≤ 20: %v", back, limits[88:120])
	}
	t.Logf("limits around the slowdown: %v … %v", limits[56:68], limits[88:110])
}

// Every sign of trouble on the order path cuts the limit in the window it
// is seen, multiplicatively, whatever the latency says.
func TestCutsAtOnce(t *testing.T) {
	b := adaptive.Bounds{Min: 2, Max: 200, Start: 50}
	calm := adaptive.State{Limit: 100, BaselineMs: 250, LatencyMs: 250, MeanMs: 250, HoldBaselineMs: 1}
	fine := adaptive.Sample{Orders: 400, LatencyMs: 400 * 250, Holds: 800, HoldMs: 800}
	tests := []struct {
		name   string
		change func(w *adaptive.Window)
		want   adaptive.Reason
		limit  int
	}{
		{"the payment breaker is open", func(w *adaptive.Window) { w.BreakerOpen = true }, adaptive.ReasonBreakerOpen, 50},
		{"an order failed", func(w *adaptive.Window) { w.Failed = 1 }, adaptive.ReasonFailures, 70},
		{"a payment call went unanswered", func(w *adaptive.Window) { w.Timeouts = 1 }, adaptive.ReasonTimeouts, 70},
		{"an order was put back to wait", func(w *adaptive.Window) { w.Deferred = 3 }, adaptive.ReasonDeferred, 70},
		{"over 1 % of DB holds above 20 ms, their mean grown 2.5×", func(w *adaptive.Window) { w.SlowHolds, w.HoldMs = 9, 800*2.5 }, adaptive.ReasonDBHold, 80},
		{"over 1 % of DB holds above 20 ms, their mean grown 10×", func(w *adaptive.Window) { w.SlowHolds, w.HoldMs = 9, 800*10 }, adaptive.ReasonDBHold, 50},
		{"latency doubled", func(w *adaptive.Window) { w.LatencyMs = 400 * 500 }, adaptive.ReasonLatency, 50},
		{"latency 1.8×", func(w *adaptive.Window) { w.LatencyMs = 400 * 450 }, adaptive.ReasonLatency, 56},
		{"even with no orders finished", func(w *adaptive.Window) { w.Sample = adaptive.Sample{Timeouts: 2} }, adaptive.ReasonTimeouts, 70},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := adaptive.Window{Sample: fine, Waiting: 10, Active: 100}
			tt.change(&w)
			_, d := adaptive.Decide(b, calm, w)
			if d.Reason != tt.want || d.Limit != tt.limit || !d.Reason.Lowered() {
				t.Errorf("Decide = %d (%s), want %d (%s)", d.Limit, d.Reason, tt.limit, tt.want)
			}
		})
	}
}

// Until it first meets the knee, the limit doubles a window while latency stays within ClimbBelow × its baseline, then by
// the additive step near the knee; once it met the knee (latency above
// RaiseBelow ×) or was cut, it rises by the additive step only.
func TestClimbsUntilItFirstMeetsTheKnee(t *testing.T) {
	b := adaptive.Bounds{Min: 2, Max: 400, Start: 20}
	w := adaptive.Window{Sample: adaptive.Sample{Orders: 400, LatencyMs: 400 * 250}, Waiting: 5, Active: 100}
	tests := []struct {
		name    string
		state   adaptive.State
		latency float64
		want    int
	}{
		{"latency at its baseline", adaptive.State{Limit: 100, BaselineMs: 250, LatencyMs: 250}, 250, 200},
		{"latency 1.15× its baseline", adaptive.State{Limit: 100, BaselineMs: 250, LatencyMs: 287.5}, 287.5, 110},
		{"settled before", adaptive.State{Limit: 100, BaselineMs: 250, LatencyMs: 250, Settled: true}, 250, 110},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w.LatencyMs = 400 * tt.latency
			_, d := adaptive.Decide(b, tt.state, w)
			if d.Reason != adaptive.ReasonRaise || d.Limit != tt.want {
				t.Errorf("Decide = %d (%s), want %d (raise)", d.Limit, d.Reason, tt.want)
			}
		})
	}
	s := adaptive.State{Limit: 100, BaselineMs: 250, LatencyMs: 250}
	w.LatencyMs = 400 * 350
	if s, _ = adaptive.Decide(b, s, w); !s.Settled {
		t.Errorf("a window at 1.4× its baseline left the controller climbing")
	}
}

// The limit rises only while latency stays near its baseline and the
// limit is what holds the line back.
func TestRaisesOnlyWhenItBinds(t *testing.T) {
	b := adaptive.Bounds{Min: 2, Max: 200, Start: 50}
	calm := adaptive.State{Limit: 100, BaselineMs: 250, LatencyMs: 250, MeanMs: 250, Settled: true}
	fine := adaptive.Sample{Orders: 400, LatencyMs: 400 * 250}
	tests := []struct {
		name            string
		waiting, active int64
		latency         float64
		want            adaptive.Reason
		limit           int
	}{
		{"shoppers wait and every slot is used", 5, 100, 250, adaptive.ReasonRaise, 110},
		{"nobody waits", 0, 100, 250, adaptive.ReasonIdle, 100},
		{"most slots left unused", 5, 45, 250, adaptive.ReasonIdle, 100},
		{"a tick's worth of slots free between ticks", 5, 60, 250, adaptive.ReasonRaise, 110},
		{"latency 1.4× its baseline", 5, 100, 350, adaptive.ReasonSteady, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := adaptive.Window{Sample: fine, Waiting: tt.waiting, Active: tt.active}
			w.LatencyMs = 400 * tt.latency
			_, d := adaptive.Decide(b, calm, w)
			if d.Reason != tt.want || d.Limit != tt.limit {
				t.Errorf("Decide = %d (%s), want %d (%s)", d.Limit, d.Reason, tt.limit, tt.want)
			}
		})
	}
}

// Too few orders say nothing about latency: the limit holds, and the
// first judged window only sets the baseline — at the most the no-load
// latency can be, given the window: one standard error above its mean
// (LatencyCV/√50 of 300 ms, 21 ms).
func TestJudgesLatencyOnlyWithEnoughOrders(t *testing.T) {
	b := adaptive.Bounds{Min: 1, Max: 100, Start: 20}
	st := adaptive.Start(b)
	st, d := adaptive.Decide(b, st, adaptive.Window{Sample: adaptive.Sample{Orders: 2, LatencyMs: 9000}, Waiting: 9, Active: 20})
	if d.Reason != adaptive.ReasonFewOrders || d.Limit != 20 || st.BaselineMs != 0 {
		t.Fatalf("two slow orders: %d (%s), baseline %.0f; want 20 (few_orders), no baseline", d.Limit, d.Reason, st.BaselineMs)
	}
	first := adaptive.Window{Sample: adaptive.Sample{Orders: 50, LatencyMs: 50 * 300}, Waiting: 9, Active: 5}
	next, d := adaptive.Decide(b, st, first)
	if want := 300 * (1 + adaptive.LatencyCV/math.Sqrt(50)); d.Reason != adaptive.ReasonWarmingUp || d.Limit != 20 || math.Abs(next.BaselineMs-want) > 0.01 {
		t.Fatalf("first window, 5 of 20 slots in use: %d (%s), baseline %.1f; want 20 (warming_up), baseline %.1f", d.Limit, d.Reason, next.BaselineMs, want)
	}
	// The same window with the limit binding sets the baseline and starts
	// the climb at once.
	first.Active = 20
	if next, d = adaptive.Decide(b, st, first); d.Reason != adaptive.ReasonRaise || d.Limit != 40 || next.BaselineMs == 0 {
		t.Fatalf("first window, every slot in use: %d (%s), baseline %.1f; want 40 (raise), a baseline", d.Limit, d.Reason, next.BaselineMs)
	}
}

// Whatever the windows say, the limit stays within the bounds, and the
// same inputs always give the same decision.
func TestStaysWithinBoundsAndIsPure(t *testing.T) {
	rng := rand.New(rand.NewPCG(42, 42))
	b := adaptive.Bounds{Min: 3, Max: 70, Start: 10}
	st := adaptive.Start(b)
	for i := range 20000 {
		orders := int64(rng.IntN(300))
		w := adaptive.Window{
			Sample: adaptive.Sample{Orders: orders, LatencyMs: float64(orders) * (50 + rng.Float64()*3000),
				Failed: int64(rng.IntN(40) / 39), Timeouts: int64(rng.IntN(30) / 29), Holds: 100, SlowHolds: int64(rng.IntN(3))},
			BreakerOpen: rng.IntN(100) == 0, Waiting: int64(rng.IntN(3)), Active: int64(rng.IntN(100)),
		}
		again, d2 := adaptive.Decide(b, st, w)
		next, d := adaptive.Decide(b, st, w)
		if d != d2 || next != again {
			t.Fatalf("window %d: Decide gave %v then %v for the same input", i, d, d2)
		}
		if d.Limit < b.Min || d.Limit > b.Max || next.Limit < float64(b.Min) || next.Limit > float64(b.Max) {
			t.Fatalf("window %d: limit %d (state %.2f) outside [%d, %d]", i, d.Limit, next.Limit, b.Min, b.Max)
		}
		st = next
	}
}

// One slow database hold in a small window says nothing about its p99:
// the limit is cut for holds only when at least two, and over 1 %, are
// slow and the holds grew (their mean beyond twice its baseline) — a
// database as slow at any load is a busy host, not ours to fix.
func TestOneSlowHoldIsNotAP99(t *testing.T) {
	b := adaptive.Bounds{Min: 2, Max: 200, Start: 50}
	calm := adaptive.State{Limit: 20, BaselineMs: 250, LatencyMs: 250, MeanMs: 250, HoldBaselineMs: 2}
	tests := []struct {
		holds, slow int64
		meanMs      float64
		cut         bool
	}{
		{30, 1, 5, false},
		{30, 2, 5, true},
		{400, 4, 5, false}, // 1 %: the p99 is at the bound, not above
		{400, 5, 5, true},
		{400, 40, 3, false}, // slow, but no slower than at no load
	}
	for _, tt := range tests {
		w := adaptive.Window{Sample: adaptive.Sample{Orders: 15, LatencyMs: 15 * 250, Holds: tt.holds, SlowHolds: tt.slow,
			HoldMs: tt.meanMs * float64(tt.holds)}, Waiting: 9, Active: 20}
		if _, d := adaptive.Decide(b, calm, w); (d.Reason == adaptive.ReasonDBHold) != tt.cut {
			t.Errorf("%d of %d holds slow, mean %.0f ms against 2: %s, want a cut %v", tt.slow, tt.holds, tt.meanMs, d.Reason, tt.cut)
		}
	}
}

// A window lowers the baseline only by what lies beyond its own noise: a
// mean within a standard error of the baseline (LatencyCV/√orders) leaves
// it, a clearly lower one pulls it (by Settle) towards one standard error
// above itself. The lowest of many noisy means would sit below the no-load
// latency, and the limit would stop short of RaiseBelow × it.
func TestNoiseDoesNotLowerTheBaseline(t *testing.T) {
	b := adaptive.Bounds{Min: 2, Max: 200, Start: 50}
	calm := adaptive.State{Limit: 100, BaselineMs: 250, LatencyMs: 260, MeanMs: 260, SinceDrain: 5, Drained: true}
	tests := []struct {
		meanMs, want float64
	}{
		{245, 250},                            // 2 % under: within its standard error, 4 %
		{200, 250 + 0.5*(200*(1+0.5/12)-250)}, // 20 % under: halfway to 208
	}
	for _, tt := range tests {
		w := adaptive.Window{Sample: adaptive.Sample{Orders: 144, LatencyMs: 144 * tt.meanMs}, Waiting: 9, Active: 100}
		if next, _ := adaptive.Decide(b, calm, w); math.Abs(next.BaselineMs-tt.want) > 0.01 {
			t.Errorf("a window of 144 orders at %.0f ms against a baseline of 250: baseline %.1f, want %.1f", tt.meanMs, next.BaselineMs, tt.want)
		}
	}
}

// A drain at no more load than the start's (where the baseline was set)
// re-measures the baseline, up or down; one at half a limit raised beyond
// that only lowers it — its latency is half the current load's, not no
// load's — and the window after a drain that restored the limit does not
// raise: its orders began at half of it.
func TestALaterDrainOnlyLowersTheBaseline(t *testing.T) {
	b := adaptive.Bounds{Min: 2, Max: 200, Start: 20}
	tests := []struct {
		name   string
		resume float64 // the limit the drain halved
		meanMs float64
		want   float64
	}{
		{"a drain at more load than the start's, latency above the baseline", 100, 290, 250},
		{"a drain at more load than the start's, latency below it", 100, 220, 220},
		{"a drain at the start's load, latency above the baseline", 40, 290, 290},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := adaptive.State{Limit: tt.resume / 2, Resume: tt.resume, BaselineMs: 250, LatencyMs: 300, MeanMs: 300, SinceDrain: 30, Drained: true}
			w := adaptive.Window{Sample: adaptive.Sample{Orders: 120, LatencyMs: 120 * tt.meanMs}, Waiting: 9, Active: int64(tt.resume / 2)}
			next, d := adaptive.Decide(b, s, w)
			if d.Reason != adaptive.ReasonDrained || d.Limit != int(tt.resume) || math.Abs(next.BaselineMs-tt.want) > 0.01 {
				t.Fatalf("Decide = %d (%s), baseline %.1f; want %.0f (drained), baseline %.0f", d.Limit, d.Reason, next.BaselineMs, tt.resume, tt.want)
			}
			w = adaptive.Window{Sample: adaptive.Sample{Orders: 300, LatencyMs: 300 * next.BaselineMs}, Waiting: 9, Active: int64(tt.resume)}
			after, d := adaptive.Decide(b, next, w)
			if d.Reason != adaptive.ReasonDrained || d.Limit != int(tt.resume) {
				t.Fatalf("the window after the drain: %d (%s), want %.0f (drained)", d.Limit, d.Reason, tt.resume)
			}
			if _, d := adaptive.Decide(b, after, w); d.Reason != adaptive.ReasonRaise {
				t.Errorf("the window after that: %d (%s), want a raise", d.Limit, d.Reason)
			}
		})
	}
}

// sharedPath is an order path like the journey benchmark's on a small
// machine that runs the whole stack: shoppers in a closed loop (join, wait
// in line, admitted at a 100 ms tick, order, join again as soon as the
// order is final), a payment of log-normal latency (mean 200 ms, σ 0.5:
// pgsim's), and latency that grows gently with the order rate, because
// every order costs CPU that the rest of the stack shares: contendMs ×
// (1/(1 − rate/maxRate) − 1) on average (±50 %), most of it inside the
// order's latency, the rest between READY and the order request. There is no hard capacity:
// throughput keeps rising with the limit, and latency with it.
//
// Calibrated on the benchmark's fixed runs on a quiet machine (targetActive
// 40, 80, 160: 128.7, 232.3, 394.6 orders/s, order p50 207, 230, 274 ms,
// p99 616, 618, 675.5 ms — TestTheSharedPathIsTheBenchmarks checks it stays
// so): the mean latency grows ≈ 1.3× from 40 to 160, the p99 only 1.1×,
// because the contention adds about the same delay to every order, short
// or long.
type sharedPath struct {
	shoppers  int
	payMs     float64 // mean payment latency
	paySigma  float64 // σ of its log-normal
	workMs    float64 // the order path's own work
	readyMs   float64 // admitted → order requested (READY pushed, the shopper submits)
	contendMs float64
	maxRate   float64 // orders per second at which contention would grow without bound
	inside    float64 // the share of the contention inside the order latency
}

// benchPath is the benchmark's path: 300 shoppers.
func benchPath() sharedPath {
	return sharedPath{shoppers: 300, payMs: 200, paySigma: 0.5, workMs: 10, readyMs: 20, contendMs: 500, maxRate: 2000, inside: 0.65}
}

// pathRun is what one run of a sharedPath gave.
type pathRun struct {
	traces    []adaptive.Trace // one per decision
	orders    int              // orders finished
	latencies []float64        // their latencies, ms
}

// perSecond is the run's orders per second.
func (r pathRun) perSecond(seconds int) float64 { return float64(r.orders) / float64(seconds) }

// p99 is the run's order latency p99.
func (r pathRun) p99() float64 {
	l := slices.Clone(r.latencies)
	slices.Sort(l)
	return l[len(l)*99/100]
}

// limits are the limits the run's decisions set.
func (r pathRun) limits() []int {
	out := make([]int, len(r.traces))
	for i, tr := range r.traces {
		out[i] = tr.Decision.Limit
	}
	return out
}

type pathEvent struct {
	at, shopper int
	kind        int // requested, finished, rejoined
}

type pathEvents []pathEvent

func (h pathEvents) Len() int           { return len(h) }
func (h pathEvents) Less(i, j int) bool { return h[i].at < h[j].at }
func (h pathEvents) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *pathEvents) Push(x any)        { *h = append(*h, x.(pathEvent)) }
func (h *pathEvents) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// run drives p for seconds under the controller with bounds b (b.Min ==
// b.Max: a fixed targetActive). Decisions come as the store hands them
// out: the controller starts at the first tick (the line is full: the
// shoppers joined before the queue opened), then decides once a window
// (1 s, its boundary at a random phase of the 100 ms ticks), at the first
// tick after it, on its figures — the first time on the window it started
// in. A finished order lands in the window its worker's next flush
// (within 100 ms) falls in.
func (p sharedPath) run(b adaptive.Bounds, seconds int, seed uint64) pathRun {
	const (
		requested = iota
		finished
		rejoined
	)
	rng := rand.New(rand.NewPCG(seed, 11))
	phase := rng.IntN(1000)
	mu := math.Log(p.payMs) - p.paySigma*p.paySigma/2
	var (
		res      pathRun
		events   pathEvents
		line     = make([]int, p.shoppers)
		askedAt  = make([]int, p.shoppers)
		active   int
		recent   []int // finish times in the last second
		windows  = map[int]*adaptive.Window{}
		st       = adaptive.Start(b)
		limit    = b.Clamp(st.Limit)
		started  = -1
		lastSeen = -1
	)
	for i := range line {
		line[i] = i
	}
	contention := func(at int) float64 {
		for len(recent) > 0 && recent[0] <= at-1000 {
			recent = recent[1:]
		}
		return p.contendMs * (1/(1-min(0.95, float64(len(recent))/p.maxRate)) - 1) * (0.5 + rng.Float64())
	}
	for t := 50; t < seconds*1000; t += 100 {
		for len(events) > 0 && events[0].at < t {
			e := heap.Pop(&events).(pathEvent)
			switch e.kind {
			case requested:
				askedAt[e.shopper] = e.at
				lat := math.Exp(mu+p.paySigma*rng.NormFloat64()) + p.workMs + p.inside*contention(e.at)
				heap.Push(&events, pathEvent{at: e.at + int(lat), shopper: e.shopper, kind: finished})
			case finished:
				active--
				lat := float64(e.at - askedAt[e.shopper])
				res.orders++
				res.latencies = append(res.latencies, lat)
				recent = append(recent, e.at)
				k := (e.at + rng.IntN(100) + phase) / 1000
				if windows[k] == nil {
					windows[k] = &adaptive.Window{}
				}
				windows[k].Add(adaptive.Sample{Orders: 1, LatencyMs: lat, MaxMs: lat})
				heap.Push(&events, pathEvent{at: e.at + 10 + rng.IntN(50), shopper: e.shopper, kind: rejoined})
			case rejoined:
				line = append(line, e.shopper)
			}
		}
		if now := (t + phase) / 1000; b.Min != b.Max && now != lastSeen {
			switch {
			case started < 0:
				started = now
			case now > started+1:
				var w adaptive.Window
				if f := windows[now-1]; f != nil {
					w = *f
				}
				w.Waiting, w.Active = int64(len(line)), int64(active)
				before := st
				var d adaptive.Decision
				st, d = adaptive.Decide(b, st, w)
				limit = d.Limit
				res.traces = append(res.traces, adaptive.Trace{Window: w, Before: before, After: st, Decision: d})
			}
			lastSeen = now
		}
		n := max(0, min(limit-active, len(line)))
		for _, s := range line[:n] {
			heap.Push(&events, pathEvent{at: t + int(p.readyMs+(1-p.inside)*contention(t)), shopper: s, kind: requested})
		}
		line = line[n:]
		active += n
	}
	return res
}

// The simulated path is the benchmark's: its fixed targetActive runs give
// the benchmark's orders per second and order p99 within 10 %.
func TestTheSharedPathIsTheBenchmarks(t *testing.T) {
	tests := []struct {
		limit     int
		perSecond float64
		p99       float64
	}{{40, 128.7, 616}, {80, 232.3, 618}, {160, 394.6, 675.5}}
	for _, tt := range tests {
		r := fixedRun(tt.limit)
		x, p99 := r.perSecond(100), r.p99()
		t.Logf("fixed %d: %.1f orders/s, order p99 %.0f ms (the benchmark: %.1f, %.0f)", tt.limit, x, p99, tt.perSecond, tt.p99)
		if math.Abs(x/tt.perSecond-1) > 0.1 || math.Abs(p99/tt.p99-1) > 0.1 {
			t.Errorf("fixed %d: %.1f orders/s, p99 %.0f ms; want within 10 %% of %.1f, %.0f", tt.limit, x, p99, tt.perSecond, tt.p99)
		}
	}
}

// fixedRun is four 25 s runs of benchPath at a fixed limit, as one.
func fixedRun(limit int) pathRun {
	var all pathRun
	for seed := uint64(1); seed <= 4; seed++ {
		r := benchPath().run(adaptive.Bounds{Min: limit, Max: limit, Start: limit}, 25, seed)
		all.orders += r.orders
		all.latencies = append(all.latencies, r.latencies...)
	}
	return all
}

// The benchmark's comparison on benchPath: the best fixed targetActive of
// 40, 80 and 160 whose order p99 is within 1.1 × the lowest of theirs is
// 160 — its latency is contention every order shares, not a queue, so its
// p99 grows by the same milliseconds as its mean: 1.1 × where the mean is
// ≈ 1.25 ×.
const kneeOfBenchPath = 160

// traceOf prints a run's decisions, for a failing test to show why.
func traceOf(t *testing.T, r pathRun) {
	t.Helper()
	for i, tr := range r.traces {
		t.Logf("decision %d: %v", i, tr)
	}
}

// On a path whose latency grows gently with its load from the start on,
// and whose throughput keeps rising well past the start (the benchmark's,
// on a quiet machine), the limit climbs from targetActive 20 to the knee
// fast enough that a benchmark run of 60 s sells nearly what the knee's
// fixed value sells, with an order p99 within 1.1 × the lowest fixed
// one's. The benchmark's goal is 0.9 × the orders; a 60 s run from 20
// cannot pass 0.95 × even were the limit 160 from its first decision (the
// second before it, at 20, and a drain window at half the limit cost
// that), and the first drain on the way up costs two more windows, so
// the average here is 0.90 × and the test pins 0.88 ×, 0.85 × in any run. A baseline that is
// the lowest of noisy windows, or a start window's short orders, would
// stop it where latency is barely above its no-load value; a climb of a
// quarter a window would spend a third of the run getting there.
func TestClimbsToTheKneeOfASharedPath(t *testing.T) {
	b := adaptive.Bounds{Min: 5, Max: 160, Start: 20}
	knee, lowest := fixedRun(kneeOfBenchPath).perSecond(100), fixedRun(40).p99()
	var all pathRun
	sum := 0.0
	for seed := uint64(1); seed <= 20; seed++ {
		r := benchPath().run(b, 60, seed)
		all.latencies = append(all.latencies, r.latencies...)
		limits := r.limits()
		x := r.perSecond(60)
		sum += x / 20
		t.Logf("seed %d: %.1f orders/s (%.3f × fixed %d: %.1f), order p99 %.0f ms, limits %v",
			seed, x, x/knee, kneeOfBenchPath, knee, r.p99(), limits[:10])
		if x < 0.85*knee {
			traceOf(t, r)
			t.Errorf("seed %d: %.1f orders/s over 60 s, want ≥ %.1f: %v", seed, x, 0.85*knee, limits)
		}
	}
	if sum < 0.88*knee {
		t.Errorf("%.1f orders/s over 60 s on average, want ≥ %.1f (0.88 × fixed %d)", sum, 0.88*knee, kneeOfBenchPath)
	} else {
		t.Logf("%.1f orders/s over 60 s on average (%.3f × fixed %d)", sum, sum/knee, kneeOfBenchPath)
	}
	// One 60 s run's p99 is known to ±3 % (fixed 160's own runs range
	// from 1.06 to 1.11 × the lowest fixed p99), so it is judged over all
	// the runs' orders.
	if p99 := all.p99(); p99 > 1.1*lowest {
		t.Errorf("order p99 %.0f ms over the runs, want ≤ %.0f (1.1 × the lowest fixed, %.0f)", p99, 1.1*lowest, lowest)
	} else {
		t.Logf("order p99 %.0f ms over the runs (%.3f × the lowest fixed, %.0f)", p99, p99/lowest, lowest)
	}
}

// Once at the knee, the limit holds near it: over five minutes it stays
// within 0.8 × the best fixed value (drain windows aside), selling at
// least 0.9 × what the best fixed value sells with an order p99 within
// 1.1 × the lowest fixed one's. A drain that re-measured the baseline at
// half the current limit would move the knee up a raise each time; one
// that did not lower it when it could would let noise pin it low.
func TestHoldsNearTheKneeOfASharedPath(t *testing.T) {
	b := adaptive.Bounds{Min: 5, Max: 160, Start: 20}
	knee, lowest := fixedRun(kneeOfBenchPath).perSecond(100), fixedRun(40).p99()
	for seed := uint64(1); seed <= 10; seed++ {
		r := benchPath().run(b, 300, seed)
		lo, hi := math.MaxInt, 0
		for _, tr := range r.traces[30:] {
			if tr.Decision.Reason != adaptive.ReasonDrain {
				lo, hi = min(lo, tr.Decision.Limit), max(hi, tr.Decision.Limit)
			}
		}
		x, p99 := r.perSecond(300), r.p99()
		t.Logf("seed %d: limit %d–%d from window 30, %.1f orders/s (%.3f × fixed %d: %.1f), order p99 %.0f ms (%.3f × lowest fixed: %.0f)",
			seed, lo, hi, x, x/knee, kneeOfBenchPath, knee, p99, p99/lowest, lowest)
		if 10*lo < 8*kneeOfBenchPath || x < 0.9*knee || p99 > 1.1*lowest {
			traceOf(t, r)
			t.Errorf("seed %d: limit %d–%d, %.1f orders/s, p99 %.0f ms; want ≥ %d, ≥ %.1f/s, p99 ≤ %.0f ms",
				seed, lo, hi, x, p99, 8*kneeOfBenchPath/10, 0.9*knee, 1.1*lowest)
		}
	}
}
