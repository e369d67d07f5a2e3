package admission_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"usher/internal/testenv"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/linetest"
)

// An admitter that comes late — a busy host, a slow call before the
// script — costs no admissions: the ticks it missed are due at once after
// the late one, so the queue keeps its configured rate. A schedule that
// dropped them admitted 25 fewer per 250 ms stall here (a third of it).
func TestALateAdmitterKeepsTheConfiguredRate(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	linetest.JoinAll(t, s, q, linetest.Users(1000)...)
	tk := linetest.Tick(1000)
	tk.TickLength, tk.MaxAdmitPerTick = 50*time.Millisecond, 5
	total, calls := 0, 0
	start := time.Now()
	var last time.Time
	for time.Since(start) < 2*time.Second {
		r, err := s.Admit(ctx, q, tk)
		if err != nil {
			t.Fatal(err)
		}
		last = time.Now()
		total += r.Admitted
		calls++
		wait := max(r.Next, time.Millisecond)
		if calls%10 == 0 {
			wait += 250 * time.Millisecond // stalled, five ticks' worth
		}
		time.Sleep(wait)
	}
	// Every 50 ms tick of 5 due by the last call, give or take the stall
	// the last calls may have been catching up from.
	took := last.Sub(start)
	want := (int(took/tk.TickLength) + 1) * 5
	if total < want-30 || total > want+5 {
		t.Fatalf("admitted %d in %v with a stall every tenth call, want %d (the configured rate)", total, took.Round(time.Millisecond), want)
	}
}

// An admitter back after a long absence (every admitter stopped for
// seconds) does not admit the whole absence's worth at once: half a second
// of missed ticks at most.
func TestALongAbsenceIsNotAdmittedInABurst(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	linetest.JoinAll(t, s, q, linetest.Users(1000)...)
	tk := linetest.Tick(1000)
	tk.TickLength, tk.MaxAdmitPerTick = 50*time.Millisecond, 5
	if _, err := s.Admit(ctx, q, tk); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	total, start := 0, time.Now()
	for range 40 { // as fast as it can: only what is due admits
		r, err := s.Admit(ctx, q, tk)
		if err != nil {
			t.Fatal(err)
		}
		total += r.Admitted
		if r.Early {
			break
		}
	}
	// Half a second of missed ticks, and the ticks that fell due while
	// the loop ran (many on a loaded machine).
	catchUp := 5 * (500/50 + 1)
	if meanwhile := 5 * (int(time.Since(start)/tk.TickLength) + 1); total > catchUp+meanwhile {
		t.Fatalf("admitted %d at once after 2 s away, want at most half a second of ticks (%d) and the %d due meanwhile",
			total, catchUp, meanwhile)
	}
}

// Ticks that catch up after a stall run back to back: readyAt still never
// goes back from one tick to the next, so nobody behind in line is READY
// before someone ahead (the audit's lottery-order check would report a
// later place READY even a few ms before an earlier one).
func TestReadyAtNeverGoesBackWhenTicksCatchUp(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	linetest.JoinAll(t, s, q, "a1", "a2", "a3", "b1", "b2", "b3", "c1", "c2", "c3")
	tk := waitqueue.Tick{Epoch: epoch, TargetActive: 3, TickLength: 200 * time.Millisecond, TokenTTL: time.Minute}
	testenv.Tick(t, s, q, tk)
	time.Sleep(tk.TickLength + 600*time.Millisecond) // the admitter stalled: its next tick is long overdue
	tk.TargetActive = 6
	testenv.Tick(t, s, q, tk) // catches up: the one after may run at once
	tk.TargetActive = 9
	testenv.Tick(t, s, q, tk)
	var prev time.Time
	for seq := uint64(1); seq <= 9; seq++ {
		e, err := s.Poll(ctx, q, seq)
		if err != nil || e.Status != waitqueue.Admitted {
			t.Fatalf("entry %d = %+v, %v, want admitted", seq, e, err)
		}
		if e.ReadyAt.Before(prev) {
			t.Errorf("entry %d is READY at %v, before entry %d ahead of it (%v)", seq, e.ReadyAt, seq-1, prev)
		}
		prev = e.ReadyAt
	}
}

// A join admitted at once, outside the ticks, is not READY before those the
// ticks admitted ahead of it: after catch-up ticks their readyAt lies ahead
// of Redis's clock, and a join into the emptied line admitted at once
// would otherwise be READY first. Admission at
// once waits for the ticks' last readyAt to pass (ErrNotCurrent until then);
// what it admits is READY at once, never before the others.
func TestAJoinAdmittedAtOnceIsNotReadyBeforeThoseAheadOfIt(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	linetest.JoinAll(t, s, q, "a1", "a2", "a3", "b1", "b2", "b3")
	tk := waitqueue.Tick{Epoch: epoch, TargetActive: 3, TickLength: 200 * time.Millisecond, TokenTTL: time.Minute}
	testenv.Tick(t, s, q, tk)
	time.Sleep(tk.TickLength + 600*time.Millisecond)
	tk.TargetActive = 10
	testenv.Tick(t, s, q, tk) // catches up: b3's readyAt lies ahead of now
	last, err := s.Poll(ctx, q, 6)
	if err != nil || last.Status != waitqueue.Admitted {
		t.Fatalf("entry 6 = %+v, %v, want admitted", last, err)
	}
	if _, err := s.ApplyEntries(ctx, q, epoch, 6, []waitqueue.EntryEvent{{StreamSeq: 7, User: "c1"}}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.AdmitNow(ctx, q, epoch, waitqueue.AtOnce{TokenTTL: time.Minute, TickLength: tk.TickLength}); !errors.Is(err, waitqueue.ErrNotCurrent) || len(got) != 0 {
		t.Fatalf("AdmitNow while b3's readyAt lies ahead = %v, %v, want ErrNotCurrent", got, err)
	}
	time.Sleep(time.Until(last.ReadyAt) + 10*time.Millisecond)
	got, err := s.AdmitNow(ctx, q, epoch, waitqueue.AtOnce{TokenTTL: time.Minute, TickLength: tk.TickLength})
	if err != nil || len(got) != 1 || got[0] != 7 {
		t.Fatalf("AdmitNow once b3's readyAt passed = %v, %v, want [7]", got, err)
	}
	e, err := s.Poll(ctx, q, 7)
	if err != nil {
		t.Fatal(err)
	}
	if e.ReadyAt.Before(last.ReadyAt) {
		t.Errorf("c1, admitted at once, is READY at %v, %v before b3 ahead of it", e.ReadyAt, last.ReadyAt.Sub(e.ReadyAt))
	}
}
