package admin

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"usher/gateway/httpapi"
	"usher/internal/catalog"
	"usher/internal/orders"
	"usher/internal/problem"
	"usher/internal/waitqueue"

	"github.com/gofiber/fiber/v2"
)

// Sales reads what a queue sold, per SKU (PostgreSQL).
type Sales interface {
	Sold(ctx context.Context, q string) (map[string]int64, error)
}

// Stock sets a SKU's available stock (PostgreSQL).
type Stock interface {
	SetStock(ctx context.Context, sku string, available int64) (orders.Stock, error)
}

// PutStock answers PUT /v1/admin/stock/{sku}: it sets a SKU's available
// units.
func (a *API) PutStock(c *fiber.Ctx) error {
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
func (a *API) restocked(ctx context.Context, by string, st orders.Stock) []string {
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

// MigratedStock sets stock on a store whose schema it brings up to date
// first (once, retried until it succeeds): the gateway may be the first
// service to touch a fresh database.
type MigratedStock struct {
	store stockStore
	mu    sync.Mutex
	done  bool
}

// stockStore is the part of the orders' store MigratedStock uses.
type stockStore interface {
	Migrate(ctx context.Context) error
	SetStock(ctx context.Context, sku string, available int64) (orders.Stock, error)
}

// NewMigratedStock sets stock on store, migrating its schema first.
func NewMigratedStock(store stockStore) *MigratedStock { return &MigratedStock{store: store} }

// SetStock sets sku's available units, once the schema is up to date.
func (m *MigratedStock) SetStock(ctx context.Context, sku string, available int64) (orders.Stock, error) {
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
