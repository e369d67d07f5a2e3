package main

import (
	"context"
	"testing"
	"time"

	"usher/internal/orders"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
)

// lostLine is a world whose only shopper was admitted (tokens of ttl) and,
// when ordered, had her order accepted — the gateway's claim, the request
// stored in USHER_ORDERS — before Redis lost everything (FLUSHALL). It
// returns her token, the admission as USHER_ADMISSIONS holds it, and the
// order id ("" when she did not order).
func lostLine(t *testing.T, ttl time.Duration, ordered bool) (w *world, tok string, adm waitqueue.AdmissionEvent, id string) {
	t.Helper()
	w = newWorld(t, queueCfg(20), 10, 5)
	tok = w.admitFor(1, ttl)[0]
	_, _, seq, _ := waitqueue.ParseTokenID(tok)
	e, err := w.line.Poll(context.Background(), w.queue, seq)
	if err != nil {
		t.Fatal(err)
	}
	adm = waitqueue.AdmissionEvent{StreamSeq: 1, Entry: seq, User: e.User, TokenID: tok, ReadyAt: e.ReadyAt, ExpiresAt: e.ExpiresAt}
	if ordered {
		id = w.request(tok, "") // the gateway's 202
	}
	if err := w.rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	return w, tok, adm, id
}

// replayEntries and replayAdmissions apply what the admitter's entries and
// admissions followers replay after the loss — her join, her leave if any,
// her admission — ahead of the orders follower, which has not reached her
// request yet.
func (w *world) replayEntries(evs ...waitqueue.EntryEvent) {
	w.t.Helper()
	if _, err := w.line.ApplyEntries(context.Background(), w.queue, testenv.Epoch, 0, evs); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) replayAdmissions(evs ...waitqueue.AdmissionEvent) {
	w.t.Helper()
	if _, err := w.line.ApplyAdmissions(context.Background(), w.queue, "admissions", 0, evs); err != nil {
		w.t.Fatal(err)
	}
}

// pastExpiry waits until the line's clock has passed the admission's expiry.
func (w *world) pastExpiry(adm waitqueue.AdmissionEvent) {
	w.t.Helper()
	testenv.Eventually(w.t, 10*time.Second, func() bool {
		now, err := w.line.Now(context.Background())
		return err == nil && now.After(adm.ExpiresAt)
	}, "the admission's expiry (%v) passed", adm.ExpiresAt)
}

// An order the gateway accepted with 202 is placed and paid after Redis
// lost everything and the line healed from the streams, even when the
// replay restored her admission as expired (it expired after she ordered)
// or as left (her leave, after she ordered, replayed before her request):
// the worker redeems the request the stream stored before the expiry and
// the leave, once, and the token holds her slot until the order ends.
func TestAnAcceptedOrderIsPlacedAfterALostRedisIsReplayed(t *testing.T) {
	t.Run("her admission replayed after its expiry, ahead of her request", func(t *testing.T) {
		w, _, adm, id := lostLine(t, 2*time.Second, true)
		w.pastExpiry(adm)
		w.replayEntries(waitqueue.EntryEvent{StreamSeq: adm.Entry, User: adm.User})
		w.replayAdmissions(adm)
		if e, _ := w.line.Poll(context.Background(), w.queue, adm.Entry); e.Status != waitqueue.Expired {
			t.Fatalf("replayed admission = %s, want expired (the case under test)", e.Status)
		}
		w.start(hooks{})
		w.waitFinal(20*time.Second, id)
		if o := w.order(id); o.Status != orders.Paid || w.stock() != 9 || w.charges(id) != 1 {
			t.Fatalf("order %s (%s), stock %d, charges %d: want PAID, stock 9, one charge", o.Status, o.Reason, w.stock(), w.charges(id))
		}
	})
	t.Run("her leave replayed ahead of her request", func(t *testing.T) {
		w, _, adm, id := lostLine(t, 5*time.Minute, true)
		left := time.Now() // she left after her 202: the stream stored the leave after the request
		w.replayEntries(waitqueue.EntryEvent{StreamSeq: adm.Entry, User: adm.User},
			waitqueue.EntryEvent{StreamSeq: adm.Entry + 1, Leave: true, Entry: adm.Entry, User: adm.User, At: left.Add(time.Second)})
		w.replayAdmissions(adm)
		if e, _ := w.line.Poll(context.Background(), w.queue, adm.Entry); e.Status != waitqueue.Left {
			t.Fatalf("replayed entry = %s, want left (the case under test)", e.Status)
		}
		w.start(hooks{})
		w.waitFinal(20*time.Second, id)
		if o := w.order(id); o.Status != orders.Paid || w.stock() != 9 || w.charges(id) != 1 {
			t.Fatalf("order %s (%s), stock %d, charges %d: want PAID, stock 9, one charge", o.Status, o.Reason, w.stock(), w.charges(id))
		}
	})
}

// What the replay honours is only what the line accepted: a request
// published on the bus for a token that expired unclaimed, or whose
// shopper left unclaimed, is rejected after a replay as it is live —
// whatever requestedAt it names — and takes no stock.
func TestARequestStoredAfterTheExpiryOrTheLeaveIsRejectedAfterAReplay(t *testing.T) {
	t.Run("expired unclaimed", func(t *testing.T) {
		w, tok, adm, _ := lostLine(t, 2*time.Second, false)
		w.pastExpiry(adm)
		w.replayEntries(waitqueue.EntryEvent{StreamSeq: adm.Entry, User: adm.User})
		w.replayAdmissions(adm)
		w.start(hooks{})
		id := w.publishRequest(tok, "", adm.ExpiresAt.Add(-time.Second))
		testenv.Eventually(t, 20*time.Second, func() bool { return w.order(id).Status.Final() }, "order final")
		if o := w.order(id); o.Status != orders.Rejected || o.Reason != orders.ReasonTokenExpired || w.stock() != 10 {
			t.Fatalf("order %s (%s), stock %d: want REJECTED token_expired, stock 10", o.Status, o.Reason, w.stock())
		}
	})
	t.Run("left unclaimed", func(t *testing.T) {
		w, tok, adm, _ := lostLine(t, 5*time.Minute, false)
		w.replayEntries(waitqueue.EntryEvent{StreamSeq: adm.Entry, User: adm.User},
			waitqueue.EntryEvent{StreamSeq: adm.Entry + 1, Leave: true, Entry: adm.Entry, User: adm.User, At: time.Now()})
		w.replayAdmissions(adm)
		w.start(hooks{})
		id := w.publishRequest(tok, "", adm.ReadyAt)
		testenv.Eventually(t, 20*time.Second, func() bool { return w.order(id).Status.Final() }, "order final")
		if o := w.order(id); o.Status != orders.Rejected || o.Reason != orders.ReasonTokenLeft || w.stock() != 10 {
			t.Fatalf("order %s (%s), stock %d: want REJECTED token_left, stock 10", o.Status, o.Reason, w.stock())
		}
	})
}
