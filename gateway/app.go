package main

import (
	"context"
	"crypto/subtle"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/nats-io/nats.go/jetstream"

	"usher/gateway/door"
	"usher/gateway/httpapi"
	"usher/gateway/lineapi"
	"usher/gateway/throttle"
	"usher/gateway/userauth"
	"usher/internal/catalog"
	"usher/internal/pow"
	"usher/internal/problem"
	"usher/internal/ratelimit"
	"usher/internal/ticket"
	"usher/internal/token"
	"usher/internal/waitqueue"
)

// publisher is the part of JetStream the gateway uses.
type publisher interface {
	Publish(ctx context.Context, subj string, data []byte, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error)
}

// queueCatalog is the part of the catalog the gateway uses.
type queueCatalog interface {
	Get(name string) (catalog.Config, bool)
	List() []catalog.Config
	StockPeers(cfg catalog.Config) []string
	Put(ctx context.Context, cfg catalog.Config) (bool, error)
	Update(ctx context.Context, name string, change func(*catalog.Config) bool) (before, after catalog.Config, err error)
	Delete(ctx context.Context, name string, at time.Time, may func(catalog.Config) error) (catalog.Config, error)
}

// api holds the gateway's dependencies; its methods are the handlers.
type api struct {
	log         *slog.Logger
	queues      queueCatalog
	line        *waitqueue.Store
	events      publisher
	tickets     *ticket.Signer
	keys        *token.Keyring
	orders      orderRecords
	stock       stockSetter
	sales       salesReader // nil: no sold figures
	adminToken  []byte
	users       userauth.Auth      // nil: X-User-Id from anyone
	limiter     *ratelimit.Limiter // nil: no rate limits
	limits      *throttle.Limits
	ips         httpapi.ClientIPs
	http        httpapi.Limits
	notifierURL string
	// epoch is the entries stream's identity (see bus.Identities): tickets
	// and token ids carry it.
	epoch func() string
	// orderHold is how long a requested order holds its admission slot:
	// the order's deadline and a margin for its last payment try.
	orderHold time.Duration
	pageCSS   string     // a shop's stylesheet for the waiting-room page
	pageLangs *pageLangs // the page's languages (pagelang.go); nil: the shipped ones
	now       func() time.Time
	earliest  func() time.Time // the earliest Redis's time can be now (clock.Synced.Earliest)
	ready     func(context.Context) error

	randMu sync.Mutex
	rand   *rand.Rand

	metrics *metrics
	ops     opsDeps // the ops dashboard's extra reads
	// challenges issues the door's challenges; nil: a random secret.
	challenges *pow.Issuer
	door       *door.Door // proof of work at the door
	lineapi    *lineapi.API

	// adminApart puts the admin API and the dashboard on their own app,
	// admin, served on USHER_ADMIN_ADDR (see adminlistener.go).
	adminApart bool
	admin      *fiber.App
}

// app builds the fiber application with every route.
func (a *api) app() *fiber.App {
	if a.metrics == nil {
		a.metrics = newMetrics()
	}
	if a.users == nil {
		a.users = userauth.Header(httpapi.ClientIPs{})
	}
	var lim interface {
		Allow(context.Context, time.Time, ...ratelimit.Check) (ratelimit.Decision, error)
	}
	if a.limiter != nil {
		lim = a.limiter
	}
	a.limits = throttle.New(lim, a.ips, a.now, a.metrics.limited)
	a.opsDefaults()
	if a.challenges == nil {
		a.challenges = door.RandomIssuer()
	}
	places := lineapi.NewPlaces(a.keys, a.notifierURL, a.now, a.jitter)
	a.door = door.New(door.Deps{Issuer: a.challenges, Line: a.line, Queues: a.queues, Places: places, IPs: a.ips,
		Now: a.now, Epoch: a.epoch, Log: a.log, Metrics: a.metrics.pow})
	a.lineapi = lineapi.New(lineapi.Deps{Line: a.line, Queues: a.queues, Events: a.events, Tickets: a.tickets,
		Places: places, Door: a.door, Users: a.users, Limits: a.limits, Now: a.now, Earliest: a.earliest,
		Epoch: a.epoch, Log: a.log, Metrics: a.metrics.line})
	app := a.newFiber("usher-gateway")

	app.Get("/healthz", httpapi.Healthz)
	app.Get("/readyz", httpapi.Readyz(a.ready))
	app.Get("/metrics", a.metrics.handler())
	app.Get("/.well-known/jwks.json", a.jwks)
	app.Get("/openapi.json", a.openAPI)
	app.Get("/q/:queue", a.page)
	app.Post("/q/:queue", a.pageForm) // the page without JavaScript (pageform.go)
	app.Get("/q/static/:file", a.asset)
	// The admin API and the dashboard: on this app, or on their own.
	adm := a.adminRouter(app)
	adm.Get("/ops", a.opsPage)
	adm.Get("/ops/static/:file", a.opsAsset)

	v1 := app.Group("/v1")
	v1.Get("/queues/:queue", a.lineapi.PublicQueue)
	v1.Get("/queues/:queue/challenge", a.door.Challenge)
	v1.Post("/queues/:queue/tickets", a.lineapi.Join)
	v1.Get("/queues/:queue/tickets/:ticket", a.door.ShadowTicket, a.lineapi.Poll)
	v1.Delete("/queues/:queue/tickets/:ticket", a.door.ShadowTicket, a.lineapi.Leave)
	v1.Post("/orders", a.placeOrder)
	v1.Get("/orders/:id", a.getOrder)

	admin := adm.Group("/v1/admin", a.requireAdmin, a.requireAdminUser)
	admin.Get("/queues", a.listQueues)
	admin.Put("/queues/:queue", a.putQueue)
	admin.Get("/queues/:queue", a.getQueue)
	admin.Delete("/queues/:queue", a.deleteQueue)
	admin.Post("/queues/:queue/invites", a.createInvites)
	admin.Put("/queues/:queue/notice", a.putNotice)
	admin.Delete("/queues/:queue/notice", a.deleteNotice)
	admin.Put("/stock/:sku", a.putStock)
	admin.Get("/ops", a.opsSnapshotJSON)
	admin.Get("/ops/stream", a.opsStream)

	app.Use(httpapi.NotFound(app))
	if a.admin != nil {
		a.admin.Use(httpapi.NotFound(a.admin))
	}
	return app
}

// requireAdmin lets a request through only with the admin bearer token,
// compared in constant time.
func (a *api) requireAdmin(c *fiber.Ctx) error {
	got, ok := httpapi.BearerCredentials(c.Get(fiber.HeaderAuthorization))
	if !ok || subtle.ConstantTimeCompare([]byte(got), a.adminToken) != 1 {
		c.Set(fiber.HeaderWWWAuthenticate, `Bearer realm="usher-admin"`)
		return problem.New(fiber.StatusUnauthorized, "unauthorized", "admin endpoints need Authorization: Bearer <USHER_ADMIN_TOKEN>")
	}
	return c.Next()
}

func (a *api) jwks(c *fiber.Ctx) error {
	c.Set(fiber.HeaderContentType, "application/jwk-set+json")
	c.Set(fiber.HeaderCacheControl, "public, max-age=300")
	return c.Send(a.keys.JWKS())
}

func (a *api) jitter() float64 {
	a.randMu.Lock()
	defer a.randMu.Unlock()
	return a.rand.Float64()
}

// newFiber is a fiber app of the gateway's, the public one or the admin
// listener's (httpapi.NewApp).
func (a *api) newFiber(name string) *fiber.App {
	return httpapi.NewApp(name, a.http, a.log, a.metrics.http.Measure)
}

// user is the shopper's id, by the gateway's user authentication; every
// handler that needs it (joins, orders) asks here.
func (a *api) user(c *fiber.Ctx) (string, error) {
	return a.users.Identify(c)
}
