package adaptive

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"usher/internal/keyspace"
	"usher/internal/script"
)

// Store keeps the adaptive admission in Redis, under each queue's hash
// tag: the order path's figures per decision window (keyspace
// OrderWindow, written by the order workers) and the controller's state
// (keyspace Limit, written by the admitters). Every time decision reads
// Redis TIME: a window is Redis time in ms ÷ its length. It is safe for
// concurrent use.
type Store struct {
	rdb redis.UniversalClient
}

// NewStore returns a Store on rdb.
func NewStore(rdb redis.UniversalClient) *Store { return &Store{rdb: rdb} }

// recordScript (record_window.lua) adds a sample to the queue's current window.
// See record_window.lua for its keys, arguments and reply.
var recordScript = script.New(recordLua)

//go:embed record_window.lua
var recordLua string

// Record adds s to queue q's current decision window (window long, on
// Redis time). Latencies are rounded to whole milliseconds, hold maxima to
// microseconds.
func (st *Store) Record(ctx context.Context, q string, window time.Duration, s Sample) error {
	k := keyspace.Of(q)
	args := []any{k.Prefix(), window.Milliseconds(), int(keyspace.OrderWindowTTL(window).Seconds()),
		"+", "n", s.Orders, "+", "latMs", int64(math.Round(s.LatencyMs)), "max", "maxMs", int64(math.Round(s.MaxMs)),
		"+", "failed", s.Failed, "+", "deferred", s.Deferred, "+", "timeouts", s.Timeouts,
		"+", "holds", s.Holds, "+", "slowHolds", s.SlowHolds, "+", "holdUs", int64(math.Round(s.HoldMs * 1000)),
		"max", "holdMaxUs", int64(math.Round(s.HoldMaxMs * 1000))}
	if err := recordScript.Run(ctx, st.rdb, []string{k.Limit()}, args...).Err(); err != nil {
		return fmt.Errorf("record order window of %s: %w", q, err)
	}
	return nil
}

// stepScript (step.lua) is one admission tick's look at the adaptive limit.
// See step.lua for its keys, arguments and reply.
var stepScript = script.New(stepLua)

//go:embed step.lua
var stepLua string

// commitScript (commit.lua) records the decision of window w.
// See commit.lua for its keys, arguments and reply.
var commitScript = script.New(commitLua)

//go:embed commit.lua
var commitLua string

// Params are a queue's adaptive settings, as one tick sees them.
type Params struct {
	Window time.Duration // the decision window
	Bounds Bounds
	// Lease is how long a claim on a window lasts: if its holder dies
	// before committing, another caller claims the window after it.
	Lease time.Duration
}

// fingerprint names what the controller starts from: a new targetActive
// starts it again (an operator's explicit word wins).
func (p Params) fingerprint() string { return strconv.Itoa(p.Bounds.Start) }

// Step is the adaptive limit as one tick finds it.
type Step struct {
	Window  int64  // the current window (Redis time ÷ the window's length)
	Limit   int    // the limit in effect, within the bounds
	Reason  Reason // why it is what it is
	Started bool   // the controller (re)started now, at Bounds.Start
	// EventLimit is the limit last recorded as an event.
	EventLimit int
	// Due: this caller claimed Window and must decide it (Decide with
	// State and Last, with Last.BreakerOpen filled in) and Commit.
	Due   bool
	State State
	Last  Window // window Window-1's figures and the line now
}

// Step reads the queue's adaptive limit for a tick, (re)starting the
// controller when the queue's start changed, and claims the current
// window's decision when it is due (see stepScript).
func (st *Store) Step(ctx context.Context, q string, p Params) (Step, error) {
	k := keyspace.Of(q)
	res, err := stepScript.Run(ctx, st.rdb, []string{k.Limit(), k.Waiting(), k.Active()},
		k.Prefix(), p.Window.Milliseconds(), p.fingerprint(), p.Bounds.Start, int(keyspace.LimitTTL.Seconds()),
		max(p.Lease, time.Millisecond).Milliseconds()).Slice()
	if err != nil {
		return Step{}, fmt.Errorf("adaptive step of %s: %w", q, err)
	}
	if len(res) < 5 {
		return Step{}, fmt.Errorf("adaptive step of %s: reply of %d fields", q, len(res))
	}
	kind, _ := res[0].(string)
	s := Step{Window: asInt(res[1]), Reason: Reason(asString(res[3])), Started: kind == "start"}
	s.Limit = p.Bounds.Clamp(asFloat(res[2]))
	s.EventLimit = int(asFloat(res[4]))
	if kind != "due" {
		return s, nil
	}
	if len(res) != 9 {
		return Step{}, fmt.Errorf("adaptive step of %s: due reply of %d fields", q, len(res))
	}
	s.Due = true
	f, _ := res[5].([]any)
	if len(f) != 9 {
		return Step{}, fmt.Errorf("adaptive step of %s: state of %d fields", q, len(f))
	}
	s.State = State{Limit: asFloat(f[0]), BaselineMs: asFloat(f[1]), LatencyMs: asFloat(f[2]), MeanMs: asFloat(f[3]),
		LastCut: asString(f[4]) == "1", Resume: asFloat(f[5]), SinceDrain: int(asFloat(f[6])), Drained: asString(f[7]) == "1",
		HoldBaselineMs: asFloat(f[8])}
	win, _ := res[6].([]any)
	s.Last = windowOf(win)
	s.Last.Waiting, s.Last.Active = asInt(res[7]), asInt(res[8])
	return s, nil
}

// windowOf decodes a window hash (HGETALL's field, value list).
func windowOf(kv []any) Window {
	var w Window
	for i := 0; i+1 < len(kv); i += 2 {
		v := asFloat(kv[i+1])
		switch asString(kv[i]) {
		case "n":
			w.Orders = int64(v)
		case "latMs":
			w.LatencyMs = v
		case "maxMs":
			w.MaxMs = v
		case "failed":
			w.Failed = int64(v)
		case "deferred":
			w.Deferred = int64(v)
		case "timeouts":
			w.Timeouts = int64(v)
		case "holds":
			w.Holds = int64(v)
		case "slowHolds":
			w.SlowHolds = int64(v)
		case "holdUs":
			w.HoldMs = v / 1000
		case "holdMaxUs":
			w.HoldMaxMs = v / 1000
		}
	}
	return w
}

// ErrNotDecided is Commit's answer when the window was decided by
// another caller, or the controller restarted meanwhile: the decision is
// dropped.
var ErrNotDecided = errors.New("adaptive: the window was decided already")

// Commit records the decision d of the window s claimed, with the
// controller's next state, and eventLimit, the limit last recorded as an
// event (d.Limit when this decision is recorded as one). It returns
// ErrNotDecided when another caller decided the window first or the
// controller restarted since the step.
func (st *Store) Commit(ctx context.Context, q string, p Params, s Step, next State, d Decision, w Window, eventLimit int) error {
	k := keyspace.Of(q)
	ok, err := commitScript.Run(ctx, st.rdb, []string{k.Limit()}, s.Window, p.fingerprint(), int(keyspace.LimitTTL.Seconds()),
		"limit", ff(next.Limit), "applied", d.Limit, "reason", string(d.Reason),
		"baseline", ff(next.BaselineMs), "latency", ff(next.LatencyMs), "mean", ff(next.MeanMs), "lastCut", flag(next.LastCut),
		"resume", ff(next.Resume), "sinceDrain", next.SinceDrain, "drained", flag(next.Drained), "holdBaseline", ff(next.HoldBaselineMs),
		"evLimit", eventLimit, "orders", w.Orders).Int()
	if err != nil {
		return fmt.Errorf("adaptive commit of %s: %w", q, err)
	}
	if ok != 1 {
		return ErrNotDecided
	}
	return nil
}

// Status is a queue's adaptive limit as the last decision left it.
type Status struct {
	Found      bool      // false: no controller state (adaptive off, or not started yet)
	Limit      int       // the limit in effect (not clamped to a configuration changed since)
	Reason     Reason    // why
	DecidedAt  time.Time // when (Redis time)
	LatencyMs  float64   // the smoothed order latency it judged
	BaselineMs float64   // the no-load latency it judged against
	Orders     int64     // orders finished in the window it judged
}

// Status reads queue q's adaptive limit in one round trip.
func (st *Store) Status(ctx context.Context, q string) (Status, error) {
	v, err := st.rdb.HMGet(ctx, keyspace.Of(q).Limit(), "applied", "reason", "at", "latency", "baseline", "orders").Result()
	if err != nil {
		return Status{}, fmt.Errorf("adaptive status of %s: %w", q, err)
	}
	if v[0] == nil {
		return Status{}, nil
	}
	return Status{Found: true, Limit: int(asFloat(v[0])), Reason: Reason(asString(v[1])),
		DecidedAt: time.UnixMilli(asInt(v[2])), LatencyMs: asFloat(v[3]), BaselineMs: asFloat(v[4]), Orders: asInt(v[5])}, nil
}

func ff(f float64) string { return strconv.FormatFloat(f, 'f', 3, 64) }

func flag(b bool) int {
	if b {
		return 1
	}
	return 0
}

func asString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	}
	return ""
}

func asFloat(v any) float64 {
	switch x := v.(type) {
	case int64:
		return float64(x)
	case string:
		f, _ := strconv.ParseFloat(x, 64)
		return f
	}
	return 0
}

func asInt(v any) int64 { return int64(asFloat(v)) }
