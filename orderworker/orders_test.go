package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"usher/internal/catalog"
	"usher/internal/event"
	"usher/internal/orders"
	"usher/internal/paybreaker"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
)

var errCrash = errors.New("crash (test hook)")

func queueCfg(target int) catalog.Config {
	c := catalog.Defaults("")
	c.TargetActive = target
	return c
}

func TestAnOrderIsPaidRecordedAnnouncedAndItsSlotFreed(t *testing.T) {
	w := newWorld(t, queueCfg(20), 5, 5)
	tok := w.admit(1)[0]
	w.start(hooks{})
	id := w.request(tok, "")
	w.waitFinal(20*time.Second, id)

	o := w.order(id)
	if o.Status != orders.Paid || o.PaymentID == "" || w.stock() != 4 || w.charges(id) != 1 {
		t.Fatalf("order %+v, stock %d, charges %d: want PAID with a payment id, stock 4, one charge", o, w.stock(), w.charges(id))
	}
	rec, ok, _ := w.records.Get(context.Background(), id)
	if !ok || rec.Status != orders.Paid || rec.PaymentID != o.PaymentID || rec.Owner != o.User {
		t.Errorf("Redis record = %+v, want PAID as in the store", rec)
	}
	if f := w.finished()[id]; f.Status != "PAID" || f.PaymentID != o.PaymentID || f.TokenID != tok {
		t.Errorf("completed event = %+v, want PAID with the payment id", f)
	}
	_, _, seq, _ := waitqueue.ParseTokenID(tok)
	if e, _ := w.line.Poll(context.Background(), w.queue, seq); e.Status != waitqueue.Used {
		t.Errorf("entry status = %s, want used", e.Status)
	}
}

// Fifty copies of one order request (past the stream's dedup, to two
// workers) are one order, one stock decrement and one charge.
func TestDuplicateRequestsAreOneOrderAndOneCharge(t *testing.T) {
	w := newWorld(t, queueCfg(20), 10, 5)
	tok := w.admit(1)[0]
	w.start(hooks{})
	w.start(hooks{})
	id := orders.ID(tok)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.request(tok, fmt.Sprintf("copy-%d", i))
		}()
	}
	wg.Wait()
	w.waitFinal(30*time.Second, id)
	testenv.Eventually(t, 30*time.Second, func() bool {
		info, _ := w.js.Consumer(context.Background(), event.StreamOrders, consumerName)
		ci, err := info.Info(context.Background())
		return err == nil && ci.NumAckPending == 0 && ci.NumPending == 0
	}, "every copy handled")
	if got := w.charges(""); got != 1 || w.stock() != 9 || w.order(id).Status != orders.Paid {
		t.Fatalf("charges %d, stock %d, status %s: want 1 charge, stock 9, PAID", got, w.stock(), w.order(id).Status)
	}
}

// 200 shoppers race for 100 units: exactly 100 are paid, 100 rejected as
// sold out, the stock ends at 0 and never below. (Closing the queue is the
// admitter's: see its stock tests.)
func TestTwoHundredShoppersForAHundredUnits(t *testing.T) {
	w := newWorld(t, queueCfg(200), 100, 5)
	toks := w.admit(200)
	w.start(hooks{})
	w.start(hooks{})
	ids := make([]string, len(toks))
	for i, tok := range toks {
		ids[i] = w.request(tok, "")
	}
	w.waitFinal(90*time.Second, ids...)
	count := map[orders.Status]int{}
	for _, id := range ids {
		o := w.order(id)
		count[o.Status]++
		if o.Status == orders.Rejected && o.Reason != orders.ReasonSoldOut {
			t.Errorf("order %s rejected for %q, want sold_out", id, o.Reason)
		}
	}
	if count[orders.Paid] != 100 || count[orders.Rejected] != 100 || w.stock() != 0 || w.charges("") != 100 {
		t.Fatalf("outcomes %v, stock %d, charges %d: want 100 PAID, 100 REJECTED, stock 0, 100 charges", count, w.stock(), w.charges(""))
	}
}

// Killing the worker at each crash point and starting another finishes the
// order exactly once: one charge, one stock decrement.
func TestCrashAnywhereFinishesTheOrderOnce(t *testing.T) {
	crashAt := func(point string) hooks {
		f := func(string) error { return errCrash }
		switch point {
		case "after the redemption":
			return hooks{afterRedeem: f}
		case "after transaction 1":
			return hooks{afterPlace: f}
		case "after the payment call":
			return hooks{afterPay: f}
		default:
			return hooks{beforeAck: f}
		}
	}
	for _, point := range []string{"after the redemption", "after transaction 1", "after the payment call", "before the ack"} {
		t.Run(point, func(t *testing.T) {
			w := newWorld(t, queueCfg(20), 10, 5)
			tok := w.admit(1)[0]
			crashed := w.start(crashAt(point))
			id := w.request(tok, "")
			testenv.EndsWith(t, crashed, 30*time.Second, errCrash)
			w.start(hooks{})
			w.waitFinal(30*time.Second, id)
			if o := w.order(id); o.Status != orders.Paid || w.charges(id) != 1 || w.stock() != 9 {
				t.Fatalf("after a crash %s: %s, %d charge(s), stock %d; want PAID, 1 charge, stock 9", point, o.Status, w.charges(id), w.stock())
			}
		})
	}
}

// The payment gateway goes down: the breaker opens, admission would pause
// (the shared state is set), orders wait instead of failing, and after
// recovery every one of them is paid exactly once. The outage lasts until
// the breaker is seen open (about a second here, not 10 s: the behaviour is
// the same, only the wait is shorter).
func TestOutageOpensTheBreakerAndEveryOrderCompletesAfter(t *testing.T) {
	for _, mode := range []string{"outage", "slow"} {
		t.Run(mode, func(t *testing.T) {
			w := newWorld(t, queueCfg(20), 100, 5)
			shared := paybreaker.New(w.rdb)
			w.setMode(mode, 2000) // slow: every payment takes 2 s, past the 500 ms timeout
			toks := w.admit(10)
			w.start(hooks{})
			var ids []string
			for _, tok := range toks {
				ids = append(ids, w.request(tok, ""))
			}
			testenv.Eventually(t, 30*time.Second, func() bool { open, _ := shared.Open(context.Background()); return open }, "breaker open")
			for _, id := range ids {
				if st := w.order(id).Status; st.Final() {
					t.Fatalf("order %s is %s during the %s, want it waiting", id, st, mode)
				}
			}
			w.setMode("normal", 0)
			w.waitFinal(60*time.Second, ids...)
			for _, id := range ids {
				if o := w.order(id); o.Status != orders.Paid || w.charges(id) != 1 {
					t.Errorf("order %s: %s with %d charge(s), want PAID once", id, o.Status, w.charges(id))
				}
			}
			if got := w.stock(); got != 90 {
				t.Errorf("stock = %d, want 90", got)
			}
			testenv.Eventually(t, 10*time.Second, func() bool { open, _ := shared.Open(context.Background()); return !open }, "breaker closed again")
		})
	}
}

// An order that waits past its deadline, and that the gateway says it
// never charged, fails and gives its stock back. (Slow mode: every charge
// times out uncaptured, and lookups still answer.)
func TestAnOrderPastItsDeadlineFailsAndGivesTheStockBack(t *testing.T) {
	w := newWorld(t, queueCfg(20), 10, 5)
	w.setMode("slow", 2000)
	tok := w.admit(1)[0]
	w.start(hooks{}, "USHER_ORDER_DEADLINE", "1s")
	id := w.request(tok, "")
	w.waitFinal(30*time.Second, id)
	if o := w.order(id); o.Status != orders.Failed || o.Reason != orders.ReasonDeadline || w.stock() != 10 || w.charges("") != 0 {
		t.Fatalf("order %s (%s), stock %d, charges %d: want FAILED deadline, stock 10, none", o.Status, o.Reason, w.stock(), w.charges(""))
	}
	if f := w.finished()[id]; f.Status != "FAILED" || f.Reason != orders.ReasonDeadline {
		t.Fatalf("failed event = %+v", f)
	}
}

// Closed loop: with targetActive 1 the next shopper is admitted only once
// the first one's order has finished.
func TestTheNextShopperIsAdmittedOnlyWhenTheOrderFinishes(t *testing.T) {
	w := newWorld(t, queueCfg(1), 10, 5)
	ctx := context.Background()
	tick := func() waitqueue.TickResult {
		return testenv.Tick(t, w.line, w.queue, waitqueue.Tick{Epoch: testenv.Epoch, TargetActive: 1, TickLength: 10 * time.Millisecond,
			TokenTTL: 5 * time.Minute})
	}
	w.line.Ingest(ctx, w.queue, testenv.Epoch, 1, "user-1", 0)
	w.line.Ingest(ctx, w.queue, testenv.Epoch, 2, "user-2", 0)
	testenv.Applied(t, w.line, w.queue, testenv.Epoch, 2)
	if r := tick(); r.Admitted != 1 {
		t.Fatalf("first tick admitted %d, want 1", r.Admitted)
	}
	w.record(waitqueue.TokenID(w.queue, testenv.Epoch, 1))
	placed, proceed := make(chan struct{}), make(chan struct{})
	w.start(hooks{afterPlace: func(string) error { close(placed); <-proceed; return nil }})
	time.Sleep(10 * time.Millisecond) // past readyAt
	id := w.request(waitqueue.TokenID(w.queue, testenv.Epoch, 1), "")
	<-placed
	if r := tick(); r.Admitted != 0 || r.Active != 1 {
		t.Fatalf("tick while the order is in flight = %+v, want nobody admitted", r)
	}
	close(proceed)
	w.waitFinal(20*time.Second, id)
	if r := tick(); r.Admitted != 1 {
		t.Fatalf("tick after the order finished admitted %d, want the next shopper", r.Admitted)
	}
}

// An order is judged at its request: a token claimed before it expired is
// honoured however long the worker takes to get to it.
func TestAnOrderAcceptedBeforeTheTokenExpiredIsHonouredLate(t *testing.T) {
	w := newWorld(t, queueCfg(20), 10, 5)
	tok := w.admitFor(1, time.Second)[0]
	id := w.request(tok, "") // the gateway's 202
	// The worker is backlogged past the token's expiry; ticks run meanwhile.
	time.Sleep(1200 * time.Millisecond)
	testenv.Tick(t, w.line, w.queue, waitqueue.Tick{Epoch: testenv.Epoch, TargetActive: 20, TickLength: 10 * time.Millisecond, TokenTTL: time.Second})
	w.start(hooks{})
	w.waitFinal(20*time.Second, id)
	if o := w.order(id); o.Status != orders.Paid || w.stock() != 9 {
		t.Fatalf("order %s (%s), stock %d: want PAID, stock 9", o.Status, o.Reason, w.stock())
	}
}

// A request for a token that expired unclaimed (never through a gateway's
// claim) orders nothing.
func TestAnUnclaimedExpiredTokenIsRejected(t *testing.T) {
	w := newWorld(t, queueCfg(20), 10, 5)
	tok := w.admitFor(1, time.Second)[0]
	time.Sleep(1200 * time.Millisecond)
	testenv.Tick(t, w.line, w.queue, waitqueue.Tick{Epoch: testenv.Epoch, TargetActive: 20, TickLength: 10 * time.Millisecond, TokenTTL: time.Second})
	w.start(hooks{})
	id := w.publishRequest(tok, "", time.Now())
	testenv.Eventually(t, 20*time.Second, func() bool { return w.order(id).Status.Final() }, "order final")
	if o := w.order(id); o.Status != orders.Rejected || o.Reason != orders.ReasonTokenExpired || w.stock() != 10 {
		t.Fatalf("order %s (%s), stock %d: want REJECTED token_expired, stock 10", o.Status, o.Reason, w.stock())
	}
}

// A request naming a token the line holds no admission for — forged by
// someone who can publish on the broker — orders nothing: the worker waits
// for the line to confirm it until the order's deadline, then rejects it.
func TestARequestForATokenTheLineNeverHeldIsRejected(t *testing.T) {
	w := newWorld(t, queueCfg(20), 10, 5)
	w.start(hooks{}, "USHER_ORDER_DEADLINE", "2s")
	id := w.publishRequest(waitqueue.TokenID(w.queue, testenv.Epoch, 999), "", time.Now())
	testenv.Eventually(t, 20*time.Second, func() bool { return w.order(id).Status.Final() }, "order final")
	if o := w.order(id); o.Status != orders.Rejected || o.Reason != orders.ReasonTokenUnconfirmed || w.stock() != 10 || w.charges(id) != 0 {
		t.Fatalf("order %s (%s), stock %d, charges %d: want REJECTED token_unconfirmed, stock 10, no charge", o.Status, o.Reason, w.stock(), w.charges(id))
	}
}
