// Package admin is the gateway's admin API (/v1/admin/…: queues, their
// notices, invites and stock) and the ops dashboard (/ops), both behind
// the admin bearer token. Every change of a queue's configuration is
// audited on the ops stream.
package admin

import (
	"context"
	"crypto/subtle"
	"log/slog"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/nats-io/nats.go/jetstream"

	"usher/gateway/httpapi"
	"usher/internal/catalog"
	"usher/internal/problem"
	"usher/internal/waitqueue"
)

// Queues is the part of the catalog the admin API uses.
type Queues interface {
	Get(name string) (catalog.Config, bool)
	List() []catalog.Config
	Put(ctx context.Context, cfg catalog.Config) (bool, error)
	Update(ctx context.Context, name string, change func(*catalog.Config) bool) (before, after catalog.Config, err error)
	Delete(ctx context.Context, name string, at time.Time, may func(catalog.Config) error) (catalog.Config, error)
}

// Line is the part of the line (Redis) the admin API uses.
type Line interface {
	Stats(ctx context.Context, q string) (waitqueue.Stats, error)
	Closing(ctx context.Context, q string) (waitqueue.Closing, error)
	AddInvites(ctx context.Context, q string, codes []string, now, expiresAt time.Time) error
	SetStock(ctx context.Context, q string, only bool, levels ...waitqueue.StockLevel) error
}

// Publisher is the part of JetStream the admin API publishes on: audit
// records and lottery seeds.
type Publisher interface {
	Publish(ctx context.Context, subj string, data []byte, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error)
}

// Deps are what the admin API is built from.
type Deps struct {
	Queues Queues
	Line   Line
	Events Publisher
	Stock  Stock
	Sales  Sales  // nil: no sold figures
	Limits Limits // nil: adaptive queues show no limit
	// Token is the admin bearer token (USHER_ADMIN_TOKEN).
	Token []byte
	Now   func() time.Time
	Log   *slog.Logger
}

// API serves the admin API. It is safe for concurrent use.
type API struct {
	queues Queues
	line   Line
	events Publisher
	stock  Stock
	sales  Sales
	limits Limits
	token  []byte
	now    func() time.Time
	log    *slog.Logger
}

// New returns the admin API of deps.
func New(deps Deps) *API {
	return &API{queues: deps.Queues, line: deps.Line, events: deps.Events, stock: deps.Stock, sales: deps.Sales,
		limits: deps.Limits, token: deps.Token, now: deps.Now, log: deps.Log}
}

// RequireAdmin lets a request through only with the admin bearer token,
// compared in constant time.
func (a *API) RequireAdmin(c *fiber.Ctx) error {
	got, ok := httpapi.BearerCredentials(c.Get(fiber.HeaderAuthorization))
	if !ok || subtle.ConstantTimeCompare([]byte(got), a.token) != 1 {
		c.Set(fiber.HeaderWWWAuthenticate, `Bearer realm="usher-admin"`)
		return problem.New(fiber.StatusUnauthorized, "unauthorized", "admin endpoints need Authorization: Bearer <USHER_ADMIN_TOKEN>")
	}
	return c.Next()
}
