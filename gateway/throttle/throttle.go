// Package throttle holds the rate limits that stand in front of the line
// and the orders, and answers a request they refuse: 429 with Retry-After,
// and the RateLimit header fields on every answer they decided.
package throttle

import (
	"context"
	"net/netip"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/prometheus/client_golang/prometheus"

	"usher/gateway/httpapi"
	"usher/internal/catalog"
	"usher/internal/problem"
	"usher/internal/ratelimit"
)

// A join is checked per client IP and per user, an order per IP, per user
// and against the queue's total orders per second, each in one Redis round
// trip (see internal/ratelimit). Polls are not limited: a waiting shopper
// must always see the line, and a poll costs one signature check and one
// Redis script anyway.

// Policy names in the RateLimit and RateLimit-Policy header fields.
const (
	policyIP     = "perip"
	policyUser   = "peruser"
	policyOrders = "orders"
)

// ipKey is the limiter's id for addr: an IPv4 address itself, an IPv6
// address its /64, since one subscriber (or one bot) gets a whole /64.
func ipKey(addr netip.Addr) string {
	if addr.Is6() {
		p, _ := addr.Prefix(64)
		return p.String()
	}
	return addr.String()
}

func ipPolicy(rl catalog.RateLimit) ratelimit.Policy {
	return ratelimit.Policy{Name: policyIP, Rate: rl.PerIPPerSecond, Burst: rl.PerIPBurst}
}

func userPolicy(rl catalog.RateLimit) ratelimit.Policy {
	return ratelimit.Policy{Name: policyUser, Rate: rl.PerUserPerSecond, Burst: rl.PerUserBurst}
}

// limiter decides rate limits (ratelimit.Limiter).
type limiter interface {
	Allow(ctx context.Context, now time.Time, checks ...ratelimit.Check) (ratelimit.Decision, error)
}

// Limits charges requests to their limits. Safe for concurrent use.
type Limits struct {
	limiter limiter // nil: no limits
	ips     httpapi.ClientIPs
	now     func() time.Time
	limited *prometheus.CounterVec
}

// New charges requests on limiter (nil: none is limited), each to the
// client address ips find, counting refusals in metrics.
func New(l limiter, ips httpapi.ClientIPs, now func() time.Time, metrics *Metrics) *Limits {
	return &Limits{limiter: l, ips: ips, now: now, limited: metrics.limited}
}

// Metrics count the refusals, by the policy that refused.
type Metrics struct {
	limited *prometheus.CounterVec
}

// NewMetrics registers the rate limits' metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{limited: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "usher_rate_limited_total", Help: "Requests refused with 429, by the policy that refused them.",
	}, []string{"policy"})}
	reg.MustRegister(m.limited)
	return m
}

// JoinPlan is the charge of a join to its client IP and its user, which
// the line decides in the round trip that looks the user up
// (waitqueue.LookupLimited); the zero plan when nothing is limited.
func (l *Limits) JoinPlan(c *fiber.Ctx, cfg catalog.Config, user string) ratelimit.Plan {
	if l.limiter == nil {
		return ratelimit.Plan{}
	}
	rl := cfg.RateLimit
	return ratelimit.NewPlan(l.now(),
		ratelimit.Check{Key: ratelimit.Key(cfg.Name, "ip", ipKey(l.ips.Of(c))), Policy: ipPolicy(rl)},
		ratelimit.Check{Key: ratelimit.Key(cfg.Name, "u", user), Policy: userPolicy(rl)},
	)
}

// Order charges an order to its client IP, its user (when known) and
// the queue's orders per second: the last guard on the order path, should
// the line ever be bypassed. It answers 429 when any limit refuses.
func (l *Limits) Order(c *fiber.Ctx, cfg catalog.Config, user string) error {
	rl := cfg.RateLimit
	checks := []ratelimit.Check{
		{Key: ratelimit.Key(cfg.Name, "ip", ipKey(l.ips.Of(c))), Policy: ipPolicy(rl)},
		{Key: ratelimit.Key(cfg.Name, "orders", "all"), Policy: ratelimit.Policy{Name: policyOrders, Rate: rl.OrdersPerSecond, Burst: rl.OrdersPerSecond}},
	}
	if user != "" {
		checks = append(checks, ratelimit.Check{Key: ratelimit.Key(cfg.Name, "ou", user), Policy: userPolicy(rl)})
	}
	return l.limit(c, checks...)
}

// limit decides a request and writes the RateLimit header fields on its
// answer; a refusal is a 429 with Retry-After.
func (l *Limits) limit(c *fiber.Ctx, checks ...ratelimit.Check) error {
	if l.limiter == nil {
		return nil
	}
	d, err := l.limiter.Allow(c.UserContext(), l.now(), checks...)
	if err != nil {
		return httpapi.LineDown(err)
	}
	return l.Decided(c, d)
}

// Decided writes a decision's RateLimit header fields on the answer; a
// refusal is a 429 with Retry-After.
func (l *Limits) Decided(c *fiber.Ctx, d ratelimit.Decision) error {
	if len(d.Results) == 0 {
		return nil
	}
	c.Set("RateLimit-Policy", ratelimit.PolicyField(d.Results))
	c.Set("RateLimit", ratelimit.Field(d.Results))
	denied, refused := d.Denied()
	if !refused {
		return nil
	}
	l.limited.WithLabelValues(denied.Policy.Name).Inc()
	wait := max(ratelimit.Seconds(denied.RetryAfter), 1)
	p := problem.New(fiber.StatusTooManyRequests, "rate-limited",
		"too many requests ("+denied.Policy.Name+" limit); retry in "+strconv.Itoa(wait)+" s")
	p.RetryAfter = wait
	return p
}
