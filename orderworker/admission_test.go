package main

import (
	"context"
	"testing"
	"time"

	"usher/internal/event"
	"usher/internal/keyspace"
	"usher/internal/orders"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
)

// Whoever can write the line in Redis (a stolen gateway Redis password)
// can make it hold an admission the admitter never made, and the gateway
// mints and takes a token for it. The order worker charges an order only
// for a token whose admission USHER_ADMISSIONS recorded: it reads the
// admission back from the stream, where Redis says the stream holds it,
// and finds it there for this token, this user and this queue. An order on
// an admission Redis alone holds is REJECTED token_unconfirmed once its
// deadline passes: no stock taken, no charge.
func TestAnOrderIsChargedOnlyForAnAdmissionTheStreamRecorded(t *testing.T) {
	tests := []struct {
		name  string
		forge func(w *world) string // returns the token ordered with
	}{
		{"an admission in Redis alone", func(w *world) string {
			return w.admitInRedis(1, 5*time.Minute)[0]
		}},
		{"Redis pointing at another shopper's admission on the stream", func(w *world) string {
			honest := w.admit(1)[0]
			forged := w.admitInRedis(1, 5*time.Minute)[0]
			_, _, hseq, _ := waitqueue.ParseTokenID(honest)
			_, _, fseq, _ := waitqueue.ParseTokenID(forged)
			k := keyspace.Of(w.queue)
			ctx := context.Background()
			aseq, err := w.rdb.HGet(ctx, k.Entry(hseq), "aseq").Result()
			if err != nil {
				w.t.Fatalf("the honest admission's place on the stream: %v", err)
			}
			if err := w.rdb.HSet(ctx, k.Entry(fseq), "aseq", aseq).Err(); err != nil {
				w.t.Fatal(err)
			}
			return forged
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, queueCfg(20), 10, 5)
			tok := tt.forge(w)
			w.start(hooks{}, "USHER_ORDER_DEADLINE", "2s")
			id := w.request(tok, "")
			testenv.Eventually(t, 30*time.Second, func() bool { return w.order(id).Status.Final() }, "order %s final", id)
			if o := w.order(id); o.Status != orders.Rejected || o.Reason != orders.ReasonTokenUnconfirmed || w.charges(id) != 0 || w.stock() != 10 {
				t.Fatalf("order %s (%s), %d charge(s), stock %d: want REJECTED token_unconfirmed, no charge, stock 10",
					o.Status, o.Reason, w.charges(id), w.stock())
			}
			if f := w.finished()[id]; f.Status != string(orders.Rejected) || f.Reason != orders.ReasonTokenUnconfirmed {
				t.Fatalf("announced %+v, want the rejection", f)
			}
		})
	}
}

// An order whose token the line admitted a moment before the stream's
// record reached it (the admission announced after the tick, the follower
// applying it after that) waits for the record rather than fail.
func TestAnOrderWaitsForItsAdmissionToReachTheLine(t *testing.T) {
	w := newWorld(t, queueCfg(20), 10, 5)
	tok := w.admitInRedis(1, 5*time.Minute)[0]
	w.start(hooks{})
	id := w.request(tok, "")
	testenv.Eventually(t, 10*time.Second, func() bool {
		c, err := w.js.Consumer(context.Background(), event.StreamOrders, consumerName)
		if err != nil {
			return false
		}
		ci, err := c.Info(context.Background())
		return err == nil && ci.Delivered.Consumer >= 2
	}, "the request taken and put back to wait")
	if !orderMissing(w, id) || w.charges(id) != 0 {
		t.Fatalf("order %s placed or charged before the stream's admission reached the line", id)
	}
	w.record(tok)
	w.waitFinal(30*time.Second, id)
	if o := w.order(id); o.Status != orders.Paid || w.charges(id) != 1 {
		t.Fatalf("order %s (%s), %d charge(s): want PAID once", o.Status, o.Reason, w.charges(id))
	}
}

// orderMissing reports whether the store holds no order id.
func orderMissing(w *world, id string) bool {
	_, found, err := w.db.Get(context.Background(), id)
	if err != nil {
		w.t.Fatal(err)
	}
	return !found
}
