package main

import (
	"context"
	"testing"
	"time"

	"usher/shared/paybreaker"
	"usher/shared/testenv"
	"usher/shared/waitqueue"
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
	w.start(hooks{})
	testenv.Eventually(t, 5*time.Second, func() bool { return w.status(first) == waitqueue.Waiting }, "alice in line")
	// Every tick while open sees her and leaves her waiting; give the admitter
	// a watermark past her join, then check she still waits.
	second := w.join("bob")
	testenv.Eventually(t, 5*time.Second, func() bool { return w.status(second) == waitqueue.Waiting }, "bob in line")
	if got := len(w.admissions()); got != 0 {
		t.Fatalf("admissions while the breaker is open = %d, want 0", got)
	}
	shared.MarkClosed(ctx)
	testenv.Eventually(t, 5*time.Second, func() bool { return len(w.admissions()) == 2 }, "2 admissions after the breaker closed")
}
