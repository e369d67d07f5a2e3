// Package adaptive finds a queue's targetActive by measuring the order
// path, instead of having an operator guess it.
//
// The order worker adds what every order cost to the queue's current
// decision window in Redis (Store.Record): how many finished, their
// latency from request to final status, payment calls left unanswered,
// orders failed or put back to wait, and database connection holds. Once
// per window the admitter that claims the window (Store.Step, an atomic
// script: N admitters, one decision) hands the last finished window to
// Decide, and the new limit becomes the targetActive of every admission
// tick (Store.Commit, a compare-and-set on the window).
//
// Decide is a pure function: the controller's state and one window in,
// the next state and a reason out. It borrows from TCP Vegas and Netflix's
// concurrency-limits (Vegas, Gradient2): a no-load latency baseline that
// snaps down and drifts up slowly, an additive raise while latency stays
// near it and the limit is what holds the line back, and a multiplicative
// cut — at once, in the window it is seen — when latency rises, payments
// go unanswered, orders fail or wait, database holds grow, or the payment
// breaker opens. Trace is one decision with everything it was made from,
// for the admitter's log and the simulation tests alike.
package adaptive

import (
	"fmt"
	"log/slog"
	"math"
	"strings"
)

// Tuning. The values are the controller's contract; the simulation tests
// (controller_test.go) pin what they give.
const (
	// MinOrders is the fewest finished orders a window needs for its
	// latency to be judged; below it the limit holds.
	MinOrders = 3
	// Tolerance: a smoothed latency above Tolerance × baseline is
	// queueing, and the limit is cut by baseline/latency (at most by
	// half) — back to where queueing started, if latency grows with the
	// limit.
	Tolerance = 1.5
	// RaiseBelow: at or below RaiseBelow × baseline the order path has
	// room; the limit rises by the larger of 1, √limit and RaiseShare of
	// it while it binds. The knee an operator asks for is in the tail —
	// an order p99 within 1.1 × its no-load one — and latency that load
	// adds to a path whose CPU the whole stack shares is a delay every
	// order pays alike, short or long: it lifts the p99 by the same
	// milliseconds as the mean. With pgsim's log-normal payment the p99 is
	// ≈ 2.8 × the mean, so a p99 1.1 × its no-load value is a mean ≈ 1.3 ×
	// (1 + 0.1 × 2.8). On a path that queues instead, the p99 grows as the
	// mean does, and Tolerance still bounds it.
	RaiseBelow = 1.3
	RaiseShare = 0.1
	// ClimbBelow, ClimbShare: until the limit first meets latency above
	// RaiseBelow × baseline (or any cut), a window whose latency is within
	// ClimbBelow × baseline doubles it instead — as TCP's slow start, from
	// the first judged window on (it sets the baseline and, when the limit
	// binds, starts the climb: holding it there cost a window) — so
	// a queue whose order path takes eight times its start reaches the knee
	// in three windows. A climb by a quarter takes ten, a sixth of a 60 s
	// run spent below the knee: from targetActive 20 to 160 it sold 0.68–
	// 0.79 × what a fixed 160 sells, doubling 0.88–0.94 × (the simulation
	// of the benchmark's path). One step past the knee overshoots it at
	// most twofold; latency there is beyond Tolerance on a path that
	// queues, and the cut (by baseline/latency) takes it back at once.
	ClimbBelow = 1.1
	ClimbShare = 1.0
	// Backoff is the cut for a window in which payments went unanswered,
	// orders failed or waited, or database holds grew.
	Backoff = 0.7
	// BreakerBackoff is the cut for a window that ends with the payment
	// breaker open.
	BreakerBackoff = 0.5
	// MaxCut bounds a latency cut to half the limit per window: one
	// outlier window cannot throw the limit to the floor.
	MaxCut = 0.5
	// Smoothing is the least weight of a window's mean latency in the
	// smoothed latency the controller compares (the rest is the previous
	// one); a window of FullWeight orders or more counts in full.
	Smoothing = 0.5
	// FullWeight is the order count at which a window's mean latency is
	// trusted in full for the smoothed latency; fewer orders count less.
	FullWeight = 20
	// BaselineWeight is the order count at which a window's latency moves
	// the baseline in full (a drain's all the way, any other's by Settle
	// of the way, downwards only); fewer orders move it less: a minimum
	// of noisy small windows would bias it low.
	BaselineWeight = 100
	Settle         = 0.5
	// LatencyCV: a window's mean latency is known only to within its
	// standard error, LatencyCV/√orders of it (LatencyCV is the spread of
	// single orders' latencies, standard deviation ÷ mean: a log-normal
	// payment latency with pgsim's tail of 0.5 gives 0.53). So the
	// baseline is the lowest upper bound the windows give for the no-load
	// latency: the first judged window sets it one standard error above
	// its mean, and a later window lowers it (by Settle, weighted as
	// BaselineWeight says) only towards one standard error above its own.
	// Were it the lowest of the windows' means themselves, it would sit
	// below the no-load latency by the noise of the luckiest window (10 %
	// at 150 orders a window), and the limit would stop where latency is
	// 1.1 × the no-load one instead of RaiseBelow × — on a path whose
	// latency grows gently with its load (CPU shared with the rest of the
	// stack) that is far below its knee. Nothing but Drift raises the
	// baseline (see Drains), so it must err high, not low.
	LatencyCV = 0.5
	// Drift is how far the baseline moves up towards a higher latency per
	// window while the limit is too low to drain (at most twice its
	// floor): a lasting slowdown that pinned the limit there becomes the
	// new normal — within RaiseBelow of the baseline — in ≈ 30 windows
	// (0.96³⁰ ≈ 0.3: a fivefold slowdown is then within 1.3 ×). Above it,
	// drains measure the baseline.
	Drift = 0.04
	// SettleDrop: after a cut, a window whose mean latency is below
	// SettleDrop × the last one's is settling — orders admitted before
	// the cut are still finishing — and is not cut again.
	SettleDrop = 0.85
	// Drains: a baseline measured while orders queue (a start above what
	// the order path takes) would make that queue look normal. So, like
	// Vegas probing its no-load round trip, the controller drains: for
	// one window it halves the limit (DrainDepth) and measures that
	// window's latency. If latency fell by more than Tolerance, the limit
	// it came from was queueing beyond it: it is cut to where a queue that
	// grows with the limit would be at RaiseBelow, and the next drain
	// comes FirstDrain windows later to check again. The first drain comes
	// FirstDrain judged windows after the climb ended (see ClimbShare: a
	// climb that doubles the limit each window while latency stays at its
	// baseline is no queue, and halving it then only costs orders), then
	// one every DrainEvery, only while the limit binds.
	//
	// A drain at no more load than the start's (half the limit at most
	// the configured start, where the first judged window set the
	// baseline) takes its latency as the baseline, up or down (weighted by
	// its orders, as BaselineWeight says). A drain at half a limit raised
	// beyond that may only lower it: its latency is that of half the
	// current load, not of no load, on a path whose latency grows with its
	// load at all — and in a closed loop of shoppers most of its orders
	// began before the limit was halved, so it is nearly the full limit's.
	// Taken as the baseline, each drain moved the knee up by a raise, and
	// the limit climbed past it drain by drain. The window after a drain
	// does not raise either: its orders began while the limit was halved,
	// so their latency is the drain's, not the restored limit's.
	DrainDepth = 0.5
	FirstDrain = 3
	DrainEvery = 30
	// SlowHold is a database connection hold the order path should never
	// need (the design's bound). The limit is cut when more than
	// SlowHoldShare of a window's holds take longer — its p99 is above
	// SlowHold — and at least MinSlowHolds do (one slow hold of a few
	// dozen says nothing about a p99), and the holds grew: their mean is
	// above HoldGrowth × its own no-load baseline (kept like latency's).
	// Like a latency cut, the cut is proportional — to where the mean
	// hold would be HoldGrowth × its baseline, at most by half.
	// A database that is as slow at the floor (a busy host, not our load)
	// is one admission cannot fix: it does not pin the limit there.
	SlowHoldMs    = 20
	SlowHoldShare = 0.01
	MinSlowHolds  = 2
	HoldGrowth    = 2
	// Binding: the limit holds the line back when shoppers wait and at
	// least this share of it is in use; only then may it rise (Vegas and
	// Gradient2 do not grow an app-limited limit either, by the same
	// half). Slots freed by finished orders stay free until the next tick
	// refills them, so at any instant a limit in full use shows a tick's
	// worth of orders less than itself.
	Binding = 0.5
)

// Bounds are the limits a queue's configuration sets.
type Bounds struct {
	Min, Max int
	// Start is where the controller starts: the configured targetActive.
	Start int
}

// Clamp puts limit within the bounds, rounded to whole slots.
func (b Bounds) Clamp(limit float64) int {
	n := int(math.Round(limit))
	return max(b.Min, min(b.Max, n))
}

// Sample is what the order path did: what Store.Record adds to a window.
// Latencies are in milliseconds.
type Sample struct {
	Orders    int64   // orders that reached their final status
	LatencyMs float64 // their latencies from request to final status, summed
	MaxMs     float64 // the longest of them
	Failed    int64   // orders FAILED by the order path (a declined card is the shopper's, not counted)
	Deferred  int64   // attempts put back to wait (payment gateway, breaker, a healing line)
	Timeouts  int64   // payment calls left unanswered (timeout, 5xx, refused)
	Holds     int64   // database connection holds
	SlowHolds int64   // holds longer than SlowHoldMs
	HoldMs    float64 // their durations, summed
	HoldMaxMs float64 // the longest hold
}

// Add adds o to s.
func (s *Sample) Add(o Sample) {
	s.Orders += o.Orders
	s.LatencyMs += o.LatencyMs
	s.MaxMs = max(s.MaxMs, o.MaxMs)
	s.Failed += o.Failed
	s.Deferred += o.Deferred
	s.Timeouts += o.Timeouts
	s.Holds += o.Holds
	s.SlowHolds += o.SlowHolds
	s.HoldMs += o.HoldMs
	s.HoldMaxMs = max(s.HoldMaxMs, o.HoldMaxMs)
}

// MeanMs is the window's mean order latency (0 without orders).
func (s Sample) MeanMs() float64 {
	if s.Orders == 0 {
		return 0
	}
	return s.LatencyMs / float64(s.Orders)
}

// HoldMeanMs is the window's mean database connection hold (0 without).
func (s Sample) HoldMeanMs() float64 {
	if s.Holds == 0 {
		return 0
	}
	return s.HoldMs / float64(s.Holds)
}

// Window is one finished decision window: what the order path did, and
// how the line and the payment breaker stood when it was judged.
type Window struct {
	Sample
	BreakerOpen     bool
	Waiting, Active int64
}

// State is the controller's memory between windows.
type State struct {
	Limit      float64 // the limit, unrounded (ticks use Bounds.Clamp of it)
	BaselineMs float64 // the no-load latency estimate; 0 until the first judged window
	LatencyMs  float64 // the smoothed latency of the windows so far; 0 until the first
	MeanMs     float64 // the last judged window's own mean latency
	// HoldBaselineMs is the no-load mean database connection hold; 0
	// until the first judged window.
	HoldBaselineMs float64
	LastCut        bool // the last decision lowered the limit
	// Resume is the limit to go back to after a drain window (0: not
	// draining); SinceDrain counts judged windows since the last drain,
	// Drained whether there was one.
	Resume     float64
	SinceDrain int
	Drained    bool
	// Settled: the limit has met the knee (latency above RaiseBelow ×
	// baseline) or been cut since the start; it no longer climbs (see
	// ClimbShare).
	Settled bool
}

// Start is the state of a controller that starts at b.Start.
func Start(b Bounds) State { return State{Limit: float64(b.Clamp(float64(b.Start)))} }

// Reason says why a decision left the limit where it is.
type Reason string

// The reasons. Lowered reports which of them cut the limit.
const (
	ReasonStart       Reason = "start"            // (re)started at the configured targetActive
	ReasonWarmingUp   Reason = "warming_up"       // the first judged window, the limit not binding: it sets the baseline
	ReasonFewOrders   Reason = "few_orders"       // too few orders finished to judge latency
	ReasonRaise       Reason = "raise"            // latency near baseline and the limit binds: raised
	ReasonIdle        Reason = "idle"             // latency near baseline, but the limit does not hold the line back
	ReasonSteady      Reason = "steady"           // latency above baseline, within tolerance: held
	ReasonSettling    Reason = "settling"         // latency high but falling since the last cut: held
	ReasonDrain       Reason = "drain"            // halved for one window to measure the no-load latency
	ReasonDrained     Reason = "drained"          // back from a drain window (and held one more: its orders began in the drain)
	ReasonLatency     Reason = "latency"          // latency beyond tolerance: cut
	ReasonTimeouts    Reason = "payment_timeouts" // payment calls went unanswered: cut
	ReasonFailures    Reason = "order_failures"   // orders failed: cut
	ReasonDeferred    Reason = "orders_waiting"   // orders were put back to wait: cut
	ReasonDBHold      Reason = "db_hold"          // database holds grew: cut
	ReasonBreakerOpen Reason = "breaker_open"     // the payment breaker is open: cut
)

// Reasons lists every reason, for metrics.
var Reasons = []Reason{ReasonStart, ReasonWarmingUp, ReasonFewOrders, ReasonRaise, ReasonIdle, ReasonSteady,
	ReasonSettling, ReasonDrain, ReasonDrained, ReasonLatency, ReasonTimeouts, ReasonFailures, ReasonDeferred,
	ReasonDBHold, ReasonBreakerOpen}

// Lowered reports whether r is a reason that cuts the limit (a drain
// lowers it for one window only, and is not a cut).
func (r Reason) Lowered() bool {
	switch r {
	case ReasonLatency, ReasonTimeouts, ReasonFailures, ReasonDeferred, ReasonDBHold, ReasonBreakerOpen:
		return true
	}
	return false
}

// Decision is one window's verdict.
type Decision struct {
	Limit  int     // the limit ticks use from now on (within the bounds)
	Reason Reason  // why
	Ratio  float64 // smoothed latency ÷ baseline (0 when not judged)
}

// Decide is one window's decision: the next state and why. It is pure:
// the same inputs give the same output, whatever the clock or the process.
//
// Guarantees: the limit stays within b; it is cut — multiplicatively, in
// this window — when the breaker is open, an order failed, a payment call
// went unanswered, an order waited, more than 1 % (and at least 2) of the
// database holds took over SlowHoldMs while their mean grew beyond
// HoldGrowth × its baseline, or the smoothed latency is beyond Tolerance × baseline
// and not already falling after a cut; it rises only while the smoothed
// latency is within RaiseBelow × baseline and the limit binds (shoppers
// wait and it is in use), and not in the window after a drain; a drain
// lowers it for one window and restores it in the next.
func Decide(b Bounds, s State, w Window) (State, Decision) {
	v := measure(b, s, w)
	switch {
	case w.BreakerOpen:
		return v.cut(BreakerBackoff, ReasonBreakerOpen)
	case w.Failed > 0:
		return v.cut(Backoff, ReasonFailures)
	case w.Timeouts > 0:
		return v.cut(Backoff, ReasonTimeouts)
	case w.Deferred > 0:
		return v.cut(Backoff, ReasonDeferred)
	case v.holdsGrew():
		return v.cut(max(MaxCut, HoldGrowth*s.HoldBaselineMs/w.HoldMeanMs()), ReasonDBHold)
	case s.Resume > 0:
		return v.backFromDrain()
	case !v.judged:
		return v.hold(ReasonFewOrders)
	case s.BaselineMs == 0 && !v.binds():
		return v.hold(ReasonWarmingUp)
	case v.ratio > Tolerance:
		return v.queueing()
	case v.drainDue():
		return v.drain()
	case v.ratio > RaiseBelow:
		v.next.Settled = true
		return v.hold(ReasonSteady)
	case s.Drained && s.SinceDrain == 0:
		// The window after a drain: its orders began at half the limit.
		return v.hold(ReasonDrained)
	case !v.binds():
		return v.hold(ReasonIdle)
	}
	return v.raise()
}

// A verdict is one decision in the making: the window and the state it is
// judged against, the next state as measuring the window left it, and the
// limit and latency ratio the decision starts from. Decide's cases read the
// verdict; its methods end it.
type verdict struct {
	b      Bounds
	s      State // before the window
	w      Window
	next   State   // after it: measured, and then decided
	limit  float64 // the limit the decision starts from (see measure)
	judged bool    // enough orders finished to judge latency (MinOrders)
	ratio  float64 // smoothed latency ÷ baseline (0 when not judged)
}

// measure takes the window's measurements into the next state, apart from
// any decision on the limit: a drain window's latency may move the
// baselines, any other judged window's moves the smoothed latency and then
// the baselines (see latencyBaseline). The limit the decision starts from
// is the one a drain left (whatever it measured), or the state's, within
// the bounds.
func measure(b Bounds, s State, w Window) *verdict {
	limit := s.Limit
	if s.Resume > 0 {
		limit = s.Resume // back from a drain, whatever it measured
	}
	if limit <= 0 {
		limit = float64(b.Start)
	}
	limit = max(float64(b.Min), min(float64(b.Max), limit))
	v := &verdict{b: b, s: s, w: w, next: s, limit: limit, judged: w.Orders >= MinOrders}
	v.next.Resume = 0
	switch {
	case v.judged && s.Resume > 0:
		v.measureDrain()
	case v.judged:
		v.measureWindow()
	}
	return v
}

// measureDrain takes a drain window's latency: the least load's the
// controller sees. It may set the baselines (see DrainDepth); the smoothed
// latency goes on from before it.
func (v *verdict) measureDrain() {
	s, w, mean := v.s, v.w, v.w.MeanMs()
	v.ratio = mean / s.LatencyMs
	if mean < s.BaselineMs || s.Resume*DrainDepth <= float64(v.b.Start) {
		v.next.BaselineMs = s.BaselineMs + min(1, float64(w.Orders)/BaselineWeight)*(mean-s.BaselineMs)
	}
	if w.Holds > 0 {
		v.next.HoldBaselineMs = s.HoldBaselineMs + min(1, float64(w.Holds)/BaselineWeight)*(w.HoldMeanMs()-s.HoldBaselineMs)
	}
	v.next.SinceDrain, v.next.Drained = 0, true
}

// measureWindow takes a judged window's latency into the smoothed latency
// (a window of fewer than FullWeight orders counts less) and the baselines,
// and compares the smoothed latency with the baseline the window found.
func (v *verdict) measureWindow() {
	s, w, mean := v.s, v.w, v.w.MeanMs()
	weight := max(Smoothing, min(1, float64(w.Orders)/FullWeight))
	v.next.LatencyMs = mean
	if s.LatencyMs > 0 {
		v.next.LatencyMs = s.LatencyMs + weight*(mean-s.LatencyMs)
	}
	v.next.MeanMs = mean
	floored := v.limit < 2*float64(v.b.Min)
	v.next.BaselineMs = latencyBaseline(s.BaselineMs, v.next.LatencyMs, w.Orders, floored)
	if w.Holds > 0 {
		v.next.HoldBaselineMs = baseline(s.HoldBaselineMs, w.HoldMeanMs(), w.Holds, floored)
	}
	v.next.SinceDrain++
	if s.BaselineMs > 0 {
		v.ratio = v.next.LatencyMs / s.BaselineMs
	}
}

// binds reports whether the limit holds the line back (see Binding).
func (v *verdict) binds() bool {
	return v.w.Waiting > 0 && float64(v.w.Active) >= Binding*float64(v.b.Clamp(v.limit))
}

// holdsGrew reports whether the window's database holds call for a cut
// (see SlowHoldMs).
func (v *verdict) holdsGrew() bool {
	w := v.w
	return w.SlowHolds >= MinSlowHolds && float64(w.SlowHolds) > SlowHoldShare*float64(w.Holds) &&
		v.s.HoldBaselineMs > 0 && w.HoldMeanMs() > HoldGrowth*v.s.HoldBaselineMs
}

// drainDue reports whether this window halves the limit to measure the
// no-load latency: only while the limit binds, has room to halve, and was
// not just cut, FirstDrain windows after the climb ended or a drain's cut,
// then every DrainEvery.
func (v *verdict) drainDue() bool {
	s, next := v.s, v.next
	return v.binds() && v.limit >= 2*float64(v.b.Min) && !s.LastCut &&
		((!s.Drained && s.Settled && next.SinceDrain >= FirstDrain) || next.SinceDrain >= DrainEvery)
}

// cut lowers the limit to f of itself, not below the bounds' minimum; the
// climb ends with it (see ClimbShare).
func (v *verdict) cut(f float64, r Reason) (State, Decision) {
	v.next.Limit = max(float64(v.b.Min), v.limit*f)
	v.next.LastCut, v.next.Settled = true, true
	return v.next, Decision{Limit: v.b.Clamp(v.next.Limit), Reason: r, Ratio: v.ratio}
}

// hold leaves the limit where the decision started.
func (v *verdict) hold(r Reason) (State, Decision) {
	v.next.Limit = v.limit
	v.next.LastCut = false
	return v.next, Decision{Limit: v.b.Clamp(v.limit), Reason: r, Ratio: v.ratio}
}

// backFromDrain restores the limit a drain halved — or cuts it, when half
// the load brought latency down beyond the tolerance: the limit it came
// from was queueing, and the next drain comes soon to check again.
func (v *verdict) backFromDrain() (State, Decision) {
	if v.judged && v.ratio > 0 && v.ratio*Tolerance < 1 {
		v.next.Drained = false
		return v.cut(max(MaxCut, v.ratio*RaiseBelow), ReasonLatency)
	}
	return v.hold(ReasonDrained)
}

// queueing answers a smoothed latency beyond the tolerance with a cut by
// baseline/latency — unless it is already falling after the last cut.
func (v *verdict) queueing() (State, Decision) {
	s := v.s
	if s.LastCut && s.MeanMs > 0 && v.w.MeanMs() < SettleDrop*s.MeanMs {
		// Orders admitted before the last cut are still finishing:
		// latency is falling already, cutting again would overshoot.
		v.next.Limit, v.next.LastCut = v.limit, true
		return v.next, Decision{Limit: v.b.Clamp(v.limit), Reason: ReasonSettling, Ratio: v.ratio}
	}
	return v.cut(max(MaxCut, 1/v.ratio), ReasonLatency)
}

// drain halves the limit for one window (see Drains); the next window
// restores it from next.Resume.
func (v *verdict) drain() (State, Decision) {
	v.next.Resume, v.next.Limit, v.next.LastCut = v.limit, max(float64(v.b.Min), v.limit*DrainDepth), false
	return v.next, Decision{Limit: v.b.Clamp(v.next.Limit), Reason: ReasonDrain, Ratio: v.ratio}
}

// raise adds the larger of 1, √limit and RaiseShare of it — ClimbShare
// while the limit has not yet met the knee — up to the bounds' maximum.
func (v *verdict) raise() (State, Decision) {
	step := max(1, math.Sqrt(v.limit), RaiseShare*v.limit)
	if !v.s.Settled && v.ratio <= ClimbBelow {
		step = max(step, ClimbShare*v.limit)
	}
	v.next.Limit = min(float64(v.b.Max), v.limit+step)
	v.next.LastCut = false
	return v.next, Decision{Limit: v.b.Clamp(v.next.Limit), Reason: ReasonRaise, Ratio: v.ratio}
}

// latencyBaseline is the no-load latency estimate after a window of
// orders whose smoothed latency is lat: the first sets it at the window's
// upper bound (see LatencyCV), a lower bound pulls it down (by Settle of
// the way from BaselineWeight orders on); a higher latency pushes it up by
// Drift only while the limit is too low to drain (floored).
func latencyBaseline(prev, lat float64, orders int64, floored bool) float64 {
	bound := lat * (1 + LatencyCV/math.Sqrt(float64(orders)))
	switch {
	case prev == 0:
		return bound
	case bound < prev:
		return prev + Settle*min(1, float64(orders)/BaselineWeight)*(bound-prev)
	case floored && lat > prev:
		return prev + Drift*(lat-prev)
	}
	return prev
}

// baseline is the no-load database hold estimate after a window whose
// mean hold is lat: lower holds pull it down (by Settle of the way from
// BaselineWeight holds on); higher ones push it up by Drift only while the
// limit is too low to drain (floored).
func baseline(prev, lat float64, orders int64, floored bool) float64 {
	switch {
	case prev == 0:
		return lat
	case lat < prev:
		w := Settle * min(1, float64(orders)/BaselineWeight)
		return prev + w*(lat-prev)
	case floored:
		return prev + Drift*(lat-prev)
	}
	return prev
}

// Trace is one decision with everything it was made from: the window
// judged (and the line and the breaker as the decision saw them), the
// controller's state before and after, and the decision. The admitter logs
// one per decision (at debug level) and the simulation tests print the
// same, so a run on the real stack can be read like a simulated one.
type Trace struct {
	Window        Window
	Before, After State
	Decision      Decision
}

// LogValue is the trace as slog attributes: the decision, then the
// window's figures, then the state it was judged against.
func (t Trace) LogValue() slog.Value {
	w := t.Window
	return slog.GroupValue(
		slog.Int("limit", t.Decision.Limit),
		slog.String("reason", string(t.Decision.Reason)),
		slog.Float64("ratio", round2(t.Decision.Ratio)),
		slog.Int64("orders", w.Orders),
		slog.Float64("meanMs", round2(w.MeanMs())),
		slog.Float64("maxMs", w.MaxMs),
		slog.Int64("failed", w.Failed),
		slog.Int64("deferred", w.Deferred),
		slog.Int64("timeouts", w.Timeouts),
		slog.Int64("holds", w.Holds),
		slog.Int64("slowHolds", w.SlowHolds),
		slog.Float64("holdMeanMs", round2(w.HoldMeanMs())),
		slog.Bool("breakerOpen", w.BreakerOpen),
		slog.Int64("waiting", w.Waiting),
		slog.Int64("active", w.Active),
		slog.Float64("latencyMs", round2(t.After.LatencyMs)),
		slog.Float64("baselineMs", round2(t.Before.BaselineMs)),
		slog.Float64("nextBaselineMs", round2(t.After.BaselineMs)),
		slog.Float64("holdBaselineMs", round2(t.Before.HoldBaselineMs)),
		slog.Float64("stateLimit", round2(t.Before.Limit)),
		slog.Int("sinceDrain", t.Before.SinceDrain),
	)
}

// String is the trace on one line, as LogValue has it.
func (t Trace) String() string {
	var b strings.Builder
	for i, a := range t.LogValue().Group() {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%v", a.Key, a.Value)
	}
	return b.String()
}

func round2(f float64) float64 { return math.Round(f*100) / 100 }
