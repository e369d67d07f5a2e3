package main

import (
	"bytes"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"usher/shared/catalog"
	"usher/shared/problem"
	"usher/shared/ratelimit"
)

// Rate limits stand in front of the line: a join is checked per client IP
// and per user, an order per IP, per user and against the queue's total
// orders per second, each in one Redis round trip (see shared/ratelimit).
// Polls are not limited: a waiting shopper must always see the line, and a
// poll costs one signature check and one Redis script anyway.

// Policy names in the RateLimit and RateLimit-Policy header fields.
const (
	policyIP     = "perip"
	policyUser   = "peruser"
	policyOrders = "orders"
)

// clientIPs decides which address a request comes from. Without trusted
// proxies it is the socket's peer. Behind them, header names where they put
// the client: X-Forwarded-For is read from the right, skipping trusted
// hops, so whatever a client writes into the header itself is never
// believed; any other header (CF-Connecting-IP, X-Real-IP) holds one
// address that the trusted proxy sets.
type clientIPs struct {
	trusted []netip.Prefix
	header  string
}

// parseClientIPs reads USHER_TRUSTED_PROXIES (CIDRs or single addresses)
// and USHER_CLIENT_IP_HEADER (default X-Forwarded-For once proxies are
// trusted).
func parseClientIPs(proxies []string, header string) (clientIPs, error) {
	var ips clientIPs
	var bad []string
	for _, p := range proxies {
		if pfx, err := netip.ParsePrefix(p); err == nil {
			ips.trusted = append(ips.trusted, pfx.Masked())
		} else if addr, err := netip.ParseAddr(p); err == nil {
			addr = addr.Unmap()
			ips.trusted = append(ips.trusted, netip.PrefixFrom(addr, addr.BitLen()))
		} else {
			bad = append(bad, strconv.Quote(p))
		}
	}
	if len(bad) > 0 {
		return ips, fmt.Errorf("USHER_TRUSTED_PROXIES: %s: want CIDRs such as 10.0.0.0/8", strings.Join(bad, ", "))
	}
	switch {
	case header != "" && len(ips.trusted) == 0:
		return ips, fmt.Errorf("USHER_CLIENT_IP_HEADER=%q needs USHER_TRUSTED_PROXIES: without them any client could claim any address", header)
	case header == "" && len(ips.trusted) > 0:
		header = fiber.HeaderXForwardedFor
	}
	if header != "" && !validHeaderName(header) {
		return ips, fmt.Errorf("USHER_CLIENT_IP_HEADER=%q: not a header name", header)
	}
	ips.header = header
	return ips, nil
}

func validHeaderName(h string) bool {
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return h != ""
}

func (ips clientIPs) isTrusted(a netip.Addr) bool {
	for _, p := range ips.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// resolve returns the client address of a request from peer whose client
// IP header lines are values. An address that does not parse is never the
// answer: the nearest hop that does is.
func (ips clientIPs) resolve(peer netip.Addr, values [][]byte) netip.Addr {
	peer = peer.Unmap()
	if ips.header == "" || !ips.isTrusted(peer) {
		return peer
	}
	if !strings.EqualFold(ips.header, fiber.HeaderXForwardedFor) {
		if len(values) != 1 {
			return peer // absent, or a duplicate the proxy did not write
		}
		if a, err := netip.ParseAddr(string(bytes.TrimSpace(values[0]))); err == nil {
			return a.Unmap()
		}
		return peer
	}
	// Right to left over every X-Forwarded-For line, joined in order.
	client := peer
	for i := len(values) - 1; i >= 0; i-- {
		rest := values[i]
		for len(rest) > 0 {
			var hop []byte
			if j := bytes.LastIndexByte(rest, ','); j >= 0 {
				hop, rest = rest[j+1:], rest[:j]
			} else {
				hop, rest = rest, nil
			}
			a, err := netip.ParseAddr(string(bytes.TrimSpace(hop)))
			if err != nil {
				return client
			}
			client = a.Unmap()
			if !ips.isTrusted(client) {
				return client
			}
		}
	}
	return client
}

// clientIP is the request's client address.
func (a *api) clientIP(c *fiber.Ctx) netip.Addr {
	peer, _ := netip.AddrFromSlice(c.Context().RemoteIP())
	var values [][]byte
	if a.ips.header != "" {
		values = c.Request().Header.PeekAll(a.ips.header)
	}
	return a.ips.resolve(peer, values)
}

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

// limitJoin charges a join to its client IP and its user.
func (a *api) limitJoin(c *fiber.Ctx, cfg catalog.Config, user string) error {
	rl := cfg.RateLimit
	return a.limit(c,
		ratelimit.Check{Key: ratelimit.Key(cfg.Name, "ip", ipKey(a.clientIP(c))), Policy: ipPolicy(rl)},
		ratelimit.Check{Key: ratelimit.Key(cfg.Name, "u", user), Policy: userPolicy(rl)},
	)
}

// limitOrder charges an order to its client IP, its user (when known) and
// the queue's orders per second: the last guard on the order path, should
// the line ever be bypassed. It answers 429 when any limit refuses.
func (a *api) limitOrder(c *fiber.Ctx, cfg catalog.Config, user string) error {
	rl := cfg.RateLimit
	checks := []ratelimit.Check{
		{Key: ratelimit.Key(cfg.Name, "ip", ipKey(a.clientIP(c))), Policy: ipPolicy(rl)},
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
		return lineDown(err)
	}
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
