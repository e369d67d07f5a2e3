package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"usher/internal/orders"
	"usher/internal/testenv"
)

// A Redis that lost everything (FLUSHALL) lost the order records too,
// which the streams do not rebuild: a PAID order's GET read 404 for the
// record's day, and a resubmit of its token stayed PENDING. The workers put
// them back from PostgreSQL within seconds, and a PENDING record a resubmit
// made meanwhile becomes the order's final one.
func TestOrderRecordsComeBackAfterRedisLosesThem(t *testing.T) {
	w := newWorld(t, queueCfg(20), 5, 5)
	toks := w.admit(2)
	w.start(hooks{})
	paid, resubmitted := w.request(toks[0], ""), w.request(toks[1], "")
	w.waitFinal(20*time.Second, paid, resubmitted)
	ctx := context.Background()
	if err := w.rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// The shopper submits again after the loss: the gateway finds no
	// record and makes a PENDING one.
	o := w.order(resubmitted)
	pending := orders.Record{ID: o.ID, Owner: o.User, Fingerprint: orders.Fingerprint(o.SKU, o.Quantity),
		Queue: o.Queue, SKU: o.SKU, Quantity: o.Quantity}
	if out, _, err := w.records.Create(ctx, pending); err != nil || out != orders.Created {
		t.Fatalf("a resubmit after the loss = %s, %v; want a new PENDING record", out, err)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		for _, id := range []string{paid, resubmitted} {
			want := orders.RecordOf(w.order(id))
			got, ok, err := w.records.Get(ctx, id)
			if err != nil {
				return err
			}
			if !ok || got != want {
				return fmt.Errorf("record of %s = %+v (found %v), want %+v", id, got, ok, want)
			}
		}
		return nil
	}, "the order records did not come back after FLUSHALL")
	if want := orders.Paid; orders.RecordOf(w.order(paid)).Status != want {
		t.Fatalf("order %s is %s in the store, want %s", paid, w.order(paid).Status, want)
	}
}
