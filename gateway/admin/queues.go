package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"
	"github.com/nats-io/nats.go/jetstream"

	"usher/gateway/httpapi"
	"usher/internal/catalog"
	"usher/internal/event"
	"usher/internal/problem"
	"usher/internal/waitqueue"
)

// queueView is a queue's configuration with its live figures.
type queueView struct {
	catalog.Config
	Waiting         int64   `json:"waiting"`
	Active          int64   `json:"active"`
	AdmittedTotal   int64   `json:"admittedTotal"`
	AdmitRatePerSec float64 `json:"admitRatePerSec"`
	// Stock is set for a stock-aware queue.
	Stock *stockView `json:"stock,omitempty"`
	// PreQueue is how many wait in a scheduled drop's pre-queue.
	PreQueue int64 `json:"preQueue"`
	// LastTickAt is when an admitter last ticked the queue (absent: never);
	// an old one means no admitter is working on it.
	LastTickAt *time.Time `json:"lastTickAt,omitempty"`
	// AdaptiveLimit is set for an adaptive queue: the targetActive its
	// ticks use now, and why.
	AdaptiveLimit *AdaptiveView `json:"adaptiveLimit,omitempty"`
}

// stockView is a stock-aware queue's stock, as its last tick saw it.
type stockView struct {
	State    string `json:"state"`    // available | held | sold_out | unknown
	Sellable int64  `json:"sellable"` // units that could go to the next in line
	// HeldByAdmitted is the units held by admitted shoppers who have not
	// ordered yet (one each, of any SKU).
	HeldByAdmitted int64     `json:"heldByAdmitted"`
	SKUs           []skuView `json:"skus"`
}

// skuView is one SKU: available in the store, held by orders the store has
// not placed yet, pending (placed, not final), sold (PAID; nil, null in
// JSON, while PostgreSQL's figure cannot be read: unknown, never 0).
type skuView struct {
	SKU       string `json:"sku"`
	Available int64  `json:"available"`
	Held      int64  `json:"held"`
	Pending   int64  `json:"pending"`
	Sold      *int64 `json:"sold"`
}

// decodeQueueConfig reads a PUT body over the defaults: omitted fields take
// their default, unknown fields and trailing data are refused, and every
// invalid field is listed.
func decodeQueueConfig(name string, body []byte) (catalog.Config, error) {
	cfg := catalog.Defaults(name)
	if err := httpapi.DecodeBody(body, &cfg); err != nil {
		return cfg, problem.New(fiber.StatusBadRequest, "invalid-body", "the body must be a JSON queue configuration: "+err.Error())
	}
	var params []problem.Param
	if cfg.Name != name {
		params = append(params, problem.Param{Name: "name", Reason: "must match the queue in the path"})
		cfg.Name = name
	}
	for _, fe := range cfg.Validate() {
		params = append(params, problem.Param{Name: fe.Name, Reason: fe.Reason})
	}
	if len(params) > 0 {
		p := problem.New(fiber.StatusBadRequest, "invalid-config", strconv.Itoa(len(params))+" invalid field(s)")
		p.InvalidParams = params
		return cfg, p
	}
	return cfg, nil
}

// PutQueue creates (201) or replaces (200) a queue's configuration, and
// records the change on the ops stream.
func (a *API) PutQueue(c *fiber.Ctx) error {
	name := string([]byte(httpapi.PathParam(c, "queue")))
	if !catalog.ValidName(name) {
		return problem.New(fiber.StatusBadRequest, "invalid-queue", "queue names are 1-64 of A-Z a-z 0-9 _ -")
	}
	cfg, err := decodeQueueConfig(name, c.Body())
	if err != nil {
		return err
	}
	ctx := c.UserContext()
	if err := a.refuseDropOverALine(ctx, cfg); err != nil {
		return err
	}
	fresh, err := a.newLottery(ctx, cfg)
	if err != nil {
		return err
	}
	var prev catalog.Config
	created := false
	if _, exists := a.queues.Get(name); exists {
		// A compare-and-set, so the lottery's seed — committed to once — is
		// carried over from what is stored, never from a stale copy.
		var lotErr error
		prev, cfg, err = a.queues.Update(ctx, name, func(c *catalog.Config) bool {
			next, err := withLottery(cfg, *c, fresh)
			if err != nil {
				lotErr = err
				return false
			}
			next.Notice = c.Notice // set and taken down by PUT and DELETE …/notice only, which date it
			*c = next
			return true
		})
		if lotErr != nil {
			return lotErr
		}
	} else {
		cfg.Notice = nil // see above: a new queue has none until PUT …/notice
		if cfg, err = withLottery(cfg, catalog.Config{}, fresh); err != nil {
			return err
		}
		created, err = a.queues.Put(ctx, cfg)
	}
	if errors.Is(err, catalog.ErrRetired) {
		return retired(name)
	}
	if err != nil {
		return httpapi.Unavailable(err, "the configuration could not be stored; retry")
	}
	a.publishConfigChange(c, prev, cfg)
	status := fiber.StatusOK
	if created {
		status = fiber.StatusCreated
	}
	return c.Status(status).JSON(cfg.Redacted())
}

// CloseSettle is how long a queue has been seen closed by an admitter
// before it may be deleted: every admitter's copy of the catalog has the
// closing within milliseconds, so no tick admits anyone after it.
const CloseSettle = time.Second

// DeleteQueue answers DELETE /v1/admin/queues/{q}: a closed queue in which
// nobody holds a slot any more — no admitted shopper who may still order —
// leaves the catalog for good (204), recorded on the ops stream. Its name
// is retired (catalog.Delete: the streams keep its events under it); the
// admitters remove its line from Redis.
func (a *API) DeleteQueue(c *fiber.Ctx) error {
	cfg, err := httpapi.Queue(c, a.queues)
	if err != nil {
		return err
	}
	ctx := c.UserContext()
	var lineErr error
	deleted, err := a.queues.Delete(ctx, cfg.Name, a.now(), func(stored catalog.Config) error {
		if stored.State != catalog.StateClosed {
			return problem.New(fiber.StatusConflict, "queue-open",
				"queue "+cfg.Name+" is "+stored.State+": close it first (PUT it with state closed), so its line is told CLOSED")
		}
		// Read once the closing is the one stored: after it nobody more
		// is admitted, so what is held now only ends.
		cl, err := a.line.Closing(ctx, cfg.Name)
		if err != nil {
			lineErr = err
			return err
		}
		if cl.ClosedAt.IsZero() || cl.Now.Sub(cl.ClosedAt) < CloseSettle {
			p := problem.New(fiber.StatusConflict, "queue-closing",
				"no admitter has seen queue "+cfg.Name+" closed for a second yet; retry in a moment")
			p.RetryAfter = 2
			return p
		}
		if cl.Held > 0 {
			return problem.New(fiber.StatusConflict, "queue-in-use", fmt.Sprintf(
				"%d admitted shopper(s) may still order in queue %s, until %s at the latest; delete it once nobody holds a slot",
				cl.Held, cfg.Name, cl.FreeAt.UTC().Format(time.RFC3339)))
		}
		return nil
	})
	switch {
	case errors.Is(err, catalog.ErrNoQueue):
		return httpapi.UnknownQueue(cfg.Name) // deleted meanwhile
	case lineErr != nil:
		return httpapi.LineDown(lineErr)
	case err != nil:
		var p problem.Problem
		if errors.As(err, &p) {
			return p
		}
		return httpapi.Unavailable(err, "the queue could not be deleted; retry")
	}
	a.audit(ctx, c.Get("X-Admin-User", "admin"), deleted, catalog.Config{})
	return c.SendStatus(fiber.StatusNoContent)
}

// retired is the 409 a change of a deleted queue's name gets.
func retired(name string) error {
	return problem.New(fiber.StatusConflict, "queue-retired",
		"queue "+name+" was deleted; its events stay in the streams under its name, so it is not used again: choose another name")
}

// refuseDropOverALine refuses to schedule a drop (a first opensAt) on a
// queue shoppers wait in: its draw places the pre-queue at the head of the
// line, so they — who joined first — would move back behind it, and no one
// would be admitted until the opening. A drop starts on a new or empty
// queue. (A join racing this PUT, within the catalog's milliseconds of
// reaching every gateway, is not covered.)
func (a *API) refuseDropOverALine(ctx context.Context, cfg catalog.Config) error {
	cur, exists := a.queues.Get(cfg.Name)
	if !exists || cur.Lottery != nil || cfg.OpensAt == nil {
		return nil
	}
	st, err := a.line.Stats(ctx, cfg.Name)
	if err != nil {
		return httpapi.LineDown(err)
	}
	if st.Waiting > 0 {
		return problem.New(fiber.StatusConflict, "line-not-empty", fmt.Sprintf(
			"%d shopper(s) wait in this line: a drop's draw would place its pre-queue ahead of them; "+
				"schedule it on a new queue, or once nobody waits", st.Waiting))
	}
	return nil
}

// RequireAdminUser refuses a change whose X-Admin-User cannot name who
// made it: every change records the header in its audit event on the ops
// stream, so it is a name of 1-128 printable characters (event.ValidBy),
// not whatever a client sends. Absent, it is "admin". A value that is not
// UTF-8 is read as ISO-8859-1, which is how a browser's fetch() sends a
// header (the dashboard's "José" arrives as 4 bytes), and passed on as
// UTF-8. Reads record nothing and are not refused for it.
func (a *API) RequireAdminUser(c *fiber.Ctx) error {
	if m := c.Method(); m == fiber.MethodGet || m == fiber.MethodHead {
		return c.Next()
	}
	by := c.Get("X-Admin-User")
	if by != "" && len(by) <= event.MaxBy && !utf8.ValidString(by) {
		by = latin1(by)
		c.Request().Header.Set("X-Admin-User", by)
	}
	if by != "" && !event.ValidBy(by) {
		reason := fmt.Sprintf("must be 1-%d printable characters: who makes the change, recorded in its audit event", event.MaxBy)
		p := problem.New(fiber.StatusBadRequest, "invalid-admin-user", "X-Admin-User "+reason)
		p.InvalidParams = []problem.Param{{Name: "X-Admin-User", Reason: reason}}
		return p
	}
	return c.Next()
}

// latin1 is s's bytes read as ISO-8859-1 characters.
func latin1(s string) string {
	r := make([]rune, len(s))
	for i := range len(s) {
		r[i] = rune(s[i])
	}
	return string(r)
}

func (a *API) publishConfigChange(c *fiber.Ctx, prev, cfg catalog.Config) {
	a.audit(c.UserContext(), c.Get("X-Admin-User", "admin"), prev, cfg)
}

// audit records a change of a queue's configuration on the ops stream (a
// lottery's seed never: it stays secret until the draw reveals it).
// A deletion has no configuration after it (cfg without a name): config is
// null, previous the configuration deleted.
func (a *API) audit(ctx context.Context, by string, prev, cfg catalog.Config) {
	prev, cfg = prev.Redacted(), cfg.Redacted()
	var previous, config any = nil, cfg
	if prev.Name != "" {
		previous = &prev
	}
	name := cfg.Name
	if name == "" {
		name, config = prev.Name, nil
	}
	id, body, err := event.NewConfigChanged(name, by, config, previous, a.now())
	if err == nil {
		_, err = a.events.Publish(ctx, event.ConfigChangedSubject, body, jetstream.WithMsgID(id))
	}
	if err != nil {
		// The change itself is stored; only its audit record is missing.
		a.log.Error("config change not recorded on the ops stream", "queue", name, "err", err)
	}
}

// GetQueue answers GET /v1/admin/queues/{q}: its configuration and live
// figures.
func (a *API) GetQueue(c *fiber.Ctx) error {
	cfg, err := httpapi.Queue(c, a.queues)
	if err != nil {
		return err
	}
	v, err := a.view(c, cfg)
	if err != nil {
		return err
	}
	return c.JSON(v)
}

// ListQueues answers GET /v1/admin/queues: every queue's configuration
// and live figures.
func (a *API) ListQueues(c *fiber.Ctx) error {
	out := []queueView{}
	for _, cfg := range a.queues.List() {
		v, err := a.view(c, cfg)
		if err != nil {
			return err
		}
		out = append(out, v)
	}
	return c.JSON(fiber.Map{"queues": out})
}

func (a *API) view(c *fiber.Ctx, cfg catalog.Config) (queueView, error) {
	ctx := c.UserContext()
	st, err := a.line.Stats(ctx, cfg.Name)
	if err != nil {
		return queueView{}, httpapi.LineDown(err)
	}
	v := viewOf(cfg, st)
	if v.AdaptiveLimit, err = adaptiveOf(ctx, a.limits, cfg); err != nil {
		return queueView{}, httpapi.LineDown(err)
	}
	if a.sales != nil {
		withSold(ctx, a.log, &v, a.sales)
	}
	return v, nil
}

// withSold adds a stock-aware queue's units sold per SKU, as sales reads
// them (PostgreSQL's sums). The sold figure is the database's; the rest
// of the view stands without it, its sold left unknown.
func withSold(ctx context.Context, log *slog.Logger, v *queueView, sales Sales) {
	if v.Stock == nil {
		return
	}
	sold, err := sales.Sold(ctx, v.Name)
	if err != nil {
		log.Warn("read the units sold", "queue", v.Name, "err", err)
		return
	}
	for i := range v.Stock.SKUs {
		n := sold[v.Stock.SKUs[i].SKU]
		v.Stock.SKUs[i].Sold = &n
	}
}

func viewOf(cfg catalog.Config, st waitqueue.Stats) queueView {
	v := queueView{Config: cfg.Redacted(), Waiting: st.Waiting, Active: st.Active,
		AdmittedTotal: st.AdmittedTotal, AdmitRatePerSec: st.AdmitRatePerSec, PreQueue: st.PreQueue}
	if !st.LastTick.IsZero() {
		at := st.LastTick.UTC()
		v.LastTickAt = &at
	}
	if cfg.StockAwareness() && st.Stock != "" {
		v.Stock = &stockView{State: st.Stock, Sellable: st.Sellable, HeldByAdmitted: st.HeldAdmitted, SKUs: []skuView{}}
		for _, s := range st.SKUs {
			v.Stock.SKUs = append(v.Stock.SKUs, skuView{SKU: s.SKU, Available: s.Available, Held: s.Claimed, Pending: s.Pending})
		}
	}
	return v
}
