package orders_test

import (
	"context"
	"maps"
	"testing"

	"usher/shared/orders"
	"usher/shared/testenv"
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
