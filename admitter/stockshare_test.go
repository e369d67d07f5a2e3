package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"usher/internal/orders"
	"usher/internal/testenv"
)

// Two queues selling one SKU share its units: ten in the store, fifteen
// shoppers in each line, and no more than ten of the thirty are admitted
// between both queues — each queue counts what the other's shoppers hold.
// Each queue admitted ten on its own count, twenty READY for ten units.
// And nothing is lost by sharing: all ten units go to someone.
func TestTwoQueuesSellingOneSKUNeverAdmitBeyondItsUnits(t *testing.T) {
	ctx := context.Background()
	db := testenv.PostgresURL(t)
	store, err := orders.Open(db, orders.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	sku := "shared-" + testenv.Name(t)
	if _, err := store.SetStock(ctx, sku, 10); err != nil {
		t.Fatal(err)
	}
	c := cfg(20, 20, 300)
	c.SKU = sku
	a := newWorld(t, c)
	b := newWorldOn(t, a, c)
	a.dbURL = db
	for i := range 15 {
		a.join(fmt.Sprintf("a%d", i))
		b.join(fmt.Sprintf("b%d", i))
	}
	a.start(hooks{})

	held := func() (int64, int64) {
		sa, err := a.line.Stats(ctx, a.queue)
		if err != nil {
			t.Fatal(err)
		}
		sb, err := b.line.Stats(ctx, b.queue)
		if err != nil {
			t.Fatal(err)
		}
		return sa.Active, sb.Active
	}
	testenv.Eventually(t, 15*time.Second, func() error {
		na, nb := held()
		if na+nb > 10 {
			t.Fatalf("%d admitted in %s and %d in %s: %d for 10 units", na, a.queue, nb, b.queue, na+nb)
		}
		if na+nb < 10 {
			return fmt.Errorf("%d + %d admitted", na, nb)
		}
		return nil
	}, "all ten units admitted between the two queues")
	// Ticks go on: nobody more is admitted for units that are held.
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if na, nb := held(); na+nb != 10 {
			t.Fatalf("%d + %d admitted, want 10 for 10 units", na, nb)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
