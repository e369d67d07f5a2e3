// Package gate is the gateway's answer to a reverse proxy that asks,
// before it forwards a request to the shop, whether the request may pass:
// nginx's auth_request, Caddy's forward_auth, Traefik's ForwardAuth and
// Envoy's ext_authz (HTTP) all ask GET /v1/gate (Envoy: under
// /v1/gate/envoy/), describing the original request in headers.
//
// The rules (USHER_GATE_FILE) say which requests a queue protects and
// which it never queues. A protected request passes with a pass: a cookie
// the gateway signed (HMAC-SHA256, pass.go) when the waiting room sent
// the shopper, READY, to GET|POST /v1/gate/pass, naming the admission and
// its user. Checking one costs a MAC in memory and one Redis script that
// finds the admission still holding its slot and records its use — no
// broker — and that answer is trusted for a moment (recent.go). Without a pass a page navigation is sent to the waiting room
// (302, or 401 with Usher-Location for nginx); anything else gets 429, or
// 503 while the queue is closed, as problem+json with Retry-After.
//
// The slot is the admission's: it frees when the shop's completePath
// passes the gate with the pass, when the pass has been idle for passIdle
// (the sweeper, sweep.go), or at the admission's own expiry.
package gate

import (
	"context"
	"crypto/subtle"
	"log/slog"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"usher/gateway/httpapi"
	"usher/internal/catalog"
	"usher/internal/problem"
	"usher/internal/shopper"
	"usher/internal/ticket"
	"usher/internal/token"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/passes"
)

// The headers the gate answers a passing request with, for the proxy to
// copy to the origin, and the ones it tells the proxy with.
const (
	HeaderUser      = "Usher-User"
	HeaderQueue     = "Usher-Queue"
	HeaderAdmission = "Usher-Admission" // the admission's token id
	HeaderToken     = "Usher-Token"     // the entry token, for the origin to verify with the JWKS
	HeaderGate      = "Usher-Gate"      // the decision: pass, bypass, unprotected, complete, fail-open
	HeaderLocation  = "Usher-Location"  // the waiting room, on a 401 (nginx's error_page follows it)
	HeaderStatus    = "Usher-Status"    // on a 401: the status the proxy answers an API call with
)

// EnvoyPrefix is the path Envoy's ext_authz HTTP service is pointed at: it
// appends the original path to it.
const EnvoyPrefix = "/v1/gate/envoy"

// Passes is the gate's part of the line (internal/waitqueue/passes).
type Passes interface {
	Use(ctx context.Context, q string, seq uint64, user string) (passes.Use, error)
	Sweep(ctx context.Context, q string, idle time.Duration, limit int) ([]passes.Idle, error)
}

// Leaver frees an admitted entry's slot as a shopper's own leave does
// (package lineapi).
type Leaver interface {
	LeaveEntry(ctx context.Context, q string, seq uint64, user string) (waitqueue.Status, error)
}

// Queues is the part of the catalog the gate reads.
type Queues interface {
	Get(name string) (catalog.Config, bool)
}

// Users tells who the shopper is (package userauth).
type Users interface {
	Identify(c *fiber.Ctx) (string, error)
}

// Tickets reads the tickets the gateway issues.
type Tickets interface {
	Parse(str string) (ticket.Ticket, error)
}

// Deps are what the gate is built from.
type Deps struct {
	Config  Config
	Keys    *Keys
	Passes  Passes
	Leaver  Leaver
	Queues  Queues
	Users   Users
	Tickets Tickets
	Tokens  shopper.Signer // mints the Usher-Token the origin may verify
	// Proxies are the callers whose headers are believed; with none
	// trusted, loopback's are.
	Proxies httpapi.ClientIPs
	Now     func() time.Time
	// Earliest is the earliest Redis's time can be now: a pass is issued
	// once readyAt has passed by it.
	Earliest func() time.Time
	Epoch    func() string
	Log      *slog.Logger
	Metrics  *Metrics
	// Recheck is how long the gate trusts the line's word that a pass's
	// admission holds its slot before it asks again (recent.go); 0 asks
	// on every request.
	Recheck time.Duration
}

// DefaultRecheck is Deps.Recheck for the gateway.
const DefaultRecheck = time.Second

// Gate answers the proxies. It is safe for concurrent use.
type Gate struct {
	cfg      Config
	keys     *Keys
	passes   Passes
	leaver   Leaver
	queues   Queues
	users    Users
	tickets  Tickets
	tokens   shopper.Signer
	proxies  httpapi.ClientIPs
	now      func() time.Time
	earliest func() time.Time
	epoch    func() string
	log      *slog.Logger
	metrics  *Metrics
	recent   *recent
}

// New returns the gate of deps.
func New(d Deps) *Gate {
	g := &Gate{cfg: d.Config, keys: d.Keys, passes: d.Passes, leaver: d.Leaver, queues: d.Queues, users: d.Users,
		tickets: d.Tickets, tokens: d.Tokens, proxies: d.Proxies, now: d.Now, earliest: d.Earliest, epoch: d.Epoch,
		log: d.Log, metrics: d.Metrics, recent: newRecent(d.Recheck)}
	if !g.proxies.TrustsProxies() {
		// Without trusted proxies, the ones on the gateway's own host are,
		// with their X-Forwarded-For.
		g.proxies, _ = httpapi.ParseClientIPs([]string{"127.0.0.0/8", "::1/128"}, "")
	}
	return g
}

// On reports whether the gate has rules: without USHER_GATE_FILE every
// gate endpoint answers 404.
func (g *Gate) On() bool { return len(g.cfg.Rules) > 0 }

// Check answers a proxy's question about the request its headers
// describe: GET /v1/gate.
func (g *Gate) Check(c *fiber.Ctx) error { return g.check(c, "") }

// Envoy answers Envoy's ext_authz HTTP service, which sends the original
// method and appends the original path (and query) to EnvoyPrefix.
func (g *Gate) Envoy(c *fiber.Ctx) error {
	uri := strings.TrimPrefix(c.OriginalURL(), EnvoyPrefix)
	if uri == "" || uri[0] == '?' {
		uri = "/" + uri
	}
	return g.check(c, uri)
}

func (g *Gate) check(c *fiber.Ctx, envoyURI string) error {
	if err := g.caller(c); err != nil {
		return err
	}
	c.Set(fiber.HeaderCacheControl, "no-store")
	o, err := originalOf(c, envoyURI, g.proxies.Of(c))
	if err != nil {
		g.metrics.count("", outInvalid)
		return err
	}
	r := match(g.cfg.Rules, o)
	if r == nil {
		return g.allow(c, "", outUnprotected)
	}
	if r.bypassed(c, o) {
		return g.allow(c, r.Queue, outBypass)
	}
	p, ok := g.passOf(c, r)
	if !ok {
		return g.deny(c, r, o)
	}
	return g.admit(c, r, o, p)
}

// caller refuses a gate without rules, and a caller that is not a proxy
// the gateway trusts: its headers would say anything.
func (g *Gate) caller(c *fiber.Ctx) error {
	if !g.On() {
		return problem.New(fiber.StatusNotFound, "not-found", "the gate is off: the gateway has no USHER_GATE_FILE")
	}
	peer, _ := netip.AddrFromSlice(c.Context().RemoteIP())
	if !g.proxies.IsTrusted(peer.Unmap()) {
		return problem.New(fiber.StatusForbidden, "untrusted-gate-caller",
			"the gate answers only the proxies in USHER_TRUSTED_PROXIES (or on loopback)")
	}
	return nil
}

// bypassed reports whether r never queues o: its method, its path, its
// client's network, or the partner header with the secret.
func (r *Rule) bypassed(c *fiber.Ctx, o original) bool {
	if r.Methods[o.method] || hasPrefix(o.path, r.BypassPaths) {
		return true
	}
	for _, p := range r.CIDRs {
		if p.Contains(o.client) {
			return true
		}
	}
	if r.Header == "" {
		return false
	}
	v := c.Request().Header.Peek(r.Header)
	return len(v) > 0 && subtle.ConstantTimeCompare(v, r.secret) == 1
}

// passOf is the request's pass for r's queue: signed by the gate, not
// expired, of the user the request names.
func (g *Gate) passOf(c *fiber.Ctx, r *Rule) (Pass, bool) {
	v := c.Cookies(CookieName)
	if v == "" {
		return Pass{}, false
	}
	p, ok := g.keys.Open(v)
	if !ok || p.Queue != r.Queue || !g.now().Before(p.ExpiresAt) {
		g.metrics.count(r.Queue, outBadPass)
		return Pass{}, false
	}
	user, err := g.users.Identify(c)
	if err != nil || user != p.User {
		// Another user's cookie (or nobody's request): no pass.
		g.metrics.count(r.Queue, outBadPass)
		return Pass{}, false
	}
	return p, true
}

// admit lets a request with a good pass through while its admission holds
// the slot, telling the origin who it is; on r's completePath it frees
// the slot.
func (g *Gate) admit(c *fiber.Ctx, r *Rule, o original, p Pass) error {
	ctx := c.UserContext()
	k := passKey{queue: r.Queue, seq: p.Seq, user: p.User}
	h, ok := g.recent.get(k, g.now())
	if !ok {
		u, err := g.passes.Use(ctx, r.Queue, p.Seq, p.User)
		if err != nil {
			return g.failed(c, r, p, err)
		}
		if !u.Holds() {
			g.recent.forget(k)
			return g.deny(c, r, o)
		}
		tok, err := g.tokens.Sign(token.Claims{ID: u.TokenID, Queue: r.Queue, User: p.User, ReadyAt: u.ReadyAt, ExpiresAt: u.ExpiresAt})
		if err != nil {
			return err
		}
		h = heldPass{use: u, token: tok}
		g.recent.put(k, u, tok, g.now())
	}
	identify(c, p)
	c.Set(HeaderAdmission, h.use.TokenID)
	c.Set(HeaderToken, h.token)
	if r.CompletePath == "" || o.path != r.CompletePath {
		return g.allow(c, r.Queue, outPass)
	}
	g.recent.forget(k)
	// The shop says the order finished: the slot frees, as the shopper's
	// own leave frees it. The request passes either way; a leave that
	// fails is freed by the idle sweep or the admission's expiry.
	if _, err := g.leaver.LeaveEntry(ctx, r.Queue, p.Seq, p.User); err != nil {
		g.log.Warn("gate: completion could not free the slot", "queue", r.Queue, "err", err)
		return g.allow(c, r.Queue, outCompleteFailed)
	}
	return g.allow(c, r.Queue, outComplete)
}

// failed answers a pass whose admission the line cannot be asked about:
// r's failMode.
func (g *Gate) failed(c *fiber.Ctx, r *Rule, p Pass, err error) error {
	if r.FailMode == FailOpen {
		g.log.Warn("gate: line unreadable, failing open", "queue", r.Queue, "err", err)
		identify(c, p)
		return g.allow(c, r.Queue, outFailOpen)
	}
	g.metrics.count(r.Queue, outFailClosed)
	pr := problem.New(fiber.StatusServiceUnavailable, "unavailable", "the waiting room cannot check passes right now; retry")
	pr.RetryAfter = 5
	return httpapi.UnavailableError{Cause: err, Problem: pr}
}

// identify tells the origin whose pass it is.
func identify(c *fiber.Ctx, p Pass) {
	c.Set(HeaderUser, p.User)
	c.Set(HeaderQueue, p.Queue)
}

// allow answers 200: the proxy forwards the request.
func (g *Gate) allow(c *fiber.Ctx, q, outcome string) error {
	g.metrics.count(q, outcome)
	c.Set(HeaderGate, outcome)
	c.Status(fiber.StatusOK)
	return nil
}

// queuedRetry is when a queued API call may try again: a page in the
// waiting room moves on in seconds.
const queuedRetry = 5

// closedRetry is when a call to a closed or paused queue may try again.
const closedRetry = 60

// deny turns away a request without a good pass: a navigation to the
// waiting room, anything else with 429 (503 while the queue is closed or
// paused). With ?mode=401 or the rule's deny 401, every denial is a 401
// (nginx's auth_request passes on nothing else) that says where to go,
// or which status to answer, in headers.
func (g *Gate) deny(c *fiber.Ctx, r *Rule, o original) error {
	as401 := r.Deny == Deny401 || c.Query("mode") == "401"
	if navigation(c, o.method) {
		loc := r.WaitingRoom + "?return=" + url.QueryEscape(o.url())
		if as401 {
			g.metrics.count(r.Queue, outDenied)
			c.Set(HeaderLocation, loc)
			return problem.New(fiber.StatusUnauthorized, "gate-pass-required", "this page is behind the waiting room: see Usher-Location")
		}
		g.metrics.count(r.Queue, outRedirect)
		c.Set(fiber.HeaderLocation, loc)
		c.Status(fiber.StatusFound)
		return nil
	}
	cfg, ok := g.queues.Get(r.Queue)
	closed := !ok || cfg.State != catalog.StateOpen || cfg.Ended(g.now())
	p := problem.New(fiber.StatusTooManyRequests, "gate-queued", "this request needs a pass from the waiting room of queue "+r.Queue)
	p.RetryAfter = queuedRetry
	if closed {
		p = problem.New(fiber.StatusServiceUnavailable, "gate-closed", "queue "+r.Queue+" admits nobody now")
		p.RetryAfter = closedRetry
		g.metrics.count(r.Queue, outClosed)
	} else {
		g.metrics.count(r.Queue, outQueued)
	}
	if as401 {
		c.Set(HeaderStatus, strconv.Itoa(p.Status))
		c.Set(fiber.HeaderRetryAfter, strconv.Itoa(p.RetryAfter))
		return problem.New(fiber.StatusUnauthorized, "gate-pass-required", p.Detail)
	}
	return p
}
