package line_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/linetest"
)

func TestRanksReadsManyPlacesAndTheAdmissionCountAtOnce(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	linetest.JoinAll(t, s, q, linetest.Users(5)...)
	testenv.Tick(t, s, q, linetest.Tick(2))
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

// Before a scheduled drop's draw, a poll of any entry but a pre-queued one
// and the notifier's ranks count the line by one rule (undrawn.lib.lua): the
// pre-queue still to be drawn is in its length — for an admitted shopper,
// who heads it until READY, and a join not applied yet, at its back, as
// for those in it — and ahead of every join since the opening. The ranks
// counted it for everyone and a poll only for those in line: an admitted
// shopper's stream said 1 of 5 while their poll said 1 of 2.
func TestPollsAndRanksCountTheUndrawnPreQueueAlike(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	linetest.ApplyKind(t, s, q, 0, waitqueue.InLine, 1)
	if r := testenv.Tick(t, s, q, linetest.Tick(1)); r.Admitted != 1 {
		t.Fatalf("tick = %+v, want 1 admitted", r)
	}
	linetest.ApplyKind(t, s, q, 1, waitqueue.PreQueue, 2, 3, 4)
	linetest.ApplyKind(t, s, q, 4, waitqueue.Priority, 5)
	linetest.ApplyKind(t, s, q, 5, waitqueue.InLine, 6)
	r, err := s.Ranks(ctx, q, []uint64{5, 6})
	if err != nil {
		t.Fatal(err)
	}
	if r.Waiting != 5 || !slices.Equal(r.Rank, []int64{0, 4}) {
		t.Fatalf("Ranks = %d waiting, ranks %v; want 5, [0 4] (invited first, then the 3 pre-queued, then 6)", r.Waiting, r.Rank)
	}
	tests := []struct {
		seq    uint64
		status waitqueue.Status
		rank   int64
	}{
		{1, waitqueue.Admitted, -1},
		{5, waitqueue.Waiting, 0},
		{6, waitqueue.Waiting, 4},
		{99, waitqueue.Unknown, -1}, // not applied yet
	}
	for _, tt := range tests {
		e, err := s.Poll(ctx, q, tt.seq)
		if err != nil {
			t.Fatal(err)
		}
		if e.Status != tt.status || e.Waiting != r.Waiting || e.Position != tt.rank+1 {
			t.Errorf("Poll(%d) = %s, position %d of %d; want %s, position %d of %d (the ranks' line)",
				tt.seq, e.Status, e.Position, e.Waiting, tt.status, tt.rank+1, r.Waiting)
		}
	}
}

// Before the draw the pre-queue counts in the line as the draw will place
// it — behind those allowed past the line, ahead of every join since the
// opening — in the ranks the notifier pushes as a poll answers them: a join
// in the second between the opening and the draw was pushed "1 of 1".
func TestRanksCountTheUndrawnPreQueueAheadOfLaterJoins(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	linetest.ApplyKind(t, s, q, 0, waitqueue.PreQueue, 1, 2, 3)
	linetest.ApplyKind(t, s, q, 3, waitqueue.Priority, 4)
	linetest.ApplyKind(t, s, q, 4, waitqueue.InLine, 5, 6)
	r, err := s.Ranks(ctx, q, []uint64{1, 4, 5, 6})
	if err != nil {
		t.Fatal(err)
	}
	if r.Waiting != 6 || fmt.Sprint(r.Rank) != "[-1 0 4 5]" {
		t.Fatalf("Ranks before the draw = %d waiting, ranks %v; want 6, [-1 0 4 5] (pre-queued: none yet; invited first; later joins behind the 3 pre-queued)", r.Waiting, r.Rank)
	}
	for seq, want := range map[uint64]int64{4: 1, 5: 5, 6: 6} {
		if e, err := s.Poll(ctx, q, seq); err != nil || e.Position != want || e.Waiting != 6 {
			t.Fatalf("Poll(%d) before the draw = %+v, %v; want position %d of 6", seq, e, err, want)
		}
	}
	_, _, version, err := s.PreQueue(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Draw(ctx, q, epoch, version, []uint64{2, 3, 1}, "d"); err != nil {
		t.Fatal(err)
	}
	if r, err = s.Ranks(ctx, q, []uint64{2, 3, 1, 4, 5, 6}); err != nil || r.Waiting != 6 || fmt.Sprint(r.Rank) != "[1 2 3 0 4 5]" {
		t.Fatalf("Ranks after the draw = %+v, %v; want 6 waiting, ranks [1 2 3 0 4 5]: nobody moved", r, err)
	}
}
