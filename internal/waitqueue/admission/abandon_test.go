package admission_test

import (
	"context"
	"testing"
	"time"

	"usher/internal/testenv"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/linetest"
)

// 1,000 wait, 300 go silent. After the timeout the 700
// who are there — 699 whose streams the notifier holds, one who polls —
// hold places 1..700, and the 300 have left, reason abandoned, recorded
// for the stream.
func TestShoppersWhoAreGoneLeaveTheLine(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	linetest.JoinAll(t, s, q, linetest.Users(1000)...) // joining is being there
	const after = 600 * time.Millisecond
	tk := linetest.Tick(0) // nobody admitted: only abandonment
	tk.AbandonAfter = after

	time.Sleep(after / 2)
	var present []uint64
	for seq := uint64(302); seq <= 1000; seq++ {
		present = append(present, seq)
	}
	if err := s.Present(ctx, q, present, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PollPresent(ctx, q, 301, time.Millisecond); err != nil { // one polls
		t.Fatal(err)
	}
	if r := testenv.Tick(t, s, q, tk); r.Abandoned != 0 {
		t.Fatalf("tick before the timeout = %+v, want nobody abandoned", r)
	}
	time.Sleep(after/2 + 100*time.Millisecond)
	r := testenv.Tick(t, s, q, tk)
	if r.Abandoned != 300 || r.Waiting != 700 {
		t.Fatalf("tick after the timeout = %+v, want 300 abandoned, 700 waiting", r)
	}
	for seq := uint64(1); seq <= 1000; seq++ {
		e, err := s.Poll(ctx, q, seq)
		if err != nil {
			t.Fatal(err)
		}
		if seq <= 300 {
			if e.Status != waitqueue.Left || e.Reason != waitqueue.ReasonAbandoned {
				t.Fatalf("seq %d = %s %q, want left, abandoned", seq, e.Status, e.Reason)
			}
			continue
		}
		if e.Status != waitqueue.Waiting || e.Position != int64(seq-300) || e.Waiting != 700 {
			t.Fatalf("seq %d = %s at %d of %d, want waiting at %d of 700", seq, e.Status, e.Position, e.Waiting, seq-300)
		}
	}
	// The leaves wait to be recorded on the entries stream; once they are,
	// the outbox is empty.
	gone, err := s.LeavesToRecord(ctx, q, 1000)
	if err != nil || len(gone) != 300 || gone[0] != (waitqueue.UnrecordedLeave{Seq: 1, User: "u1", Reason: waitqueue.ReasonAbandoned}) {
		t.Fatalf("LeavesToRecord = %d leaves (first %+v), %v; want 300 abandoned from u1", len(gone), gone[0], err)
	}
	if err := s.LeavesRecorded(ctx, q, gone); err != nil {
		t.Fatal(err)
	}
	if gone, _ := s.LeavesToRecord(ctx, q, 1000); len(gone) != 0 {
		t.Fatalf("leaves to record after recording = %d, want 0", len(gone))
	}
	// The recorded leave, applied by the follower, changes nothing; a
	// replay into an empty line leaves them out too.
	evs := make([]waitqueue.EntryEvent, 0, 300)
	for i, g := range gone {
		evs = append(evs, waitqueue.EntryEvent{StreamSeq: uint64(1001 + i), Leave: true, Entry: g.Seq, User: g.User, Reason: waitqueue.ReasonAbandoned})
	}
	if _, err := s.ApplyEntries(ctx, q, epoch, 1000, evs); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.Stats(ctx, q); st.Waiting != 700 {
		t.Fatalf("waiting after the leaves were applied = %d, want 700", st.Waiting)
	}
}

func TestNobodyIsAbandonedBeforeTheDrawNorSoonAfter(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	linetest.ApplyKind(t, s, q, 0, waitqueue.PreQueue, 1, 2, 3)
	const after = 300 * time.Millisecond
	tk := linetest.Tick(0)
	tk.AbandonAfter, tk.AwaitDraw = after, true
	time.Sleep(after + 50*time.Millisecond)
	if r := testenv.Tick(t, s, q, tk); r.Abandoned != 0 {
		t.Fatalf("tick before the draw = %+v, want nobody abandoned", r)
	}
	_, _, version, _ := s.PreQueue(ctx, q)
	if _, err := s.Draw(ctx, q, epoch, version, []uint64{2, 3, 1}, "d"); err != nil {
		t.Fatal(err)
	}
	if r := testenv.Tick(t, s, q, tk); r.Abandoned != 0 {
		t.Fatalf("tick just after the draw = %+v, want nobody abandoned (the drawn get abandonAfter from the draw)", r)
	}
	time.Sleep(after + 50*time.Millisecond)
	if r := testenv.Tick(t, s, q, tk); r.Abandoned != 3 {
		t.Fatalf("tick abandonAfter after the draw = %+v, want the 3 silent ones abandoned", r)
	}
}
