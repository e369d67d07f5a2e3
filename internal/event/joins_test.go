package event_test

import (
	"slices"
	"testing"

	"usher/internal/event"
)

// Places grow with the stream's order — the sequence, then the index in a
// message — across the switch to grouped joins, whichever version wrote
// each message, and every place given before the switch keeps its value.
func TestPlacesFollowTheStreamAcrossTheSwitchToGroups(t *testing.T) {
	const since = 5 // the stream's first usher.joins.v2 message
	type msg struct {
		seq   uint64
		joins int
	}
	stream := []msg{{1, 1}, {2, 1}, {4, 1}, {5, 3}, {6, 1}, {7, 1024}, {8, 1}}
	var places []uint64
	for _, m := range stream {
		for i := range m.joins {
			places = append(places, event.Place(m.seq, i, since))
		}
	}
	if !slices.IsSorted(places) || len(slices.Compact(slices.Clone(places))) != len(places) {
		t.Fatalf("places %v…: want strictly growing", places[:8])
	}
	for _, seq := range []uint64{1, 2, 4} {
		if got := event.Place(seq, 0, since); got != seq {
			t.Errorf("Place(%d, 0) before the switch = %d, want %d (as before it)", seq, got, seq)
		}
		if got := event.Place(seq, 0, 0); got != seq {
			t.Errorf("Place(%d, 0) with no group yet = %d, want %d", seq, got, seq)
		}
	}
	for _, m := range stream {
		bound := event.PlaceBound(m.seq, since)
		for i := range m.joins {
			if p := event.Place(m.seq, i, since); p > bound {
				t.Errorf("Place(%d, %d) = %d beyond PlaceBound(%d) = %d", m.seq, i, p, m.seq, bound)
			}
		}
		if next := event.Place(m.seq+1, 0, since); next <= bound {
			t.Errorf("Place(%d, 0) = %d within PlaceBound(%d) = %d", m.seq+1, next, m.seq, bound)
		}
	}
	if p := event.Place(event.MaxPlaceSeq, event.MaxJoins-1, 1); p >= 1<<53 {
		t.Errorf("the highest place %d is not exact in a float64", p)
	}
}

// A joins message lists 1 to MaxJoins joins.
func TestJoinsValidate(t *testing.T) {
	for n, ok := range map[int]bool{0: false, 1: true, event.MaxJoins: true, event.MaxJoins + 1: false} {
		js := event.Joins{Queue: "demo", Joins: make([]event.Join, n)}
		if err := js.Validate(); (err == nil) != ok {
			t.Errorf("Validate of %d joins = %v, want ok %v", n, err, ok)
		}
	}
}
