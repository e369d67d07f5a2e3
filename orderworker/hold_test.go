package main

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"usher/internal/keyspace"
	"usher/internal/orders"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
)

// An accepted order holds its admission slot until it ends, or for the
// order hold at most (the gateway's USHER_ORDER_HOLD, counted from the
// claim). Workers down for longer than the hold: the line gives the slots
// away to the next shoppers — and then the orders that held them are never
// charged. Each ends REJECTED hold_lapsed, announced like any final order
// (the shopper learns it failed), its stock untouched; the shoppers
// admitted in their place buy the units. Never more orders going through
// than targetActive slots, never more than the sellable units.
func TestAnOrderWhoseHoldLapsedIsNeverCharged(t *testing.T) {
	const target, units = 2, 2
	w := newWorld(t, queueCfg(target), units, 5)
	ctx := context.Background()
	if err := w.line.SetStock(ctx, w.queue, true, waitqueue.StockLevel{SKU: w.sku(), Available: units, Version: 1}); err != nil {
		t.Fatal(err)
	}
	tick := func() waitqueue.TickResult {
		r := testenv.Tick(t, w.line, w.queue, waitqueue.Tick{TargetActive: target, TickLength: 10 * time.Millisecond,
			TokenTTL: time.Minute, StockAware: true})
		if r.Active > target {
			t.Fatalf("tick = %+v: more slots held than targetActive %d", r, target)
		}
		return r
	}
	for seq := uint64(1); seq <= 4; seq++ {
		if _, err := w.line.Ingest(ctx, w.queue, testenv.Epoch, seq, userOf(seq), 0); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Applied(t, w.line, w.queue, testenv.Epoch, 4)
	if r := tick(); r.Admitted != target {
		t.Fatalf("first tick admitted %d, want %d", r.Admitted, target)
	}
	time.Sleep(10 * time.Millisecond) // past readyAt
	tok := func(seq uint64) string { return waitqueue.TokenID(w.queue, testenv.Epoch, seq) }
	w.record(tok(1), tok(2))

	// The first two order (the gateway's 202) while every worker is down,
	// and stays down past the order hold (a second here).
	const hold = time.Second
	var backlog []string
	for _, seq := range []uint64{1, 2} {
		backlog = append(backlog, w.publishRequest(tok(seq), "", w.claimFor(tok(seq), hold)))
	}
	admitted := 0 // the two holds run out a moment apart: one tick or two
	testenv.Eventually(t, 10*time.Second, func() bool {
		admitted += tick().Admitted
		return admitted == target
	}, "the lapsed holds' slots given to the next two shoppers")

	// The workers come back; the two admitted in their place order too.
	w.record(tok(3), tok(4))
	w.start(hooks{})
	fresh := []string{w.request(tok(3), ""), w.request(tok(4), "")}
	w.waitFinal(30*time.Second, append(backlog, fresh...)...)

	events := w.finished()
	for _, id := range backlog {
		o := w.order(id)
		if o.Status != orders.Rejected || o.Reason != orders.ReasonHoldLapsed || w.charges(id) != 0 {
			t.Errorf("backlog order %s: %s (%s), %d charge(s); want REJECTED %s, never charged",
				id, o.Status, o.Reason, w.charges(id), orders.ReasonHoldLapsed)
		}
		if f := events[id]; f.Status != string(orders.Rejected) || f.Reason != orders.ReasonHoldLapsed {
			t.Errorf("backlog order %s announced %+v, want its failure", id, f)
		}
		if rec, ok, _ := w.records.Get(ctx, id); !ok || rec.Status != orders.Rejected {
			t.Errorf("backlog order %s's record = %+v, want REJECTED for the shopper's poll", id, rec)
		}
	}
	for _, id := range fresh {
		if o := w.order(id); o.Status != orders.Paid || w.charges(id) != 1 {
			t.Errorf("order %s of a shopper admitted in a lapsed slot: %s (%s), want PAID", id, o.Status, o.Reason)
		}
	}
	if got := w.stock(); got != 0 {
		t.Errorf("stock = %d, want 0: the two units sold once, to the two who held the slots", got)
	}
	tick()
}

func userOf(seq uint64) string { return "user-" + strconv.FormatUint(seq, 10) }

// The same rule for an order placed before its slot went (a worker that
// crashed after transaction 1, its redelivery late): no new charge on a
// slot given away. The gateway's ledger decides it — nothing captured
// here, so FAILED hold_lapsed with its stock back.
func TestARedeliveredOrderWhoseSlotLapsedIsChargedNoMore(t *testing.T) {
	w := newWorld(t, queueCfg(20), 10, 5)
	ctx := context.Background()
	tok := w.admit(1)[0]
	crashed := w.start(hooks{afterPlace: func(string) error { return errCrash }})
	id := w.request(tok, "")
	testenv.EndsWith(t, crashed, 30*time.Second, errCrash)
	// Its hold runs out (as when Redis, replaying the order, restored the
	// claim's shorter hold), and the tick gives the slot away.
	_, _, seq, _ := waitqueue.ParseTokenID(tok)
	if err := w.rdb.ZAdd(ctx, keyspace.Of(w.queue).Active(), redis.Z{Score: 1, Member: seq}).Err(); err != nil {
		t.Fatal(err)
	}
	if r := testenv.Tick(t, w.line, w.queue, waitqueue.Tick{TargetActive: 20, TickLength: 10 * time.Millisecond, TokenTTL: time.Minute}); r.Expired != 1 {
		t.Fatalf("tick = %+v, want the lapsed hold's slot freed", r)
	}
	w.start(hooks{})
	w.waitFinal(30*time.Second, id)
	if o := w.order(id); o.Status != orders.Failed || o.Reason != orders.ReasonHoldLapsed || w.charges(id) != 0 || w.stock() != 10 {
		t.Fatalf("order %s (%s), %d charge(s), stock %d: want FAILED %s, never charged, stock back",
			o.Status, o.Reason, w.charges(id), w.stock(), orders.ReasonHoldLapsed)
	}
}
