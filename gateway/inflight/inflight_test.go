package inflight_test

import (
	"testing"
	"time"

	"usher/gateway/inflight"
)

// clock is a test's time, moved by hand.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// window lets 100 ms pass, then lets in 20 joins (the fewest a window is
// judged on) that each take took: the last to finish judges the window.
func window(l *inflight.Limit, c *clock, took time.Duration) {
	c.t = c.t.Add(100 * time.Millisecond)
	var started []time.Time
	for range 20 {
		s, ok := l.Take()
		if !ok {
			break
		}
		started = append(started, s)
	}
	c.t = c.t.Add(took)
	for _, s := range started {
		l.Done(s)
	}
}

// In a window where joins take longer than the target, the bound is
// scaled by the target over the time they took (by nine tenths at most),
// down to a floor of 8, and a join past it is refused; fast ones raise it
// back to the ceiling within a few seconds of windows.
func TestTheBoundFollowsHowLongJoinsTake(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	l := inflight.New(512, 250*time.Millisecond, c.now)
	if l.Bound() != 512 {
		t.Fatalf("bound at the start = %d, want the ceiling 512", l.Bound())
	}
	window(l, c, time.Second)
	if got := l.Bound(); got != 128 {
		t.Fatalf("bound after a window of joins taking 1 s = %d, want 128 (512 × 250 ms / 1 s)", got)
	}
	window(l, c, 260*time.Millisecond)
	if got := l.Bound(); got != 115 {
		t.Fatalf("bound after a window of joins taking 260 ms = %d, want 115 (128 × 0.9: a tenth at least)", got)
	}
	for range 4 {
		window(l, c, time.Second)
	}
	if got := l.Bound(); got != 8 {
		t.Fatalf("bound after four more windows of 1 s joins = %d, want the floor 8", got)
	}
	var held []time.Time
	for range 8 {
		s, ok := l.Take()
		if !ok {
			t.Fatal("a join within the bound refused")
		}
		held = append(held, s)
	}
	if _, ok := l.Take(); ok {
		t.Fatal("a ninth join at a bound of 8 let in")
	}
	for _, s := range held {
		l.Done(s)
	}

	windows := 0
	for l.Bound() < 512 {
		window(l, c, 10*time.Millisecond)
		if windows++; windows > 45 {
			t.Fatalf("bound %d after 45 fast windows (5 s), want back at the ceiling", l.Bound())
		}
	}
}

// A few slow joins in a window of many do not move the bound, nor do
// slow joins too few to judge.
func TestAFewSlowJoinsDoNotMoveTheBound(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	l := inflight.New(512, 250*time.Millisecond, c.now)
	slow, _ := l.Take()
	c.t = c.t.Add(time.Second)
	l.Done(slow) // one slow join of 20: a twentieth, not a tenth
	window(l, c, 10*time.Millisecond)
	for range 10 {
		s, _ := l.Take()
		c.t = c.t.Add(time.Second)
		l.Done(s)
	}
	if got := l.Bound(); got != 512 {
		t.Errorf("bound = %d, want 512", got)
	}
}

// With no target the bound is the ceiling whatever joins take; with no
// ceiling every join is let in.
func TestWithoutATargetTheBoundStays(t *testing.T) {
	c := &clock{t: time.Unix(0, 0)}
	l := inflight.New(16, 0, c.now)
	for range 10 {
		window(l, c, time.Second)
	}
	if got := l.Bound(); got != 16 {
		t.Errorf("bound without a target = %d, want 16", got)
	}
	open := inflight.New(0, 250*time.Millisecond, c.now)
	for range 10000 {
		if _, ok := open.Take(); !ok {
			t.Fatal("a join refused with no ceiling")
		}
	}
}
