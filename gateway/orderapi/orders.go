// Package orderapi is the orders' front: a shopper admitted from the line
// orders with the entry token it was given (POST /v1/orders) and reads the
// order's status (GET /v1/orders/{id}). It answers from Redis and
// JetStream only; the order worker takes it from there.
package orderapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/nats-io/nats.go/jetstream"

	"usher/gateway/httpapi"
	"usher/internal/catalog"
	"usher/internal/event"
	"usher/internal/orders"
	"usher/internal/problem"
	"usher/internal/token"
	"usher/internal/waitqueue"
)

// Line is the part of the line (Redis) the orders' front uses: it claims
// an entry token for its order.
type Line interface {
	Claim(ctx context.Context, q string, seq uint64, o waitqueue.Order, hold time.Duration) (waitqueue.Claim, error)
}

// Records is the part of the Redis order records the orders' front uses.
type Records interface {
	Create(ctx context.Context, rec orders.Record) (orders.Outcome, orders.Record, error)
	Get(ctx context.Context, id string) (orders.Record, bool, error)
}

// Keys verifies entry tokens.
type Keys interface {
	Verify(s string, now time.Time) (token.Claims, error)
	VerifyExpired(s string, now time.Time) (token.Claims, error)
}

// Queues finds a queue's configuration: the catalog.
type Queues interface {
	Get(name string) (catalog.Config, bool)
}

// Publisher is the part of JetStream the orders' front publishes on.
type Publisher interface {
	Publish(ctx context.Context, subj string, data []byte, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error)
}

// Users tells who the shopper is (package userauth).
type Users interface {
	Identify(c *fiber.Ctx) (string, error)
}

// Limits are the rate limits of an order (package throttle).
type Limits interface {
	Order(c *fiber.Ctx, cfg catalog.Config, user string) error
}

// Deps are what the orders' front is built from.
type Deps struct {
	Line    Line
	Records Records
	Keys    Keys
	Queues  Queues
	Events  Publisher
	Users   Users
	Limits  Limits
	Now     func() time.Time
	// Epoch is the entries stream's identity: a token of a line reset
	// since orders nothing.
	Epoch func() string
	// Hold is how long a requested order holds its admission slot: the
	// order's deadline and a margin for its last payment try.
	Hold time.Duration
	Log  *slog.Logger
}

// API serves the orders' front. It is safe for concurrent use.
type API struct {
	line    Line
	records Records
	keys    Keys
	queues  Queues
	events  Publisher
	users   Users
	limits  Limits
	now     func() time.Time
	epoch   func() string
	hold    time.Duration
	log     *slog.Logger
}

// New returns the orders' front of deps.
func New(deps Deps) *API {
	return &API{line: deps.Line, records: deps.Records, keys: deps.Keys, queues: deps.Queues, events: deps.Events,
		users: deps.Users, limits: deps.Limits, now: deps.Now, epoch: deps.Epoch, hold: deps.Hold, log: deps.Log}
}

// Body is the body of POST /v1/orders.
type Body struct {
	SKU      string `json:"sku"`
	Quantity *int   `json:"quantity"`
}

// maxOrderQuantity bounds any order, whatever a queue allows.
const maxOrderQuantity = 1000

// parseOrderBody reads an order body: malformed JSON, unknown fields and
// trailing data are a 400; a missing quantity means 1. Whether the SKU and
// quantity suit the queue is checked by the caller (422).
func parseOrderBody(b []byte) (sku string, quantity int, err error) {
	var body Body
	if err := httpapi.DecodeBody(b, &body); err != nil {
		return "", 0, problem.New(fiber.StatusBadRequest, "invalid-body", `the body must be {"sku": "...", "quantity": n}: `+err.Error())
	}
	quantity = 1
	if body.Quantity != nil {
		quantity = *body.Quantity
	}
	var params []problem.Param
	if !catalog.ValidSKU(body.SKU) {
		params = append(params, problem.Param{Name: "sku", Reason: "must be 1-64 of A-Z a-z 0-9 . _ -"})
	}
	if quantity < 1 || quantity > maxOrderQuantity {
		params = append(params, problem.Param{Name: "quantity", Reason: "must be 1.." + strconv.Itoa(maxOrderQuantity)})
	}
	if len(params) > 0 {
		p := problem.New(fiber.StatusBadRequest, "invalid-body", strconv.Itoa(len(params))+" invalid field(s)")
		p.InvalidParams = params
		return "", 0, p
	}
	return body.SKU, quantity, nil
}

// View is the body of order answers.
type View struct {
	OrderID   string `json:"orderId"`
	Status    string `json:"status"`
	Reason    string `json:"reason,omitempty"`
	SKU       string `json:"sku"`
	Quantity  int    `json:"quantity"`
	PaymentID string `json:"paymentId,omitempty"`
}

func viewOfRecord(r orders.Record) View {
	return View{OrderID: r.ID, Status: string(r.Status), Reason: r.Reason, SKU: r.SKU, Quantity: r.Quantity, PaymentID: r.PaymentID}
}

// entryToken checks the bearer entry token: garbage, forged or expired →
// 401 (but an expired one that placed an order: see placedBy), before its
// nbf → 425, another user's → 403, a queue this usher does not know → 401.
func (a *API) entryToken(c *fiber.Ctx, user string) (token.Claims, catalog.Config, error) {
	raw, ok := httpapi.BearerCredentials(c.Get(fiber.HeaderAuthorization))
	if !ok {
		c.Set(fiber.HeaderWWWAuthenticate, `Bearer realm="usher-orders"`)
		return token.Claims{}, catalog.Config{}, problem.New(fiber.StatusUnauthorized, "invalid-token", "orders need Authorization: Bearer <entry token>")
	}
	claims, err := a.keys.Verify(raw, a.now())
	if errors.Is(err, token.ErrEarly) {
		// READY is decided on the line's clock by another process (a
		// notifier, a poll on another gateway); a shopper who orders on it
		// at once must not be turned away by this host's clock being a
		// moment behind. The claim that follows judges readyAt on Redis's
		// clock, with the same tolerance.
		claims, err = a.keys.Verify(raw, a.now().Add(readyTolerance))
	}
	switch {
	case errors.Is(err, token.ErrEarly):
		p := problem.New(fiber.StatusTooEarly, "token-not-ready", "the entry token is not valid yet; wait for READY")
		p.RetryAfter = 1
		return claims, catalog.Config{}, p
	case errors.Is(err, token.ErrExpired):
		claims, err = a.placedBy(c.UserContext(), raw, user)
		if err != nil {
			return claims, catalog.Config{}, err
		}
	case err != nil:
		return claims, catalog.Config{}, problem.New(fiber.StatusUnauthorized, "invalid-token", "the entry token is not one usher issued")
	}
	if claims.User != user {
		return claims, catalog.Config{}, problem.New(fiber.StatusForbidden, "token-not-yours", "the entry token was issued to another user")
	}
	cfg, ok := a.queues.Get(claims.Queue)
	q, epoch, _, idOK := waitqueue.ParseTokenID(claims.ID)
	if !ok || !idOK || q != claims.Queue {
		return claims, cfg, problem.New(fiber.StatusUnauthorized, "invalid-token", "the entry token names no queue usher knows")
	}
	if epoch != a.epoch() {
		return claims, cfg, problem.New(fiber.StatusUnauthorized, "invalid-token", "the entry token is for a line that has been reset")
	}
	return claims, cfg, nil
}

// placedBy reads an expired entry token that placed an order: a shopper
// whose answer was lost (a dropped connection, a tab closed on "Order")
// submits the token again, and is answered with the order it placed — 202
// while pending, 200 once final — however long after the token expired;
// the order id comes from the token alone. A token that placed nothing, or
// another user's, is a 401 token-expired as ever: an expired token orders
// nothing new.
func (a *API) placedBy(ctx context.Context, raw, user string) (token.Claims, error) {
	expired := problem.New(fiber.StatusUnauthorized, "token-expired", "the entry token has expired")
	claims, err := a.keys.VerifyExpired(raw, a.now())
	if err != nil || claims.User != user {
		return token.Claims{}, expired
	}
	if _, found, err := a.records.Get(ctx, orders.ID(claims.ID)); err != nil {
		return token.Claims{}, httpapi.LineDown(err)
	} else if !found {
		return token.Claims{}, expired
	}
	return claims, nil
}

// readyTolerance is how early an order may come by this host's clock: the
// claim script's tolerance on Redis's clock (internal/waitqueue claimScript).
const readyTolerance = 500 * time.Millisecond

// claim takes the token for the order at this moment, on the line's clock:
// the order is judged at its request, whatever backlog follows. It returns
// when the token was claimed (the order's request time).
func (a *API) claim(ctx context.Context, cfg catalog.Config, claims token.Claims, o waitqueue.Order) (time.Time, error) {
	q, _, seq, _ := waitqueue.ParseTokenID(claims.ID)
	o.TokenID, o.User = claims.ID, claims.User
	if len(cfg.Products()) > 0 {
		o.MaxPerUser = cfg.UserLimit()
	}
	cl, err := a.line.Claim(ctx, q, seq, o, a.hold)
	if err != nil {
		return time.Time{}, httpapi.Unavailable(err, "the order could not be recorded; retry with the same token")
	}
	switch cl.Outcome {
	case waitqueue.Redeemed:
		return cl.At, nil
	case waitqueue.RedeemEarly:
		p := problem.New(fiber.StatusTooEarly, "token-not-ready", "the entry token is not valid yet; wait for READY")
		p.RetryAfter = 1
		return cl.At, p
	case waitqueue.RedeemExpired:
		return cl.At, problem.New(fiber.StatusUnauthorized, "token-expired", "the entry token has expired")
	case waitqueue.RedeemLeft:
		return cl.At, problem.New(fiber.StatusConflict, "token-left", "the shopper left the line with this token; it can no longer order")
	case waitqueue.RedeemConflict:
		return cl.At, problem.New(fiber.StatusConflict, "order-conflict", "this entry token was already used for another order")
	case waitqueue.RedeemLimit:
		return cl.At, problem.New(fiber.StatusForbidden, "already-purchased",
			"this order would take the user past "+strconv.Itoa(cfg.UserLimit())+" unit(s) in this queue, the most one user may buy")
	default:
		// Valid signature, but the line holds no admission for it: Redis
		// lost it and is healing from the streams (seconds), or the token
		// was minted outside the line. Either way: not now.
		a.log.Warn("order with a token the line does not hold", "queue", q, "seq", seq)
		return cl.At, problem.Problem{Type: "https://usher.dev/problems/token-unconfirmed", Title: "Service Unavailable",
			Status: fiber.StatusServiceUnavailable, Detail: "the admission of this token cannot be confirmed right now; retry in a moment", RetryAfter: 1}
	}
}

// PlaceOrder takes an order for the shopper's entry token. It answers from
// Redis and JetStream only: 202 for a new (or still pending) order, 200
// with the outcome for a token already redeemed, 409 when the same token
// comes with another body.
func (a *API) PlaceOrder(c *fiber.Ctx) error {
	r, err := a.request(c)
	if err != nil {
		return err
	}
	ctx := c.UserContext()
	// The order this token placed, if any, is what a resubmit gets,
	// whatever the queue sells now: an operator may have changed its SKUs
	// or lowered maxQuantity since. A final one is answered as it stands,
	// long after its token's admission has left Redis.
	rec, placed, err := a.records.Get(ctx, r.id)
	if err != nil {
		return httpapi.LineDown(err)
	}
	switch {
	case placed && rec.Status.Final():
		if rec.Fingerprint != orders.Fingerprint(r.sku, r.quantity) || rec.Owner != r.user {
			return problem.New(fiber.StatusConflict, "order-conflict", "this entry token was already used for an order with another body")
		}
		return answerOrder(c, fiber.StatusOK, r.id, rec)
	case placed: // pending: the claim and the record below find it again
	default:
		if err := sells(r.cfg, r.sku, r.quantity); err != nil {
			return err
		}
	}
	requestedAt, err := a.claim(ctx, r.cfg, r.claims, waitqueue.Order{ID: r.id, SKU: r.sku, Quantity: r.quantity})
	if err != nil {
		return err
	}
	outcome, rec, err := a.records.Create(ctx, orders.Record{ID: r.id, Owner: r.user, Fingerprint: orders.Fingerprint(r.sku, r.quantity),
		Queue: r.cfg.Name, SKU: r.sku, Quantity: r.quantity})
	if err != nil {
		return httpapi.Unavailable(err, "the order could not be recorded; retry with the same token")
	}
	if outcome == orders.Conflict {
		return problem.New(fiber.StatusConflict, "order-conflict", "this entry token was already used for an order with another body")
	}
	if rec.Status == orders.Pending {
		// Published on every submit while pending: a publish that failed
		// before is retried this way, and the stream drops the repeats.
		if err := a.publishRequested(ctx, r, requestedAt); err != nil {
			return err
		}
	}
	status := fiber.StatusOK
	if outcome == orders.Created || rec.Status == orders.Pending {
		status = fiber.StatusAccepted
	}
	return answerOrder(c, status, r.id, rec)
}

// request is an order as its request states it: by whom, with which entry
// token in which queue, for what.
type request struct {
	id, user, sku string
	quantity      int
	claims        token.Claims
	cfg           catalog.Config
}

// request reads an order's request: the shopper, their entry token, the
// rate limits it is charged to, then its body.
func (a *API) request(c *fiber.Ctx) (request, error) {
	user, err := a.users.Identify(c)
	if err != nil {
		return request{}, err
	}
	claims, cfg, err := a.entryToken(c, user)
	if err != nil {
		return request{}, err
	}
	if err := a.limits.Order(c, cfg, user); err != nil {
		return request{}, err
	}
	sku, quantity, err := parseOrderBody(c.Body())
	if err != nil {
		return request{}, err
	}
	return request{id: orders.ID(claims.ID), user: user, sku: sku, quantity: quantity, claims: claims, cfg: cfg}, nil
}

// sells refuses an order queue cfg does not sell (422).
func sells(cfg catalog.Config, sku string, quantity int) error {
	switch {
	case len(cfg.Products()) == 0:
		// A queue with neither sku nor skus sells nothing here: the shop's
		// own checkout takes its entry token (checked with the JWKS).
		return problem.New(fiber.StatusUnprocessableEntity, "no-products",
			"this queue sells nothing through usher's orders: its entry token is for the shop's own checkout")
	case !cfg.Sells(sku):
		return problem.New(fiber.StatusUnprocessableEntity, "wrong-sku", "this entry token orders "+strings.Join(cfg.Products(), ", ")+" only")
	case quantity > cfg.OrderLimit():
		return problem.New(fiber.StatusUnprocessableEntity, "too-many", "an order in this queue takes at most "+strconv.Itoa(cfg.OrderLimit())+" unit(s)")
	}
	return nil
}

// publishRequested records order r, requested at requestedAt, on the
// orders stream, for the order worker.
func (a *API) publishRequested(ctx context.Context, r request, requestedAt time.Time) error {
	body, err := event.Marshal(r.id, event.TypeOrderRequested, r.user, requestedAt, event.OrderRequested{
		OrderID: r.id, TokenID: r.claims.ID, Queue: r.cfg.Name, User: r.user, SKU: r.sku, Quantity: r.quantity,
		TokenExpiresAt: r.claims.ExpiresAt.UTC(), TokenReadyAt: r.claims.ReadyAt.UTC(), RequestedAt: requestedAt.UTC(),
	})
	if err != nil {
		return err
	}
	if _, err := a.events.Publish(ctx, event.OrderRequestedSubject(r.cfg.Name), body, jetstream.WithMsgID(r.id)); err != nil {
		return httpapi.Unavailable(fmt.Errorf("publish order %s: %w", r.id, err), "the order could not be recorded; retry with the same token")
	}
	return nil
}

// answerOrder answers with order id, as rec records it.
func answerOrder(c *fiber.Ctx, status int, id string, rec orders.Record) error {
	c.Set(fiber.HeaderLocation, "/v1/orders/"+id)
	c.Set(fiber.HeaderCacheControl, "no-store")
	return c.Status(status).JSON(viewOfRecord(rec))
}

// GetOrder answers an order's status to its owner; to anyone else the
// order does not exist.
func (a *API) GetOrder(c *fiber.Ctx) error {
	user, err := a.users.Identify(c)
	if err != nil {
		return err
	}
	id := httpapi.PathParam(c, "id")
	notFound := problem.New(fiber.StatusNotFound, "order-not-found", "no such order")
	if !orders.ValidID(id) {
		return notFound
	}
	rec, found, err := a.records.Get(c.UserContext(), id)
	if err != nil {
		return httpapi.LineDown(err)
	}
	if !found || rec.Owner != user {
		return notFound
	}
	c.Set(fiber.HeaderCacheControl, "no-store")
	return c.JSON(viewOfRecord(rec))
}
