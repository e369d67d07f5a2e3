package waitqueue_test

import (
	"context"
	"testing"
	"time"
)

// An admitter that comes late — a busy host, a slow call before the
// script — costs no admissions: the ticks it missed are due at once after
// the late one, so the queue keeps its configured rate. A schedule that
// dropped them admitted 25 fewer per 250 ms stall here (a third of it).
func TestALateAdmitterKeepsTheConfiguredRate(t *testing.T) {
	s, q := newStore(t)
	ctx := context.Background()
	joinAll(t, s, q, users(1000)...)
	tk := tick(1000)
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
	s, q := newStore(t)
	ctx := context.Background()
	joinAll(t, s, q, users(1000)...)
	tk := tick(1000)
	tk.TickLength, tk.MaxAdmitPerTick = 50*time.Millisecond, 5
	if _, err := s.Admit(ctx, q, tk); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	total := 0
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
	if total > 5*(500/50+2) {
		t.Fatalf("admitted %d at once after 2 s away, want at most half a second of ticks (%d)", total, 5*(500/50+1))
	}
}
