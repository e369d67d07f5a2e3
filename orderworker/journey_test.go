package main

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"usher/internal/analytics"
	"usher/internal/keyspace"
	"usher/internal/orders"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
)

// readyAt is the readyAt the line recorded for the token's admission (zero
// when it holds none).
func (w *world) readyAt(tokenID string) time.Time {
	_, _, seq, ok := waitqueue.ParseTokenID(tokenID)
	if !ok {
		return time.Time{}
	}
	ms, err := w.rdb.HGet(context.Background(), keyspace.Of(w.queue).Entry(seq), "readyAt").Int64()
	if err != nil {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// claim takes an order for the token as the gateway does (see request)
// and returns the order id and its request time.
func (w *world) claim(tokenID string) (string, time.Time) {
	w.t.Helper()
	at := w.redeem(tokenID)
	return w.publishRequest(tokenID, "", at), at
}

// Each order the worker finishes is observed once per queue: from its
// request to its final status (by status), and — for an order the token
// could place — from the shopper's READY (the request's tokenReadyAt) to
// the request, with the outcome "ordered". An order refused because its
// token had expired is the expiry's (counted by the admitter), not an
// order. The labels are the queue, the status and the outcome.
func TestTheOrderWorkerObservesEachOrdersJourneyOnce(t *testing.T) {
	w := newWorld(t, queueCfg(20), 1, 5)
	addr := fmt.Sprintf("127.0.0.1:%d", func() int {
		p, err := testenv.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		return p
	}())
	toks := w.admit(2)
	expiring := w.admitFor(1, 50*time.Millisecond)[0]
	time.Sleep(200 * time.Millisecond) // READY a while before ordering
	var ids []string
	var wantWait float64
	for _, tok := range toks { // the one unit: one PAID, one REJECTED (sold out)
		id, at := w.claim(tok)
		ids = append(ids, id)
		wantWait += at.Sub(w.readyAt(tok)).Seconds()
	}
	// The expiring token's tick: it expires unused, and its order (which
	// the gateway would have refused) is rejected by the worker.
	testenv.Tick(t, w.line, w.queue, waitqueue.Tick{Epoch: testenv.Epoch, TargetActive: 1 << 20,
		TickLength: 10 * time.Millisecond, TokenTTL: time.Minute})
	ids = append(ids, w.publishRequest(expiring, "", time.Now()))
	w.start(hooks{}, "USHER_ORDERWORKER_ADDR", addr)
	w.waitFinal(20*time.Second, ids...)
	if o := w.order(ids[2]); o.Status != orders.Rejected || o.Reason != orders.ReasonTokenExpired {
		t.Fatalf("the expired token's order = %s %s, want REJECTED token_expired", o.Status, o.Reason)
	}

	q := map[string]string{"queue": w.queue}
	var v testenv.Values
	testenv.Eventually(t, 10*time.Second, func() bool {
		v = testenv.ScrapeValues(t, "http://"+addr+"/metrics")
		return v.Value(analytics.OrderToFinal, q) == 3
	}, "order → final observed %v times, want 3", v.Value(analytics.OrderToFinal, q))
	paid := map[string]string{"queue": w.queue, "status": string(orders.Paid)}
	rejected := map[string]string{"queue": w.queue, "status": string(orders.Rejected)}
	if p, r := v.Value(analytics.OrderToFinal, paid), v.Value(analytics.OrderToFinal, rejected); p != 1 || r != 2 {
		t.Errorf("order → final: %v PAID, %v REJECTED; want 1 and 2", p, r)
	}
	if s := v.HistogramSum(analytics.OrderToFinal, q); s <= 0 || s > 60 {
		t.Errorf("order → final adds up to %v s", s)
	}
	if n := v.Value(analytics.ReadyToOrder, q); n != 2 {
		t.Errorf("READY → order observed %v times, want 2 (not the expired token's)", n)
	}
	if s := v.HistogramSum(analytics.ReadyToOrder, q); math.Abs(s-wantWait) > 1e-6 || s < 0.4 {
		t.Errorf("READY → order adds up to %.6f s, want %.6f s (requestedAt less the token's readyAt)", s, wantWait)
	}
	if n := v.Value(analytics.Outcomes, map[string]string{"queue": w.queue, "outcome": analytics.Ordered}); n != 2 {
		t.Errorf("outcome ordered = %v, want 2", n)
	}
	for _, name := range []string{analytics.OrderToFinal, analytics.ReadyToOrder, analytics.Outcomes} {
		for _, ls := range v.Labels(name) {
			for k := range ls {
				if k != "queue" && k != "status" && k != "outcome" {
					t.Errorf("%s labelled %v: only queue, status and outcome", name, ls)
				}
			}
		}
	}
	testenv.Scrape(t, "http://"+addr+"/metrics").Check(t, nil, append(append([]string{}, ids...), toks...)...)
}
