package event_test

import (
	"errors"
	"slices"
	"testing"
	"time"

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

// An enter subject carries one join (usher.joined.v1) or several
// (usher.joins.v2, in their order); a joins message listing none is an
// error, which a reader applies as nothing.
func TestUnmarshalEnter(t *testing.T) {
	at := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	v1, err := event.Marshal("demo/alice/0", event.TypeJoined, "alice", at, event.Joined{Queue: "demo", User: "alice", JoinedAt: at})
	if err != nil {
		t.Fatal(err)
	}
	_, joins, grouped, err := event.UnmarshalEnter(v1, nil)
	if err != nil || grouped || len(joins) != 1 || joins[0].User != "alice" {
		t.Errorf("UnmarshalEnter(v1) = %v, %v, %v; want alice alone, not grouped", joins, grouped, err)
	}
	listed := []event.Join{{User: "bob", JoinedAt: at, Prev: 17}, {User: "carol", JoinedAt: at, PreQueue: true}, {User: "bob", JoinedAt: at, Prev: 17}}
	v2, err := event.Marshal("joins/demo/gw/1", event.TypeJoins, "demo", at, event.Joins{Queue: "demo", Joins: listed})
	if err != nil {
		t.Fatal(err)
	}
	_, joins, grouped, err = event.UnmarshalEnter(v2, joins)
	if err != nil || !grouped || len(joins) != len(listed) {
		t.Fatalf("UnmarshalEnter(v2) = %v, %v, %v; want %d grouped joins", joins, grouped, err, len(listed))
	}
	for i, j := range joins {
		if want := listed[i].Joined("demo"); j != want {
			t.Errorf("join %d = %+v, want %+v", i, j, want)
		}
	}
	empty, err := event.Marshal("joins/demo/gw/2", event.TypeJoins, "demo", at, event.Joins{Queue: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	if _, joins, _, err := event.UnmarshalEnter(empty, nil); !errors.Is(err, event.ErrJoins) {
		t.Errorf("UnmarshalEnter(no joins) = %v, %v; want ErrJoins", joins, err)
	}
	left, err := event.Marshal("x", event.TypeLeft, "alice", at, event.Left{Queue: "demo", User: "alice", Seq: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := event.UnmarshalEnter(left, nil); !errors.Is(err, event.ErrType) {
		t.Errorf("UnmarshalEnter(a leave) = %v, want ErrType", err)
	}
}

// A reader of a queue's enter messages in stream order learns where places
// count in groups from the first usher.joins.v2 message it is shown: a
// join before it keeps its sequence, every one after it (a usher.joined.v1
// one too) is placed in groups, and the bound follows.
func TestPlacesLearnTheSwitchFromTheFirstGroup(t *testing.T) {
	var p event.Places
	steps := []struct {
		seq     uint64
		index   int
		grouped bool
		want    uint64
	}{
		{1, 0, false, 1},
		{2, 0, false, 2},
		{4, 0, true, 4 * event.MaxJoins},
		{4, 1, true, 4*event.MaxJoins + 1},
		{6, 0, false, 6 * event.MaxJoins},
		{7, 2, true, 7*event.MaxJoins + 2},
	}
	for _, s := range steps {
		if got := p.Of(s.seq, s.index, s.grouped); got != s.want {
			t.Errorf("Of(%d, %d, %v) = %d, want %d", s.seq, s.index, s.grouped, got, s.want)
		}
	}
	if p.Since() != 4 || p.Bound(3) != 3 || p.Bound(7) != event.PlaceBound(7, 4) {
		t.Errorf("Since %d, Bound(3) %d, Bound(7) %d; want 4, 3, %d", p.Since(), p.Bound(3), p.Bound(7), event.PlaceBound(7, 4))
	}
}
