package gate

import (
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"usher/gateway/httpapi"
	"usher/internal/problem"
)

// Pass hands a READY shopper their pass and sends them back where they
// came from: GET|POST /v1/gate/pass with ticket and return (the query's,
// or a form's). The waiting-room page sends them here; the pass is the
// cookie usher_pass, bound to the admission and its user.
func (g *Gate) Pass(c *fiber.Ctx) error {
	if !g.On() {
		return problem.New(fiber.StatusNotFound, "not-found", "the gate is off: the gateway has no USHER_GATE_FILE")
	}
	tkt, ret := c.Query("ticket"), c.Query("return")
	if c.Method() == fiber.MethodPost {
		tkt, ret = first(c.FormValue("ticket"), tkt), first(c.FormValue("return"), ret)
	}
	t, err := g.tickets.Parse(tkt)
	if err != nil {
		return problem.New(fiber.StatusUnauthorized, "invalid-ticket", "the ticket is not one this gateway issued")
	}
	if t.Epoch != g.epoch() {
		return problem.New(fiber.StatusGone, "ticket-stale", "the line this ticket was for has been reset; join again")
	}
	r := g.ruleOf(t.Queue)
	if r == nil {
		return problem.New(fiber.StatusNotFound, "gate-not-found", "no gate rule names queue "+t.Queue)
	}
	dest, err := g.returnTo(c, ret)
	if err != nil {
		return err
	}
	user, err := g.users.Identify(c)
	if err != nil {
		return err
	}
	if user != t.User {
		return problem.New(fiber.StatusForbidden, "ticket-of-another-user", "the ticket is another user's")
	}
	u, err := g.passes.Use(c.UserContext(), t.Queue, t.Seq, t.User)
	if err != nil {
		return httpapi.LineDown(err)
	}
	if !u.Holds() || u.ReadyAt.After(g.earliest()) {
		return problem.New(fiber.StatusConflict, "not-ready", "this ticket's turn has not come, or has ended: see its poll")
	}
	now := g.now()
	exp := now.Add(r.PassTTL)
	if u.ExpiresAt.After(now) && u.ExpiresAt.Before(exp) {
		exp = u.ExpiresAt // the admission frees its slot then: the pass ends with it
	}
	c.Cookie(&fiber.Cookie{Name: CookieName, Value: g.keys.Seal(Pass{Queue: t.Queue, Seq: t.Seq, User: t.User, ExpiresAt: exp}),
		Path: "/", Domain: r.CookieDomain, Expires: exp, MaxAge: int(exp.Sub(now) / time.Second),
		Secure: !g.cfg.InsecureCookie, HTTPOnly: true, SameSite: fiber.CookieSameSiteLaxMode})
	g.metrics.count(t.Queue, outIssued)
	c.Set(fiber.HeaderCacheControl, "no-store")
	c.Set(fiber.HeaderLocation, dest)
	c.Status(fiber.StatusSeeOther)
	return nil
}

// ruleOf is the first rule of queue q, nil when none names it.
func (g *Gate) ruleOf(q string) *Rule {
	for i := range g.cfg.Rules {
		if g.cfg.Rules[i].Queue == q {
			return &g.cfg.Rules[i]
		}
	}
	return nil
}

// maxReturnLen bounds a return URL.
const maxReturnLen = 4096

// returnTo is where a pass sends the shopper: ret, a path on this host or
// an http(s) URL of this host, of a rule's host or of one of its
// returnHosts; "/" when ret is empty. Any other is refused: the pass must
// not be an open redirect.
func (g *Gate) returnTo(c *fiber.Ctx, ret string) (string, error) {
	bad := problem.New(fiber.StatusBadRequest, "invalid-return", "return must be a path, or a URL of the shop's own hosts")
	if ret == "" {
		return "/", nil
	}
	if len(ret) > maxReturnLen || strings.ContainsAny(ret, "\\\r\n\t") {
		return "", bad
	}
	u, err := url.Parse(ret)
	if err != nil || u.User != nil || u.Opaque != "" {
		return "", bad
	}
	if u.Scheme == "" && u.Host == "" {
		if !strings.HasPrefix(ret, "/") || strings.HasPrefix(ret, "//") {
			return "", bad
		}
		return ret, nil
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", bad
	}
	host := strings.ToLower(u.Hostname())
	if own := g.ownHost(c); host != "" && host == own {
		return ret, nil
	}
	for _, r := range g.cfg.Rules {
		if slices.Contains(r.ReturnHosts, host) {
			return ret, nil
		}
	}
	return "", bad
}

// ownHost is the host the shopper asked for the pass: X-Forwarded-Host
// from a trusted proxy, else Host.
func (g *Gate) ownHost(c *fiber.Ctx) string {
	peer, _ := netip.AddrFromSlice(c.Context().RemoteIP())
	if g.proxies.IsTrusted(peer.Unmap()) && c.Get(hForwardedHost) != "" {
		return hostOnly(c.Get(hForwardedHost))
	}
	return hostOnly(c.Get(fiber.HeaderHost))
}

// hostOnly is a Host header's host, lower case, without its port.
func hostOnly(hostport string) string {
	u, err := url.Parse("http://" + hostport)
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Hostname())
}
