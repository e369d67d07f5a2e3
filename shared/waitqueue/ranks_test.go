package waitqueue_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

func TestRanksReadsManyPlacesAndTheAdmissionCountAtOnce(t *testing.T) {
	s, q := newStore(t)
	ctx := context.Background()
	for i := 1; i <= 5; i++ {
		if _, err := s.Ingest(ctx, q, uint64(i), fmt.Sprintf("u%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Admit(ctx, q, tick(time.Now(), 2)); err != nil {
		t.Fatal(err)
	}
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
