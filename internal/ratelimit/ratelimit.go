// Package ratelimit refuses too-frequent requests before they reach the
// line: a Generic Cell Rate Algorithm (GCRA) kept in Redis.
//
// GCRA is a token bucket that stores one number per key, the theoretical
// arrival time (TAT) of the next request: a limit of Rate per second with a
// Burst lets a client send Burst requests at once and then one every 1/Rate
// seconds, with no window edges to game and no counters to sweep. A key
// costs one short string in Redis and expires by itself once its client has
// been quiet long enough to have a full burst again.
//
// One decision is one atomic script call, however many limits it checks (a
// join checks the client's IP and the user together): a request is charged
// to every limit or, when any refuses it, to none. The script call goes
// through a Runner, so a gateway can send it in the same pipelines as its
// other per-request scripts.
//
// The time is the caller's, passed into the script, never Redis TIME: tests
// are deterministic, and gateways with synced clocks agree within their
// skew, which only shifts a client's budget by that skew.
package ratelimit

import (
	"context"
	_ "embed" // the limiter's Lua
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"usher/internal/keyspace"
	"usher/internal/script"
)

// MaxRate bounds Rate and Burst: one request per microsecond is the
// script's resolution.
const MaxRate = 1_000_000

// Policy is one limit: Burst requests at once, then Rate per second. A Rate
// of 0 turns the limit off.
type Policy struct {
	Name  string // the policy's identifier in the RateLimit header fields
	Rate  int    // requests per second, sustained
	Burst int    // requests allowed at once (at least 1 when Rate > 0)
}

// On reports whether the policy limits anything.
func (p Policy) On() bool { return p.Rate > 0 }

// Window is the time a drained burst takes to refill.
func (p Policy) Window() time.Duration {
	if p.Rate <= 0 {
		return 0
	}
	return time.Duration(p.burst()) * p.interval()
}

func (p Policy) burst() int { return max(p.Burst, 1) }

// interval is the emission interval 1/Rate, in whole microseconds.
func (p Policy) interval() time.Duration {
	return time.Duration(max(1_000_000/min(p.Rate, MaxRate), 1)) * time.Microsecond
}

// Check is one limit applied to one key.
type Check struct {
	Key    string
	Policy Policy
}

// Result is one limit's view of a decision.
type Result struct {
	Policy Policy
	// Allowed: this limit alone would let the request through.
	Allowed bool
	// Remaining is how many more requests this limit would let through
	// right now (after this one when the decision allowed it).
	Remaining int
	// RetryAfter is how long until this limit lets a request through
	// again: 0 when it does now.
	RetryAfter time.Duration
	// ResetAfter is how long until this limit has its full burst back.
	ResetAfter time.Duration
}

// Decision is the outcome of Allow.
type Decision struct {
	Allowed bool
	Results []Result // one per Check that was on, in order
}

// Denied returns the limit that refused the request with the longest wait,
// and false when the request was allowed.
func (d Decision) Denied() (Result, bool) {
	var worst Result
	found := false
	for _, r := range d.Results {
		if !r.Allowed && (!found || r.RetryAfter > worst.RetryAfter) {
			worst, found = r, true
		}
	}
	return worst, found
}

// Runner runs a Lua script. A *waitqueue.Client with batching on runs it in
// the gateway's shared pipelines; Direct runs it on a plain client.
type Runner interface {
	RunScript(ctx context.Context, sc *script.Script, keys []string, args ...any) *redis.Cmd
}

// Direct returns a Runner that sends each script call on its own.
func Direct(rdb redis.Scripter) Runner { return direct{rdb} }

type direct struct{ rdb redis.Scripter }

func (d direct) RunScript(ctx context.Context, sc *script.Script, keys []string, args ...any) *redis.Cmd {
	return sc.Run(ctx, d.rdb, keys, args...)
}

// Limiter makes rate-limit decisions. It is safe for concurrent use.
type Limiter struct {
	run Runner
}

// New returns a Limiter whose script calls go through run.
func New(run Runner) *Limiter { return &Limiter{run: run} }

// Key names the limiter key of id in queue q's slot: the hash tag {q} puts
// it beside the queue's other keys in Redis Cluster. kind and id must not
// contain what the caller did not validate.
func Key(q, kind, id string) string { return keyspace.Of(q).RateLimit(kind, id) }

// Lua returns the source of gcra(KEYS, ARGV) (gcra.lib.lua): the decision
// of one request against every limit given, atomically, for a script that
// decides a request's limits in the same step as its own work (a join's
// lookup: one round trip where two were); Allow's script is it alone. Plan
// gives the call's keys and arguments and reads its reply.
func Lua() string { return gcraLua }

var (
	//go:embed gcra.lib.lua
	gcraLua string
	//go:embed gcra.lua
	gcraOnlyLua string
)

var gcraScript = script.New(gcraLua + gcraOnlyLua)

// Plan is one decision at a time against the checks whose policy is on:
// the keys and arguments of gcra's call (see Lua), and how to read its
// reply.
type Plan struct {
	Keys []string
	Args []any
	on   []Policy
}

// NewPlan plans the decision of one request at now against every check
// whose policy is on.
func NewPlan(now time.Time, checks ...Check) Plan {
	p := Plan{Keys: make([]string, 0, len(checks)), Args: make([]any, 1, 1+2*len(checks))}
	p.Args[0] = now.UnixMicro()
	for _, c := range checks {
		if !c.Policy.On() {
			continue
		}
		p.Keys = append(p.Keys, c.Key)
		p.Args = append(p.Args, c.Policy.interval().Microseconds(), c.Policy.burst())
		p.on = append(p.on, c.Policy)
	}
	return p
}

// Empty reports whether no check is on: the request is allowed without
// asking Redis.
func (p Plan) Empty() bool { return len(p.on) == 0 }

// Decide reads gcra's reply.
func (p Plan) Decide(res []int64) (Decision, error) {
	if len(res) != 1+4*len(p.on) {
		return Decision{}, fmt.Errorf("rate limit: reply of %d fields for %d limits", len(res), len(p.on))
	}
	d := Decision{Allowed: res[0] == 1, Results: make([]Result, len(p.on))}
	for i, pol := range p.on {
		r := res[1+4*i:]
		d.Results[i] = Result{
			Policy:     pol,
			Allowed:    r[0] == 1,
			Remaining:  int(r[1]),
			RetryAfter: time.Duration(r[2]) * time.Microsecond,
			ResetAfter: time.Duration(r[3]) * time.Microsecond,
		}
		if !d.Allowed && r[0] == 1 {
			// Refused elsewhere, so not charged here: one more remains.
			d.Results[i].Remaining = min(d.Results[i].Remaining+1, pol.burst())
			d.Results[i].ResetAfter = max(d.Results[i].ResetAfter-pol.interval(), 0)
		}
	}
	return d, nil
}

// Allow decides one request at now against every check whose policy is on,
// in one round trip. With no such check it allows without calling Redis.
func (l *Limiter) Allow(ctx context.Context, now time.Time, checks ...Check) (Decision, error) {
	p := NewPlan(now, checks...)
	if p.Empty() {
		return Decision{Allowed: true}, nil
	}
	res, err := l.run.RunScript(ctx, gcraScript, p.Keys, p.Args...).Int64Slice()
	if err != nil {
		return Decision{}, fmt.Errorf("rate limit: %w", err)
	}
	return p.Decide(res)
}

// Seconds rounds d up to whole seconds, at least 1 for any positive d: the
// unit of Retry-After and of the RateLimit fields.
func Seconds(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	return int(math.Ceil(d.Seconds()))
}

// PolicyField is the RateLimit-Policy field value (draft-ietf-httpapi-
// ratelimit-headers) for the results' policies: each names its burst as the
// quota and the time a drained burst takes to refill as the window, e.g.
// "perip";q=100;w=2.
func PolicyField(rs []Result) string {
	b := make([]byte, 0, 64)
	for i, r := range rs {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = strconv.AppendQuote(b, r.Policy.Name)
		b = append(b, ";q="...)
		b = strconv.AppendInt(b, int64(r.Policy.burst()), 10)
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, int64(max(Seconds(r.Policy.Window()), 1)), 10)
	}
	return string(b)
}

// Field is the RateLimit field value: per policy the requests remaining (r)
// and the seconds until that much more is available (t): the wait for the
// next request when none remains, else the time to a full burst, e.g.
// "peruser";r=0;t=1.
func Field(rs []Result) string {
	b := make([]byte, 0, 64)
	for i, r := range rs {
		if i > 0 {
			b = append(b, ", "...)
		}
		t := r.ResetAfter
		if !r.Allowed {
			t = r.RetryAfter
		}
		b = strconv.AppendQuote(b, r.Policy.Name)
		b = append(b, ";r="...)
		b = strconv.AppendInt(b, int64(max(r.Remaining, 0)), 10)
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, int64(Seconds(t)), 10)
	}
	return string(b)
}
