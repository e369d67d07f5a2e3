package admission_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"usher/internal/testenv"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/admission"
	"usher/internal/waitqueue/linetest"
	"usher/internal/waitqueue/roles"
)

// joined is the entry a join of seq by user into q got from Ingest, as the
// gateway holds it when it asks AdmitAtOnce.
func joined(t *testing.T, s *roles.All, q string, seq uint64, user string) waitqueue.Entry {
	t.Helper()
	e, err := s.Ingest(context.Background(), q, epoch, seq, user, 0)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// status is entry seq's status in q now.
func status(t *testing.T, s *roles.All, q string, seq uint64) waitqueue.Status {
	t.Helper()
	e, err := s.Poll(context.Background(), q, seq)
	if err != nil {
		t.Fatal(err)
	}
	return e.Status
}

// limits are the at-once limits of linetest.Tick's queue.
var limits = waitqueue.AtOnce{TokenTTL: 300 * time.Second, TickLength: 20 * time.Millisecond}

// A join into an empty line with a slot free is admitted in its own
// answer once the follower has applied it, and is READY now.
func TestAJoinIntoAnEmptyLineIsAdmittedAtOnce(t *testing.T) {
	s, q := linetest.New(t)
	testenv.Tick(t, s, q, linetest.Tick(5)) // the last tick: the line is current, 5 slots
	e := joined(t, s, q, 1, "ann")
	testenv.Applied(t, s, q, epoch, 1)
	got, err := s.AdmitAtOnce(context.Background(), s, admission.Join{Queue: q, Epoch: epoch, Entry: e, Admits: true, Limits: limits})
	if err != nil || !got.ReadyNow || got.Entry.Status != waitqueue.Admitted || got.Entry.Seq != 1 {
		t.Fatalf("AdmitAtOnce = %+v, %v; want entry 1 admitted, ready now", got, err)
	}
}

// Nobody is admitted at once before the follower has applied the join
// (every join before it is in line then): the call waits for it, and is
// answered as soon as it has.
func TestAJoinAdmittedAtOnceWaitsForTheFollower(t *testing.T) {
	s, q := linetest.New(t)
	testenv.Tick(t, s, q, linetest.Tick(5))
	e := joined(t, s, q, 1, "ann")
	done := make(chan admission.Outcome, 1)
	go func() {
		got, err := s.AdmitAtOnce(context.Background(), s, admission.Join{Queue: q, Epoch: epoch, Entry: e, Admits: true,
			Limits: limits, Wait: 30 * time.Second})
		if err != nil {
			t.Error(err)
		}
		done <- got
	}()
	if st := status(t, s, q, 1); st != waitqueue.Waiting {
		t.Fatalf("before the follower applied the join it is %s, want waiting", st)
	}
	testenv.Applied(t, s, q, epoch, 1)
	select {
	case got := <-done:
		if !got.ReadyNow || got.Entry.Status != waitqueue.Admitted {
			t.Fatalf("AdmitAtOnce = %+v; want admitted, ready now", got)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("AdmitAtOnce still waits after the follower applied the join")
	}
}

// When the follower does not apply the join within the wait, the join is
// answered as it is, and the next tick admits it: a wait, not an error.
func TestAJoinTheFollowerHasNotAppliedIsLeftToTheTick(t *testing.T) {
	s, q := linetest.New(t)
	testenv.Tick(t, s, q, linetest.Tick(5))
	e := joined(t, s, q, 1, "ann")
	got, err := s.AdmitAtOnce(context.Background(), s, admission.Join{Queue: q, Epoch: epoch, Entry: e, Admits: true,
		Limits: limits, Wait: 50 * time.Millisecond})
	if err != nil || got.ReadyNow || !reflect.DeepEqual(got.Entry, e) {
		t.Fatalf("AdmitAtOnce = %+v, %v; want the join as it was, no error", got, err)
	}
	if st := status(t, s, q, 1); st != waitqueue.Waiting {
		t.Fatalf("the join is %s, want waiting for the tick", st)
	}
}

// Only a join that is alone in line is admitted at once (no crowd, no
// wait), and only while the queue admits; anyone else waits for the
// ticks.
func TestOnlyAJoinAloneInAnAdmittingQueueIsAdmittedAtOnce(t *testing.T) {
	tests := []struct {
		name   string
		seq    uint64 // the join asking, after u1..u<seq-1>
		admits bool
	}{
		{"second in line", 2, true},
		{"alone, in a queue that does not admit", 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, q := linetest.New(t)
			testenv.Tick(t, s, q, linetest.Tick(5))
			var e waitqueue.Entry
			for seq := uint64(1); seq <= tt.seq; seq++ {
				e = joined(t, s, q, seq, linetest.Users(int(seq))[seq-1])
			}
			testenv.Applied(t, s, q, epoch, tt.seq)
			got, err := s.AdmitAtOnce(context.Background(), s, admission.Join{Queue: q, Epoch: epoch, Entry: e, Admits: tt.admits,
				Limits: limits})
			if err != nil || got.ReadyNow || !reflect.DeepEqual(got.Entry, e) {
				t.Fatalf("AdmitAtOnce = %+v, %v; want the join as it was", got, err)
			}
			if st := status(t, s, q, tt.seq); st != waitqueue.Waiting {
				t.Fatalf("the join is %s, want waiting", st)
			}
		})
	}
}

// A passthrough queue admits every join at once, whatever its place and
// whatever the follower applied: nobody waits there.
func TestAPassthroughJoinIsAdmittedWhateverItsPlace(t *testing.T) {
	s, q := linetest.New(t)
	testenv.Tick(t, s, q, linetest.Tick(5))
	joined(t, s, q, 1, "ann")
	e := joined(t, s, q, 2, "ben") // second in line, and no join applied
	got, err := s.AdmitAtOnce(context.Background(), s, admission.Join{Queue: q, Epoch: epoch, Entry: e, Passthrough: true,
		Admits: true, Limits: limits})
	if err != nil || !got.ReadyNow || got.Entry.Status != waitqueue.Admitted || got.Entry.Seq != 2 {
		t.Fatalf("AdmitAtOnce = %+v, %v; want entry 2 admitted, ready now", got, err)
	}
	if st := status(t, s, q, 1); st != waitqueue.Waiting {
		t.Fatalf("entry 1 is %s, want waiting: only the join asking is admitted", st)
	}
}

// While a guard only a tick lifts holds — here the last tick's readyAt
// lies ahead, and a join admitted now would be READY before the one
// admitted ahead of it — the join is tried again until the guard lifts,
// within the wait; past it, the join is left to the next tick.
func TestAJoinAtOnceIsTriedAgainUntilTheLineIsCurrent(t *testing.T) {
	for _, wait := range []time.Duration{30 * time.Second, 50 * time.Millisecond} {
		t.Run(wait.String(), func(t *testing.T) {
			ctx := context.Background()
			s, q := linetest.New(t)
			linetest.ApplyKind(t, s, q, 0, waitqueue.InLine, 1)
			// One-second ticks whose readyAt falls at the end of the tick:
			// u1 is READY 999 ms after the tick.
			slow := waitqueue.Tick{Epoch: epoch, TargetActive: 5, TickLength: time.Second, TokenTTL: time.Minute, Offset: 999}
			if r := testenv.Tick(t, s, q, slow); r.Admitted != 1 {
				t.Fatalf("the tick admitted %d, want u1", r.Admitted)
			}
			first, err := s.Poll(ctx, q, 1)
			if err != nil {
				t.Fatal(err)
			}
			e := joined(t, s, q, 2, "u2")
			testenv.Applied(t, s, q, epoch, 2)
			got, err := s.AdmitAtOnce(ctx, s, admission.Join{Queue: q, Epoch: epoch, Entry: e, Admits: true,
				Limits: waitqueue.AtOnce{TokenTTL: time.Minute, TickLength: time.Second}, Wait: wait})
			if err != nil {
				t.Fatal(err)
			}
			if wait < time.Second {
				if got.ReadyNow || !reflect.DeepEqual(got.Entry, e) {
					t.Fatalf("AdmitAtOnce within %v = %+v; want the join as it was, for the tick", wait, got)
				}
				return
			}
			if !got.ReadyNow || got.Entry.Status != waitqueue.Admitted || got.Entry.ReadyAt.Before(first.ReadyAt) {
				t.Fatalf("AdmitAtOnce = %+v; want u2 admitted, READY no earlier than u1 (%v)", got, first.ReadyAt)
			}
		})
	}
}
