package main

import (
	"net/netip"
	"strconv"

	"github.com/gofiber/fiber/v2"

	"usher/gateway/httpapi"
	"usher/internal/catalog"
	"usher/internal/problem"
	"usher/internal/ratelimit"
	"usher/internal/waitqueue"
)

// Rate limits stand in front of the line: a join is checked per client IP
// and per user, an order per IP, per user and against the queue's total
// orders per second, each in one Redis round trip (see internal/ratelimit).
// Polls are not limited: a waiting shopper must always see the line, and a
// poll costs one signature check and one Redis script anyway.

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

// lookupJoin charges a join to its client IP and its user and looks the
// user up in the line, in one Redis round trip (waitqueue.LookupLimited):
// a 429 when a limit refuses.
func (a *api) lookupJoin(c *fiber.Ctx, cfg catalog.Config, user string) (waitqueue.Current, error) {
	var plan ratelimit.Plan
	if a.limiter != nil {
		rl := cfg.RateLimit
		plan = ratelimit.NewPlan(a.now(),
			ratelimit.Check{Key: ratelimit.Key(cfg.Name, "ip", ipKey(a.ips.Of(c))), Policy: ipPolicy(rl)},
			ratelimit.Check{Key: ratelimit.Key(cfg.Name, "u", user), Policy: userPolicy(rl)},
		)
	}
	cur, d, err := a.line.LookupLimited(c.UserContext(), cfg.Name, user, plan)
	if err != nil {
		return cur, httpapi.LineDown(err)
	}
	return cur, a.decided(c, d)
}

// limitOrder charges an order to its client IP, its user (when known) and
// the queue's orders per second: the last guard on the order path, should
// the line ever be bypassed. It answers 429 when any limit refuses.
func (a *api) limitOrder(c *fiber.Ctx, cfg catalog.Config, user string) error {
	rl := cfg.RateLimit
	checks := []ratelimit.Check{
		{Key: ratelimit.Key(cfg.Name, "ip", ipKey(a.ips.Of(c))), Policy: ipPolicy(rl)},
		{Key: ratelimit.Key(cfg.Name, "orders", "all"), Policy: ratelimit.Policy{Name: policyOrders, Rate: rl.OrdersPerSecond, Burst: rl.OrdersPerSecond}},
	}
	if user != "" {
		checks = append(checks, ratelimit.Check{Key: ratelimit.Key(cfg.Name, "ou", user), Policy: userPolicy(rl)})
	}
	return a.limit(c, checks...)
}

// limit decides a request and writes the RateLimit header fields on its
// answer; a refusal is a 429 with Retry-After.
func (a *api) limit(c *fiber.Ctx, checks ...ratelimit.Check) error {
	if a.limiter == nil {
		return nil
	}
	d, err := a.limiter.Allow(c.UserContext(), a.now(), checks...)
	if err != nil {
		return httpapi.LineDown(err)
	}
	return a.decided(c, d)
}

// decided writes a decision's RateLimit header fields on the answer; a
// refusal is a 429 with Retry-After.
func (a *api) decided(c *fiber.Ctx, d ratelimit.Decision) error {
	if len(d.Results) == 0 {
		return nil
	}
	c.Set("RateLimit-Policy", ratelimit.PolicyField(d.Results))
	c.Set("RateLimit", ratelimit.Field(d.Results))
	denied, refused := d.Denied()
	if !refused {
		return nil
	}
	a.metrics.limited.WithLabelValues(denied.Policy.Name).Inc()
	wait := max(ratelimit.Seconds(denied.RetryAfter), 1)
	p := problem.New(fiber.StatusTooManyRequests, "rate-limited",
		"too many requests ("+denied.Policy.Name+" limit); retry in "+strconv.Itoa(wait)+" s")
	p.RetryAfter = wait
	return p
}
