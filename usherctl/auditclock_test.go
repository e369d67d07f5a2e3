package main

import (
	"strings"
	"testing"
	"time"

	"usher/internal/event"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
)

// An order worker whose clock runs ahead (a slow sample of Redis TIME left
// it so after a Redis failover) dates an order's completion after the slot
// it freed was given to the next shopper. The stream stored the event
// earlier than that — and the worker frees the slot only after the stream
// stored it — so the audit ends the slot then, and finds no slot held that
// Redis never held.
func TestAuditEndsAnOrderWhenTheStreamStoredIt(t *testing.T) {
	w := newWorld(t)
	q := testenv.Name(t)
	w.configured(q, 2, 0)
	var s []uint64
	for _, u := range []string{"u0", "u1", "u2"} {
		s = append(s, w.join(q, u))
	}
	t0 := time.Now()
	w.admit(q, s[0], "u0", t0.Add(-10*time.Second), t0.Add(time.Hour))
	w.admit(q, s[1], "u1", t0.Add(-10*time.Second), t0.Add(time.Hour))
	tok := waitqueue.TokenID(q, w.epoch, s[1])
	w.order(event.TypeOrderRequested, q, tok, "o1", t0.Add(-5*time.Second))
	// Stamped by a clock 10 minutes ahead; stored now.
	w.order(event.TypeOrderCompleted, q, tok, "o1", t0.Add(10*time.Minute))
	// The freed slot goes to u2 a moment after the stream stored the
	// completion.
	time.Sleep(20 * time.Millisecond)
	ready := time.Now()
	w.admit(q, s[2], "u2", ready, ready.Add(time.Hour))

	r := w.usherctl("audit", "--queue", q)
	if r.code != exitOK || !strings.Contains(r.stdout, "ok       slots held <= targetActive") {
		t.Fatalf("audit exit = %d (%v), want a clean audit\n%s", r.code, r.err, r.stdout)
	}
}
