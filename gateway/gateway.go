package main

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/nats-io/nats.go/jetstream"

	apidoc "usher/api"
	"usher/gateway/admin"
	"usher/gateway/door"
	"usher/gateway/gate"
	"usher/gateway/httpapi"
	"usher/gateway/inflight"
	"usher/gateway/lineapi"
	"usher/gateway/orderapi"
	"usher/gateway/page"
	"usher/gateway/throttle"
	"usher/gateway/userauth"
	"usher/internal/catalog"
	"usher/internal/pow"
	"usher/internal/ratelimit"
	"usher/internal/ticket"
	"usher/internal/token"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/admission"
	"usher/internal/waitqueue/claims"
	"usher/internal/waitqueue/drop"
	"usher/internal/waitqueue/line"
	"usher/internal/waitqueue/passes"
)

// gateway is what the gateway's rooms are built from: run's connections
// and settings, or a test's (harness_test.go). app builds the rooms from
// it, inside out, and routes the requests to them.
type gateway struct {
	log         *slog.Logger
	queues      *catalog.Catalog
	line        *waitqueue.Client // the rooms take its roles (lineRoles)
	events      jetstream.JetStream
	tickets     *ticket.Signer
	keys        *token.Keyring
	orders      orderapi.Records
	stock       admin.Stock
	sales       admin.Sales // nil: no sold figures
	adminToken  []byte
	users       userauth.Auth      // nil: X-User-Id from anyone
	limiter     *ratelimit.Limiter // nil: no rate limits
	ips         httpapi.ClientIPs
	http        httpapi.Limits
	notifierURL string
	// epoch is the entries stream's identity (see bus.Identities): tickets
	// and token ids carry it.
	epoch func() string
	// orderHold is how long a requested order holds its admission slot:
	// the order's deadline and a margin for its last payment try.
	orderHold time.Duration
	// joins gathers a queue's concurrent joins into one record (group
	// commit); its zero value records each join on its own.
	joins lineapi.Grouping
	// joinsInFlight is the most joins answered at once (0: no bound):
	// past it a join gets 503 at once (lineapi.Deps.InFlight). While joins
	// take longer than joinLatency the bound is lower (package inflight;
	// 0: it stays).
	joinsInFlight int
	joinLatency   time.Duration
	// readyWait bounds how long a join that can be admitted at once waits
	// for it in its own answer (lineapi.Deps.ReadyWait).
	readyWait time.Duration
	// gateRecheck is how long the gate trusts a pass's last check
	// (gate.Deps.Recheck); 0: every request asks the line.
	gateRecheck time.Duration
	pageCSS     string      // a shop's stylesheet for the waiting-room page
	pageLangs   *page.Langs // the page's languages; nil: the shipped ones
	now         func() time.Time
	earliest    func() time.Time // the earliest Redis's time can be now (clock.Synced.Earliest)
	ready       func(context.Context) error
	jitter      func() float64 // uniform in [0,1), safe for concurrent use: spreads the polls

	metrics    *metrics
	ops        opsDeps     // the ops dashboard's extra reads
	challenges *pow.Issuer // the door's challenges; nil: a random secret

	// gate is the proxy gate's configuration (USHER_GATE_FILE; no rules:
	// the gate is off), gateKeys its pass keys (nil: random ones), and
	// gateRoom the gate app last built, whose sweeper run runs.
	gate     gate.Config
	gateKeys *gate.Keys
	gateRoom *gate.Gate

	// adminApart puts the admin API and the dashboard on their own app,
	// admin, served on USHER_ADMIN_ADDR: an address only ops can reach
	// (loopback, a management network), while the public app answers 404
	// for them as for any unknown path. The bearer token still guards
	// every admin call either way.
	adminApart bool
	admin      *fiber.App
}

// rooms are the gateway's rooms, each built from the few dependencies it
// uses.
type rooms struct {
	door      *door.Door
	line      *lineapi.API
	orders    *orderapi.API
	admin     *admin.API
	dashboard *admin.Dashboard
	page      *page.Page
	gate      *gate.Gate
}

// app builds the rooms and the fiber application that routes to them
// (and, with adminApart, the admin app, g.admin).
func (g *gateway) app() *fiber.App {
	g.defaults()
	r := g.rooms()
	g.gateRoom = r.gate
	if g.queues != nil {
		g.queues.OnRetire(func(q string) { g.metrics.forget(q); r.door.Forget(q) })
	}
	app := g.newApp("usher-gateway")
	// The admin API and the dashboard: on this app, or on their own.
	adm := fiber.Router(app)
	if g.adminApart {
		g.admin = g.newApp("usher-gateway-admin")
		adm = g.admin
	}
	routes(app, adm, r, g)
	app.Use(httpapi.NotFound(app))
	if g.adminApart {
		g.admin.Use(httpapi.NotFound(g.admin))
	}
	return app
}

// defaults fills what a test's gateway leaves unset, and makes once what
// every build of the rooms shares.
func (g *gateway) defaults() {
	if g.metrics == nil {
		g.metrics = newMetrics()
	}
	if g.users == nil {
		g.users = userauth.Header(httpapi.ClientIPs{})
	}
	if g.challenges == nil {
		g.challenges = door.RandomIssuer()
	}
	if g.gateKeys == nil {
		g.gateKeys = gate.RandomKeys()
	}
	if g.ops.slots == nil {
		g.ops.slots = make(chan struct{}, admin.MaxStreams)
	}
	if g.ops.sold == nil && g.sales != nil {
		g.ops.sold = admin.NewSoldCache(g.sales, g.now, admin.SoldEvery)
	}
}

// rooms builds the rooms, inside out: the rate limits and the place
// writer first, then the door, which the line API asks, then the orders'
// front and the admin rooms, and the page, which runs the others'
// handlers.
func (g *gateway) rooms() rooms {
	var limiter interface {
		Allow(context.Context, time.Time, ...ratelimit.Check) (ratelimit.Decision, error)
	}
	if g.limiter != nil {
		limiter = g.limiter
	}
	limits := throttle.New(limiter, g.ips, g.now, g.metrics.limited)
	places := lineapi.NewPlaces(g.keys, g.notifierURL, g.now, g.jitter)
	ln := newLineRoles(g.line)
	var r rooms
	r.door = door.New(door.Deps{Issuer: g.challenges, Line: doorLine{ln.client, ln.line}, Queues: g.queues, Places: places, IPs: g.ips,
		Now: g.now, Epoch: g.epoch, Log: g.log, Metrics: g.metrics.pow})
	r.line = lineapi.New(lineapi.Deps{Line: ln.line, Invites: ln.drop, Admission: ln.admission, Queues: g.queues, Events: g.events, Tickets: g.tickets,
		Places: places, Door: r.door, Users: g.users, Limits: limits, Now: g.now, Earliest: g.earliest,
		Epoch: g.epoch, Log: g.log, Metrics: g.metrics.line, Grouping: g.joins,
		InFlight: inflight.New(g.joinsInFlight, g.joinLatency, g.now), ReadyWait: g.readyWait})
	r.orders = orderapi.New(orderapi.Deps{Line: ln.claims, Records: g.orders, Keys: g.keys, Queues: g.queues,
		Events: g.events, Users: g.users, Limits: limits, Now: g.now, Epoch: g.epoch, Hold: g.orderHold, Log: g.log})
	r.admin = admin.New(admin.Deps{Queues: g.queues, Line: adminLine{ln.line, ln.admission, ln.drop, ln.claims}, Events: g.events, Stock: g.stock, Sales: g.sales,
		Limits: g.ops.limits, Token: g.adminToken, Now: g.now, Log: g.log})
	dash := admin.DashboardDeps{Queues: g.queues, Line: ln.line, Difficulties: r.door, Breaker: g.ops.breaker,
		Outcomes: g.ops.outcomes, Limits: g.ops.limits, Interval: g.ops.interval, Slots: g.ops.slots,
		WriteLimit: g.http.OrDefault().Write, Now: g.now, Log: g.log}
	if g.ops.sold != nil {
		dash.Sold = g.ops.sold
	}
	r.dashboard = admin.NewDashboard(dash)
	r.page = page.New(page.Deps{Queues: g.queues, Langs: g.pageLangs, CSSURL: g.pageCSS, Users: g.users,
		Join: r.line.Join, Poll: r.line.Poll, Order: r.orders.PlaceOrder, Now: g.now, Log: g.log})
	r.gate = gate.New(gate.Deps{Config: g.gate, Keys: g.gateKeys, Passes: ln.passes, Leaver: r.line, Queues: g.queues,
		Users: g.users, Tickets: g.tickets, Tokens: g.keys, Proxies: g.ips, Now: g.now, Earliest: g.earliest,
		Epoch: g.epoch, Log: g.log, Metrics: g.metrics.gate, Recheck: g.gateRecheck})
	return r
}

// lineRoles are the roles of the line (Redis) the gateway's ACL user may
// play, on one client: each room takes the few methods it uses.
type lineRoles struct {
	client    *waitqueue.Client
	line      *line.Line
	admission *admission.Admission
	claims    *claims.Claims
	drop      *drop.Drop
	passes    *passes.Passes
}

func newLineRoles(c *waitqueue.Client) lineRoles {
	return lineRoles{client: c, line: line.New(c), admission: admission.New(c), claims: claims.New(c), drop: drop.New(c),
		passes: passes.New(c)}
}

// doorLine is what the door reads and spends in the line: its proofs'
// scripts, run on the line's client (and its pipelines), and the line's
// figures its difficulty follows.
type doorLine struct {
	*waitqueue.Client
	*line.Line
}

// adminLine is what the admin API reads and writes in the line: its
// figures, a closing's state, a drop's invites and the stock it sells.
type adminLine struct {
	*line.Line
	*admission.Admission
	*drop.Drop
	*claims.Claims
}

// newApp is a fiber app of the gateway's, the public one or the admin
// listener's: the same limits, error writer and metrics.
func (g *gateway) newApp(name string) *fiber.App {
	app := httpapi.NewApp(name, g.http, g.log, g.metrics.http.Measure)
	app.Get("/healthz", httpapi.Healthz)
	app.Get("/readyz", httpapi.Readyz(g.ready))
	return app
}

// routes puts every room's handlers under the paths of the API document
// (api/openapi.yaml): the public ones on app, the admin API and the
// dashboard on adm (app itself, or the admin listener's).
func routes(app *fiber.App, adm fiber.Router, r rooms, g *gateway) {
	app.Get("/metrics", g.metrics.handler())
	app.Get("/.well-known/jwks.json", jwks(g.keys))
	app.Get("/openapi.json", openAPI)
	app.Get("/q/:queue", r.page.Show)
	app.Post("/q/:queue", r.page.Form) // the page without JavaScript
	app.Get("/q/static/:file", r.page.Asset)
	adm.Get("/ops", r.dashboard.Page)
	adm.Get("/ops/static/:file", r.dashboard.Asset)

	v1 := app.Group("/v1")
	v1.Get("/queues/:queue", r.line.PublicQueue)
	v1.Get("/queues/:queue/challenge", r.door.Challenge)
	v1.Post("/queues/:queue/tickets", r.line.Join)
	v1.Get("/queues/:queue/tickets/:ticket", r.door.ShadowTicket, r.line.Poll)
	v1.Delete("/queues/:queue/tickets/:ticket", r.door.ShadowTicket, r.line.Leave)
	v1.Post("/orders", r.orders.PlaceOrder)
	v1.Get("/orders/:id", r.orders.GetOrder)
	// The proxy gate: what nginx, Caddy and Traefik ask (Envoy under its
	// prefix, with the original method and path), and the pass.
	v1.Get("/gate", r.gate.Check)
	v1.Get("/gate/pass", r.gate.Pass)
	v1.Post("/gate/pass", r.gate.Pass)
	app.Use(gate.EnvoyPrefix, r.gate.Envoy)

	v1admin := adm.Group("/v1/admin", r.admin.RequireAdmin, r.admin.RequireAdminUser)
	v1admin.Get("/queues", r.admin.ListQueues)
	v1admin.Put("/queues/:queue", r.admin.PutQueue)
	v1admin.Get("/queues/:queue", r.admin.GetQueue)
	v1admin.Delete("/queues/:queue", r.admin.DeleteQueue)
	v1admin.Post("/queues/:queue/invites", r.admin.CreateInvites)
	v1admin.Put("/queues/:queue/notice", r.admin.PutNotice)
	v1admin.Delete("/queues/:queue/notice", r.admin.DeleteNotice)
	v1admin.Put("/stock/:sku", r.admin.PutStock)
	v1admin.Get("/ops", r.dashboard.Snapshot)
	v1admin.Get("/ops/stream", r.dashboard.Stream)
}

// jwks serves the public keys of the entry tokens, for downstream
// services (the shop's checkout) to check them: GET /.well-known/jwks.json.
func jwks(keys *token.Keyring) fiber.Handler {
	return func(c *fiber.Ctx) error {
		c.Set(fiber.HeaderContentType, "application/jwk-set+json")
		c.Set(fiber.HeaderCacheControl, "public, max-age=300")
		return c.Send(keys.JWKS())
	}
}

// openAPI serves the OpenAPI 3.1 document of the gateway and the notifier
// (api/openapi.yaml, as JSON): GET /openapi.json. The gateway serves the
// whole contract, the notifier's stream included (its path names the
// notifier as its server); the notifier serves none.
func openAPI(c *fiber.Ctx) error {
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	c.Set(fiber.HeaderCacheControl, "public, max-age=300")
	return c.Send(apidoc.JSON())
}

// opsDeps is what the dashboard reads besides the catalog and the line,
// and what its viewers share across builds of the rooms. Zero values
// work: no breaker reads as closed, no outcomes as none.
type opsDeps struct {
	breaker  admin.Breaker
	outcomes admin.Outcomes
	limits   admin.Limits  // nil: adaptive queues show no limit
	interval time.Duration // between stream events; 0: one second
	slots    chan struct{} // one per open stream
	// sold shares the reads of units sold among every viewer; nil: made
	// from the gateway's sales, if it has them.
	sold *admin.SoldCache
}

// lockedJitter is r's Float64, safe for concurrent use.
func lockedJitter(r *rand.Rand) func() float64 {
	var mu sync.Mutex
	return func() float64 {
		mu.Lock()
		defer mu.Unlock()
		return r.Float64()
	}
}
