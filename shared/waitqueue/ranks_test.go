package waitqueue_test

import (
	"context"
	"slices"
	"testing"
	"usher/shared/testenv"
)

func TestRanksReadsManyPlacesAndTheAdmissionCountAtOnce(t *testing.T) {
	s, q := newStore(t)
	ctx := context.Background()
	joinAll(t, s, q, users(5)...)
	testenv.Tick(t, s, q, tick(2))
	got, err := s.Ranks(ctx, q, []uint64{5, 1, 3, 99})
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{2, -1, 0, -1}; !slices.Equal(got.Rank, want) {
		t.Errorf("Ranks(5,1,3,99).Rank = %v, want %v (admitted and unknown are -1)", got.Rank, want)
	}
	if got.Waiting != 3 || got.AdmittedTotal != 2 || got.Rate <= 0 {
		t.Errorf("Ranks = %+v, want 3 waiting, 2 admitted, a measured rate", got)
	}
	empty, err := s.Ranks(ctx, q+"-none", nil)
	if err != nil || empty.Waiting != 0 || empty.AdmittedTotal != 0 || len(empty.Rank) != 0 {
		t.Errorf("Ranks(empty queue) = %+v, %v, want zeros", empty, err)
	}
}
