package orders_test

import (
	"context"
	"maps"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"usher/internal/orders"
	"usher/internal/testenv"
)

// Outcome counts are per queue and per final status, one per order however
// often it is finished; a queue with no finished order has none.
func TestOutcomeCounts(t *testing.T) {
	ctx := context.Background()
	r := orders.NewRecords(testenv.Redis(t))
	q, other := testenv.Name(t), testenv.Name(t)+"-other"
	finished := []struct {
		id     string
		status orders.Status
	}{
		{"o1", orders.Paid}, {"o2", orders.Paid}, {"o3", orders.Failed}, {"o4", orders.Rejected},
		{"o1", orders.Paid}, {"o3", orders.Failed}, // finished again: counted once
	}
	for _, f := range finished {
		if err := r.CountOutcome(ctx, q, f.id, f.status); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.CountOutcome(ctx, other, "o1", orders.Paid); err != nil {
		t.Fatal(err)
	}
	got, err := r.Outcomes(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	want := map[orders.Status]int64{orders.Paid: 2, orders.Failed: 1, orders.Rejected: 1}
	if !maps.Equal(got, want) {
		t.Errorf("Outcomes(%q) = %v, want %v", q, got, want)
	}
	got, err = r.Outcomes(ctx, "never-"+q)
	if err != nil || len(got) != 0 {
		t.Errorf("Outcomes of an unused queue = %v, %v, want empty, nil", got, err)
	}
}

// roundTrips counts a client's round trips to Redis: one per command sent
// alone, one per pipeline.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { r.n.Add(1); return next(ctx, cmd) }
}
func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { r.n.Add(1); return next(ctx, cmds) }
}

// A final order's record and its outcome count are written in one round
// trip (PutFinal), with what Put and CountOutcome each promise: the record
// as the store has it, the outcome counted once however often the order is
// finished. A Redis that lost its scripts is sent their text.
func TestPutFinalWritesTheRecordAndCountsInOneRoundTrip(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	trips := &roundTrips{}
	rdb.AddHook(trips)
	r := orders.NewRecords(rdb)
	q := testenv.Name(t)
	final := func(n string, st orders.Status) orders.Record {
		id := orders.ID(q + n)
		return orders.Record{ID: id, Owner: "alice", Fingerprint: orders.Fingerprint("sku", 1), Queue: q, SKU: "sku",
			Quantity: 1, Status: st, PaymentID: "pay_" + n}
	}

	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	first := final("1", orders.Paid)
	if countErr, err := r.PutFinal(ctx, first); countErr != nil || err != nil {
		t.Fatalf("PutFinal with no script loaded = %v, %v", countErr, err)
	}

	tests := []struct {
		name string
		rec  orders.Record
	}{
		{"another order", final("2", orders.Paid)},
		{"a failed one", final("3", orders.Failed)},
		{"the first again (a redelivery)", first},
	}
	for _, tt := range tests {
		trips.n.Store(0)
		if countErr, err := r.PutFinal(ctx, tt.rec); countErr != nil || err != nil {
			t.Fatalf("%s: PutFinal = %v, %v", tt.name, countErr, err)
		}
		if got := trips.n.Load(); got != 1 {
			t.Errorf("%s: PutFinal took %d round trips, want 1", tt.name, got)
		}
		if got, ok, err := r.Get(ctx, tt.rec.ID); err != nil || !ok || got != tt.rec {
			t.Errorf("%s: Get = %+v, %v, %v, want %+v", tt.name, got, ok, err, tt.rec)
		}
	}
	got, err := r.Outcomes(ctx, q)
	want := map[orders.Status]int64{orders.Paid: 2, orders.Failed: 1}
	if err != nil || !maps.Equal(got, want) {
		t.Errorf("Outcomes(%q) = %v, %v, want %v", q, got, err, want)
	}
}
