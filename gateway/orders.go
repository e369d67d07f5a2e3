package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
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

// orderRecords is the part of the Redis order records the gateway uses.
type orderRecords interface {
	Create(ctx context.Context, rec orders.Record) (orders.Outcome, orders.Record, error)
	Get(ctx context.Context, id string) (orders.Record, bool, error)
}

// salesReader reads what a queue sold, per SKU (admin only; PostgreSQL).
type salesReader interface {
	Sold(ctx context.Context, q string) (map[string]int64, error)
}

// stockSetter sets a SKU's available stock (admin only; PostgreSQL).
type stockSetter interface {
	SetStock(ctx context.Context, sku string, available int64) (orders.Stock, error)
}

// orderBody is the body of POST /v1/orders.
type orderBody struct {
	SKU      string `json:"sku"`
	Quantity *int   `json:"quantity"`
}

// maxOrderQuantity bounds any order, whatever a queue allows.
const maxOrderQuantity = 1000

// parseOrderBody reads an order body: malformed JSON, unknown fields and
// trailing data are a 400; a missing quantity means 1. Whether the SKU and
// quantity suit the queue is checked by the caller (422).
func parseOrderBody(b []byte) (sku string, quantity int, err error) {
	var body orderBody
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

// orderView is the body of order answers.
type orderView struct {
	OrderID   string `json:"orderId"`
	Status    string `json:"status"`
	Reason    string `json:"reason,omitempty"`
	SKU       string `json:"sku"`
	Quantity  int    `json:"quantity"`
	PaymentID string `json:"paymentId,omitempty"`
}

func viewOfRecord(r orders.Record) orderView {
	return orderView{OrderID: r.ID, Status: string(r.Status), Reason: r.Reason, SKU: r.SKU, Quantity: r.Quantity, PaymentID: r.PaymentID}
}

// entryToken checks the bearer entry token: garbage, forged or expired →
// 401 (but an expired one that placed an order: see placedBy), before its
// nbf → 425, another user's → 403, a queue this usher does not know → 401.
func (a *api) entryToken(c *fiber.Ctx, user string) (token.Claims, catalog.Config, error) {
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
func (a *api) placedBy(ctx context.Context, raw, user string) (token.Claims, error) {
	expired := problem.New(fiber.StatusUnauthorized, "token-expired", "the entry token has expired")
	claims, err := a.keys.VerifyExpired(raw, a.now())
	if err != nil || claims.User != user {
		return token.Claims{}, expired
	}
	if _, found, err := a.orders.Get(ctx, orders.ID(claims.ID)); err != nil {
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
func (a *api) claim(ctx context.Context, cfg catalog.Config, claims token.Claims, o waitqueue.Order) (time.Time, error) {
	q, _, seq, _ := waitqueue.ParseTokenID(claims.ID)
	o.TokenID, o.User = claims.ID, claims.User
	if len(cfg.Products()) > 0 {
		o.MaxPerUser = cfg.UserLimit()
	}
	cl, err := a.line.Claim(ctx, q, seq, o, a.orderHold)
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

// placeOrder takes an order for the shopper's entry token. It answers from
// Redis and JetStream only: 202 for a new (or still pending) order, 200
// with the outcome for a token already redeemed, 409 when the same token
// comes with another body.
func (a *api) placeOrder(c *fiber.Ctx) error {
	user, err := a.user(c)
	if err != nil {
		return err
	}
	claims, cfg, err := a.entryToken(c, user)
	if err != nil {
		return err
	}
	if err := a.limits.Order(c, cfg, user); err != nil {
		return err
	}
	sku, quantity, err := parseOrderBody(c.Body())
	if err != nil {
		return err
	}
	id := orders.ID(claims.ID)
	ctx := c.UserContext()
	// The order this token placed, if any, is what a resubmit gets,
	// whatever the queue sells now: an operator may have changed its SKUs
	// or lowered maxQuantity since. A final one is answered as it stands,
	// long after its token's admission has left Redis.
	rec, placed, err := a.orders.Get(ctx, id)
	if err != nil {
		return httpapi.LineDown(err)
	}
	switch {
	case placed && rec.Status.Final():
		if rec.Fingerprint != orders.Fingerprint(sku, quantity) || rec.Owner != user {
			return problem.New(fiber.StatusConflict, "order-conflict", "this entry token was already used for an order with another body")
		}
		c.Set(fiber.HeaderLocation, "/v1/orders/"+id)
		c.Set(fiber.HeaderCacheControl, "no-store")
		return c.Status(fiber.StatusOK).JSON(viewOfRecord(rec))
	case placed: // pending: the claim and the record below find it again
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
	requestedAt, err := a.claim(ctx, cfg, claims, waitqueue.Order{ID: id, SKU: sku, Quantity: quantity})
	if err != nil {
		return err
	}
	outcome, rec, err := a.orders.Create(ctx, orders.Record{ID: id, Owner: user, Fingerprint: orders.Fingerprint(sku, quantity),
		Queue: cfg.Name, SKU: sku, Quantity: quantity})
	if err != nil {
		return httpapi.Unavailable(err, "the order could not be recorded; retry with the same token")
	}
	if outcome == orders.Conflict {
		return problem.New(fiber.StatusConflict, "order-conflict", "this entry token was already used for an order with another body")
	}
	if rec.Status == orders.Pending {
		// Published on every submit while pending: a publish that failed
		// before is retried this way, and the stream drops the repeats.
		body, err := event.Marshal(id, event.TypeOrderRequested, user, requestedAt, event.OrderRequested{
			OrderID: id, TokenID: claims.ID, Queue: cfg.Name, User: user, SKU: sku, Quantity: quantity,
			TokenExpiresAt: claims.ExpiresAt.UTC(), TokenReadyAt: claims.ReadyAt.UTC(), RequestedAt: requestedAt.UTC(),
		})
		if err != nil {
			return err
		}
		if _, err := a.events.Publish(ctx, event.OrderRequestedSubject(cfg.Name), body, jetstream.WithMsgID(id)); err != nil {
			return httpapi.Unavailable(fmt.Errorf("publish order %s: %w", id, err), "the order could not be recorded; retry with the same token")
		}
	}
	status := fiber.StatusOK
	if outcome == orders.Created || rec.Status == orders.Pending {
		status = fiber.StatusAccepted
	}
	c.Set(fiber.HeaderLocation, "/v1/orders/"+id)
	c.Set(fiber.HeaderCacheControl, "no-store")
	return c.Status(status).JSON(viewOfRecord(rec))
}

// getOrder answers an order's status to its owner; to anyone else the
// order does not exist.
func (a *api) getOrder(c *fiber.Ctx) error {
	user, err := a.user(c)
	if err != nil {
		return err
	}
	id := httpapi.PathParam(c, "id")
	notFound := problem.New(fiber.StatusNotFound, "order-not-found", "no such order")
	if !orders.ValidID(id) {
		return notFound
	}
	rec, found, err := a.orders.Get(c.UserContext(), id)
	if err != nil {
		return httpapi.LineDown(err)
	}
	if !found || rec.Owner != user {
		return notFound
	}
	c.Set(fiber.HeaderCacheControl, "no-store")
	return c.JSON(viewOfRecord(rec))
}

// putStock sets a SKU's available units.
func (a *api) putStock(c *fiber.Ctx) error {
	sku := string([]byte(httpapi.PathParam(c, "sku")))
	if !catalog.ValidSKU(sku) {
		return problem.New(fiber.StatusBadRequest, "invalid-sku", "SKUs are 1-64 of A-Z a-z 0-9 . _ -")
	}
	var body struct {
		Available *int64 `json:"available"`
	}
	if err := httpapi.DecodeBody(c.Body(), &body); err != nil || body.Available == nil || *body.Available < 0 || *body.Available > 1e12 {
		return problem.New(fiber.StatusBadRequest, "invalid-body", `the body must be {"available": n} with 0 <= n <= 10^12`)
	}
	ctx := c.UserContext()
	st, err := a.stock.SetStock(ctx, sku, *body.Available)
	if err != nil {
		return httpapi.Unavailable(fmt.Errorf("set stock %s: %w", sku, err), "the stock could not be stored; retry")
	}
	reopened := a.restocked(ctx, c.Get("X-Admin-User", "admin"), st)
	return c.JSON(fiber.Map{"sku": sku, "available": st.Available, "reopened": reopened})
}

// restocked tells every queue that sells the SKU its new stock at once (the
// admitters would read it within a second anyway) and reopens those that
// closed because it had sold out: their line is as they left it, the
// shoppers who waited are admitted first. It returns the queues reopened
// (by it, or by an admitter that saw the units first).
func (a *api) restocked(ctx context.Context, by string, st orders.Stock) []string {
	reopened := []string{}
	for _, cfg := range a.queues.List() {
		if !cfg.Sells(st.SKU) {
			continue
		}
		if err := a.line.SetStock(ctx, cfg.Name, false, waitqueue.StockLevel{SKU: st.SKU, Available: st.Available, Version: st.Version}); err != nil {
			a.log.Warn("stock not mirrored to the line; the admitter will", "queue", cfg.Name, "sku", st.SKU, "err", err)
		}
		if st.Available <= 0 || cfg.State != catalog.StateClosed || cfg.ClosedReason != catalog.ReasonSoldOut {
			continue
		}
		openMeanwhile := false
		prev, now, err := a.queues.Update(ctx, cfg.Name, func(c *catalog.Config) bool {
			if c.State != catalog.StateClosed || c.ClosedReason != catalog.ReasonSoldOut {
				// Changed meanwhile: theirs stands. Open already is this
				// restock's doing too when an admitter's tick saw the units
				// mirrored above first (it reopens a sold-out queue whose
				// stock came back, and records it itself).
				openMeanwhile = c.State == catalog.StateOpen
				return false
			}
			c.State, c.ClosedReason = catalog.StateOpen, ""
			return true
		})
		if err != nil {
			switch {
			case errors.Is(err, catalog.ErrUnchanged) && openMeanwhile:
				reopened = append(reopened, cfg.Name)
			case !errors.Is(err, catalog.ErrUnchanged):
				a.log.Error("reopen after restock", "queue", cfg.Name, "err", err)
			}
			continue
		}
		a.audit(ctx, by+" (restock of "+st.SKU+")", prev, now)
		a.log.Info("queue reopened: its SKU is back in stock", "queue", cfg.Name, "sku", st.SKU, "available", st.Available)
		reopened = append(reopened, cfg.Name)
	}
	return reopened
}

// migratedStock sets stock on a store whose schema it brings up to date
// first (once, retried until it succeeds): the gateway may be the first
// service to touch a fresh database.
type migratedStock struct {
	store *orders.Store
	mu    sync.Mutex
	done  bool
}

func (m *migratedStock) SetStock(ctx context.Context, sku string, available int64) (orders.Stock, error) {
	m.mu.Lock()
	if !m.done {
		if err := m.store.Migrate(ctx); err != nil {
			m.mu.Unlock()
			return orders.Stock{}, err
		}
		m.done = true
	}
	m.mu.Unlock()
	return m.store.SetStock(ctx, sku, available)
}
