package main

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"usher/internal/paybreaker"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
)

// Back-pressure: while the payment breaker is open nobody is admitted;
// once it closes admission resumes.
func TestAdmissionPausesWhileThePaymentBreakerIsOpen(t *testing.T) {
	w := newWorld(t, cfg(5, 20, 300))
	shared := paybreaker.New(testenv.Redis(t))
	ctx := context.Background()
	if err := shared.MarkOpen(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shared.MarkClosed(context.Background()) })
	first := w.join("alice")
	var ticks atomic.Int64
	w.start(hooks{afterAdmit: func(string) error { ticks.Add(1); return nil }})
	testenv.Eventually(t, 5*time.Second, func() bool { return w.status(first) == waitqueue.Waiting }, "alice in line")
	second := w.join("bob")
	testenv.Eventually(t, 5*time.Second, func() bool { return w.status(second) == waitqueue.Waiting }, "bob in line")
	// Several whole ticks run with both in line and the watermark past them;
	// not one of them may admit.
	seen := ticks.Load()
	testenv.Eventually(t, 5*time.Second, func() bool { return ticks.Load() >= seen+5 }, "five more ticks")
	if st, _ := w.line.Stats(ctx, w.queue); st.Active != 0 || st.AdmittedTotal != 0 {
		t.Fatalf("while the breaker is open: %+v, want nobody admitted", st)
	}
	if got := len(w.admissions()); got != 0 {
		t.Fatalf("admissions while the breaker is open = %d, want 0", got)
	}
	shared.MarkClosed(ctx)
	testenv.Eventually(t, 5*time.Second, func() bool { return len(w.admissions()) == 2 }, "2 admissions after the breaker closed")
}
