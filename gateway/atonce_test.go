package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"usher/internal/catalog"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
)

// tickAs runs one admission tick of the harness's queue as the admitter
// runs it, with what the admitter decided for this tick: the limit (the
// adaptive controller's, not the configured targetActive) and whether
// admission is paused (the payment breaker is open).
func (h *harness) tickAs(limit int, paused bool) waitqueue.TickResult {
	h.t.Helper()
	cfg, _ := h.gw.queues.Get(h.queue)
	testenv.Applied(h.t, h.line, h.queue, h.gw.epoch(), 1<<40)
	tickLen := time.Duration(cfg.TickMs) * time.Millisecond
	r := testenv.Tick(h.t, h.line, h.queue, waitqueue.Tick{
		Epoch: h.gw.epoch(), TargetActive: limit, MaxAdmitPerTick: cfg.MaxAdmitPerTick,
		TickLength: tickLen, TokenTTL: time.Duration(cfg.TokenTTLSeconds) * time.Second,
		Paused: paused || cfg.State != catalog.StateOpen,
	})
	time.Sleep(tickLen)
	return r
}

// A join into an empty line is admitted at once only within the limit the
// ticks admit by: an adaptive queue's is the controller's current one, not
// the configured targetActive. With the one slot of the adaptive limit
// taken, the join waits, although the configuration would have four more.
func TestAJoinIsAdmittedAtOnceOnlyWithinTheAdaptiveLimit(t *testing.T) {
	h := newHarness(t)
	h.putQueue(h.queue, `{"targetActive": 5, "tickMs": 100, "rateLimit": `+limitsOff+`}`, 200)
	first := h.join("first")
	if r := h.tickAs(1, false); r.Admitted != 1 {
		t.Fatalf("the tick at limit 1 admitted %d, want first", r.Admitted)
	}
	if p := h.poll(first.str("ticket")); p.str("status") != "READY" {
		t.Fatalf("first = %s, want READY", p.raw)
	}
	r := h.join("second")
	if r.status != 202 || r.str("status") != "WAITING" || r.num("position") != 1 {
		t.Fatalf("a join with the adaptive limit's one slot taken = %d %s; want WAITING first in line (the next tick decides)", r.status, r.raw)
	}
	st, _ := h.line.Stats(context.Background(), h.queue)
	if st.Active != 1 {
		t.Fatalf("slots held = %d, want 1: the adaptive limit", st.Active)
	}
}

// While admission is paused — the payment breaker is open, so the ticks
// admit nobody — no join is admitted at once either; once a tick admits
// again, neither does the pause hold a join back.
func TestNoJoinIsAdmittedAtOnceWhileAdmissionIsPaused(t *testing.T) {
	h := newHarness(t)
	h.putQueue(h.queue, `{"targetActive": 5, "tickMs": 100, "rateLimit": `+limitsOff+`}`, 200)
	h.tickAs(5, true)
	r := h.join("paused")
	if r.status != 202 || r.str("status") != "WAITING" {
		t.Fatalf("a join while the breaker pauses admission = %d %s; want WAITING", r.status, r.raw)
	}
	if st, _ := h.line.Stats(context.Background(), h.queue); st.Active != 0 {
		t.Fatalf("slots held while paused = %d, want 0", st.Active)
	}
	if r := h.tickAs(5, false); r.Admitted != 1 {
		t.Fatalf("the tick after the pause admitted %d, want the one waiting", r.Admitted)
	}
	if r := h.join("after"); r.str("status") != "READY" {
		t.Fatalf("a join into the empty line after the pause = %s, want READY at once", r.raw)
	}
}

// An admission at once counts the stock as it stands at that moment, as a
// tick would: an order claimed since the last tick holds its units. Three
// units; the tick admits ann (two left, it records); ann orders all three;
// ben, joining the empty line, must wait — nothing is left — although the
// last tick's figure said two.
func TestAJoinAdmittedAtOnceCountsTheUnitsClaimedSinceTheTick(t *testing.T) {
	h := newOrderHarness(t)
	sku := "sku-" + h.queue
	h.putQueue(h.queue, fmt.Sprintf(`{"targetActive": 5, "tickMs": 100, "sku": %q, "maxQuantity": 3, "rateLimit": %s}`, sku, limitsOff), 200)
	ann := h.join("ann")
	h.stockTick(map[string]int64{sku: 3})
	tok := h.poll(ann.str("ticket")).str("token")
	if tok == "" {
		t.Fatal("ann not READY after the stock-aware tick")
	}
	if st, _ := h.line.Stats(context.Background(), h.queue); st.Sellable != 2 {
		t.Fatalf("sellable after the tick = %d, want 2", st.Sellable)
	}
	if r := h.order("ann", tok, fmt.Sprintf(`{"sku": %q, "quantity": 3}`, sku)); r.status != 202 {
		t.Fatalf("ann's order of 3 = %d %s", r.status, r.raw)
	}
	r := h.join("ben")
	if r.status != 202 || r.str("status") != "WAITING" {
		t.Fatalf("ben's join with every unit claimed = %d %s; want WAITING (nothing left to sell)", r.status, r.raw)
	}
}

// stockTick records the stock of the queue's SKUs and runs a stock-aware
// tick, as the admitter does.
func (h *harness) stockTick(avail map[string]int64) waitqueue.TickResult {
	h.t.Helper()
	cfg, _ := h.gw.queues.Get(h.queue)
	var levels []waitqueue.StockLevel
	for sku, n := range avail {
		levels = append(levels, waitqueue.StockLevel{SKU: sku, Available: n, Version: time.Now().UnixMilli()})
	}
	if err := h.line.SetStock(context.Background(), h.queue, true, levels...); err != nil {
		h.t.Fatal(err)
	}
	testenv.Applied(h.t, h.line, h.queue, h.gw.epoch(), 1<<40)
	tickLen := time.Duration(cfg.TickMs) * time.Millisecond
	r := testenv.Tick(h.t, h.line, h.queue, waitqueue.Tick{
		Epoch: h.gw.epoch(), TargetActive: cfg.TargetActive, MaxAdmitPerTick: cfg.MaxAdmitPerTick,
		TickLength: tickLen, TokenTTL: time.Duration(cfg.TokenTTLSeconds) * time.Second, StockAware: true,
		Share: waitqueue.Share{SKUs: cfg.Products()},
	})
	time.Sleep(tickLen) // past every readyAt of the tick
	return r
}
