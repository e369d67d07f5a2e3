package main

import (
	"context"
	"crypto/subtle"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/valyala/fasthttp"

	"usher/internal/catalog"
	"usher/internal/problem"
	"usher/internal/ratelimit"
	"usher/internal/ticket"
	"usher/internal/token"
	"usher/internal/waitqueue/roles"
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
	line        *roles.All
	events      publisher
	tickets     *ticket.Signer
	keys        *token.Keyring
	orders      orderRecords
	stock       stockSetter
	sales       salesReader // nil: no sold figures
	adminToken  []byte
	users       userAuth           // nil: X-User-Id
	limiter     *ratelimit.Limiter // nil: no rate limits
	ips         clientIPs
	http        httpLimits
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
	door    *door   // proof of work at the door (challenge.go); nil: a random secret

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
	a.opsDefaults()
	a.doorDefaults()
	app := a.newFiber("usher-gateway")

	app.Get("/healthz", func(c *fiber.Ctx) error { return c.SendString("ok\n") })
	app.Get("/readyz", func(c *fiber.Ctx) error {
		ctx, cancel := context.WithTimeout(c.UserContext(), time.Second)
		defer cancel()
		if err := a.ready(ctx); err != nil {
			return problem.New(fiber.StatusServiceUnavailable, "not-ready", err.Error())
		}
		return c.SendString("ready\n")
	})
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
	v1.Get("/queues/:queue", a.getPublicQueue)
	v1.Get("/queues/:queue/challenge", a.challenge)
	v1.Post("/queues/:queue/tickets", a.join)
	v1.Get("/queues/:queue/tickets/:ticket", a.shadowTicket, a.poll)
	v1.Delete("/queues/:queue/tickets/:ticket", a.shadowTicket, a.leave)
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

	app.Use(notFound(app))
	if a.admin != nil {
		a.admin.Use(notFound(a.admin))
	}
	return app
}

// notFound answers a request no route took: 405 with Allow when its path
// is a resource of app under other methods (RFC 9110 §15.5.6), else 404.
func notFound(app *fiber.App) fiber.Handler {
	return func(c *fiber.Ctx) error {
		if allow := allowed(app, c.Path()); allow != "" {
			c.Set(fiber.HeaderAllow, allow)
			return problem.New(fiber.StatusMethodNotAllowed, "method-not-allowed",
				c.Method()+" is not a method of "+c.Path()+"; it allows "+allow)
		}
		return problem.New(fiber.StatusNotFound, "not-found", "no such resource")
	}
}

// routeUnknownMethods answers a request whose method app's router does not
// know at all — fiber would answer it a plain-text 400 before any route or
// the error handler saw it — as notFound answers a method a path does not
// take: 405 with Allow, or 404, a problem either way.
func (a *api) routeUnknownMethods(app *fiber.App) {
	srv := app.Server()
	route, known := srv.Handler, app.Config().RequestMethods
	srv.Handler = func(fctx *fasthttp.RequestCtx) {
		for _, m := range known {
			if string(fctx.Method()) == m { // compared, not converted: no allocation per request
				route(fctx)
				return
			}
		}
		a.answerOutsideRouter(app, fctx, notFound(app))
	}
}

// allowed lists the methods app's routes take at path, "" when none does.
func allowed(app *fiber.App, path string) string {
	var methods []string
	for _, r := range app.GetRoutes(true) {
		if routeMatches(r.Path, path) && !slices.Contains(methods, r.Method) {
			methods = append(methods, r.Method)
		}
	}
	slices.Sort(methods)
	return strings.Join(methods, ", ")
}

// routeMatches reports whether path is one of route's (fiber's spelling:
// ':name' is one segment, '*' the rest; case and a trailing slash count,
// as they do for the router: CaseSensitive, StrictRouting).
func routeMatches(route, path string) bool {
	rs := strings.Split(route, "/")
	ps := strings.Split(path, "/")
	for i, r := range rs {
		if r == "*" {
			return true
		}
		if i >= len(ps) || (ps[i] != r && (!strings.HasPrefix(r, ":") || ps[i] == "")) {
			return false
		}
	}
	return len(rs) == len(ps)
}

// writeError is the one place where errors become responses: a Problem is
// sent as it is, a fiber error keeps its status, a dependency that failed
// (unavailable) is logged with its cause and answered 503, anything else is
// logged and answered with a 500 that reveals nothing.
func (a *api) writeError(c *fiber.Ctx, err error) error {
	var p problem.Problem
	var fe *fiber.Error
	var un unavailableError
	switch {
	case errors.As(err, &un):
		a.log.Warn("request failed: dependency unavailable", "method", methodLabel(c.Method()), "route", c.Route().Path, "err", un.cause)
		p = un.p
	case errors.As(err, &p):
	case errors.As(err, &fe):
		p = problem.New(fe.Code, slugOf(fe.Code), fe.Message)
	default:
		a.log.Error("request failed", "method", c.Method(), "route", c.Route().Path, "err", err)
		p = problem.New(fiber.StatusInternalServerError, "internal", "the request could not be completed; it is safe to retry")
	}
	if p.Status < 500 {
		// The route template, never the path: paths carry tickets.
		a.log.Debug("client error", "method", methodLabel(c.Method()), "route", c.Route().Path, "status", p.Status, "type", p.Type)
	}
	if p.RetryAfter > 0 {
		c.Set(fiber.HeaderRetryAfter, strconv.Itoa(p.RetryAfter))
	}
	c.Set(fiber.HeaderCacheControl, "no-store")
	c.Set(fiber.HeaderContentType, problem.ContentType)
	return c.Status(p.Status).Send(p.JSON())
}

// statusOf is the status writeError answers err with.
func statusOf(err error) int {
	var p problem.Problem
	var fe *fiber.Error
	var un unavailableError
	switch {
	case errors.As(err, &un):
		return un.p.Status
	case errors.As(err, &p):
		return p.Status
	case errors.As(err, &fe):
		return fe.Code
	}
	return fiber.StatusInternalServerError
}

func slugOf(status int) string {
	if t := http.StatusText(status); t != "" {
		return strings.ReplaceAll(strings.ToLower(t), " ", "-")
	}
	return "error"
}

// requireAdmin lets a request through only with the admin bearer token,
// compared in constant time.
func (a *api) requireAdmin(c *fiber.Ctx) error {
	got, ok := bearerCredentials(c.Get(fiber.HeaderAuthorization))
	if !ok || subtle.ConstantTimeCompare([]byte(got), a.adminToken) != 1 {
		c.Set(fiber.HeaderWWWAuthenticate, `Bearer realm="usher-admin"`)
		return problem.New(fiber.StatusUnauthorized, "unauthorized", "admin endpoints need Authorization: Bearer <USHER_ADMIN_TOKEN>")
	}
	return c.Next()
}

// bearerCredentials is the token of an Authorization value in the Bearer
// scheme: the scheme's name in any case (RFC 9110 §11.1), then one or more
// spaces. ok is false for another scheme or no token.
func bearerCredentials(v string) (tok string, ok bool) {
	scheme, tok, _ := strings.Cut(v, " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimLeft(tok, " ")
	return tok, tok != ""
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
// listener's: limits against oversized and slow clients, errors as
// problems, every request measured.
func (a *api) newFiber(name string) *fiber.App {
	lim := a.http.orDefault()
	app := fiber.New(fiber.Config{
		AppName:               name,
		DisableStartupMessage: true,
		BodyLimit:             lim.body,
		ReadBufferSize:        lim.header,
		ReadTimeout:           lim.read,
		WriteTimeout:          lim.write,
		IdleTimeout:           lim.idle,
		ErrorHandler:          a.writeError,
		// A path is the document's, exactly: /V1/QUEUES/q and
		// /v1/queues/q/ are no resource (404), not another spelling.
		CaseSensitive: true,
		StrictRouting: true,
		// A body is read as JSON whatever its Content-Type says (the API
		// document): fasthttp must not parse one labelled
		// multipart/form-data as a form while reading the request, which
		// refused a JSON order so labelled as unparseable (400) before any
		// handler saw it. The page's form reads its fields when it asks.
		DisablePreParseMultipartForm: true,
	})
	app.Server().ErrorHandler = a.answerUnreadable(app)
	a.routeUnknownMethods(app)
	app.Use(a.metrics.middleware)
	return app
}
