package main

import (
	"context"
	"fmt"
	"log/slog"
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

// A loss during a put-back (Redis flushed after the keeper wrote records,
// before it marked them kept) takes those records too. Marking them kept
// anyway would leave them lost for good, since nothing checks again: the
// keeper sees its put-back's mark gone and puts them back at its next
// check.
func TestALossDuringAPutBackIsPutBackAgain(t *testing.T) {
	w := newWorld(t, queueCfg(20), 5, 5)
	ctx := context.Background()
	o, err := w.db.Place(ctx, orders.Order{ID: "ord_" + w.queue, TokenID: "tok_" + w.queue, Queue: w.queue, User: "ann",
		SKU: w.sku(), Quantity: 1, Deadline: time.Now().Add(time.Minute)})
	if err != nil || o.Status != orders.Pending {
		t.Fatalf("place = %+v, %v; want a pending order", o, err)
	}
	losing := &losingRecords{Records: w.records, lose: func() error { return w.rdb.FlushAll(ctx).Err() }}
	k := &recordKeeper{log: slog.New(slog.DiscardHandler), store: w.db, records: losing, now: time.Now, every: time.Second}

	if err := k.check(ctx); err != nil {
		t.Fatal(err)
	}
	if kept, err := w.records.Kept(ctx); err != nil || kept {
		t.Fatalf("after a put-back that Redis lost midway, kept = %v, %v; want false", kept, err)
	}
	if err := k.check(ctx); err != nil {
		t.Fatal(err)
	}
	got, ok, err := w.records.Get(ctx, o.ID)
	if want := orders.RecordOf(o); err != nil || !ok || got != want {
		t.Fatalf("record after the next check = %+v (found %v, %v), want %+v", got, ok, err, want)
	}
	if kept, err := w.records.Kept(ctx); err != nil || !kept {
		t.Fatalf("after a whole put-back, kept = %v, %v; want true", kept, err)
	}
}

// losingRecords loses everything in Redis once, right after the first
// batch of records is put back.
type losingRecords struct {
	*orders.Records
	lose func() error
	lost bool
}

func (l *losingRecords) PutAll(ctx context.Context, recs []orders.Record) error {
	if err := l.Records.PutAll(ctx, recs); err != nil || l.lost {
		return err
	}
	l.lost = true
	return l.lose()
}
