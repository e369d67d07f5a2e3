package clock

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// fakeHost is a host's clock and a Redis whose TIME answers after a round
// trip the test sets, truth ahead of the host's clock.
type fakeHost struct {
	mu    sync.Mutex
	local time.Time
	truth time.Duration // Redis time − the host's time
	rtt   time.Duration // the next round trip
}

func (h *fakeHost) now() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.local
}

func (h *fakeHost) advance(d time.Duration) {
	h.mu.Lock()
	h.local = h.local.Add(d)
	h.mu.Unlock()
}

// Now answers as a Redis whose reply is read at once and whose request
// took the whole round trip to arrive: the worst case for halving.
func (h *fakeHost) Now(context.Context) (time.Time, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.local = h.local.Add(h.rtt)
	return h.local.Add(h.truth), nil
}

func TestASlowSampleDoesNotMoveTheClock(t *testing.T) {
	h := &fakeHost{local: time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC), truth: 3 * time.Second, rtt: time.Millisecond}
	c := New(h, h.now, slog.New(slog.NewTextHandler(io.Discard, nil)))
	off := func() time.Duration { return c.Offset() - h.truth }
	for range 5 {
		if err := c.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		h.advance(time.Second)
	}
	if e := off().Abs(); e > time.Millisecond {
		t.Fatalf("clock off by %v with 1 ms round trips", e)
	}
	// A failover: one TIME takes 420 ms. Halving it would put the clock
	// 210 ms ahead.
	h.rtt = 420 * time.Millisecond
	_ = c.Sync(context.Background())
	if e := off().Abs(); e > time.Millisecond {
		t.Fatalf("clock off by %v after one slow sample, want the offset kept", e)
	}
	h.rtt = time.Millisecond
	h.advance(time.Second)
	_ = c.Sync(context.Background())
	if e := off().Abs(); e > time.Millisecond {
		t.Fatalf("clock off by %v", e)
	}

	// A partition: one TIME hangs for 11 s. Halving it would put the clock
	// 5.5 s off.
	h.rtt = 11 * time.Second
	_ = c.Sync(context.Background())
	if e := off().Abs(); e > time.Millisecond {
		t.Fatalf("clock off by %v after an 11 s sample, want the offset kept", e)
	}

	// Every round trip gets slower (Redis moved further away) and the
	// offset changes: the clock follows within recentSamples samples.
	h.truth = 5 * time.Second
	for i := range recentSamples + 1 {
		h.rtt = time.Duration(30+i) * time.Millisecond
		h.advance(time.Second)
		_ = c.Sync(context.Background())
	}
	if e := off().Abs(); e > 25*time.Millisecond { // half a round trip at most
		t.Fatalf("clock off by %v after every round trip got slower, want it to follow them", e)
	}
}

// Earliest is never after the reference time, whichever moment of the
// round trip Redis read its clock at; Now may be, by up to half of it.
func TestEarliestIsNeverAfterTheReference(t *testing.T) {
	for _, at := range []time.Duration{0, time.Millisecond, 2 * time.Millisecond} { // when, in a 2 ms round trip, Redis read TIME
		h := &readAt{host: fakeHost{local: time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC), truth: 3 * time.Second, rtt: 2 * time.Millisecond}, at: at}
		c := New(h, h.host.now, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err := c.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		ref := h.host.now().Add(h.host.truth)
		if e := c.Earliest(); e.After(ref) {
			t.Errorf("Redis read at %v of the round trip: Earliest %v after the reference time %v", at, e.Sub(ref), ref)
		}
		if d := ref.Sub(c.Earliest()); d > 2*time.Millisecond {
			t.Errorf("Redis read at %v of the round trip: Earliest %v behind the reference, more than the round trip", at, d)
		}
	}
}

// readAt is a Redis that reads its clock at moment at of the round trip.
type readAt struct {
	host fakeHost
	at   time.Duration
}

func (r *readAt) Now(context.Context) (time.Time, error) {
	r.host.mu.Lock()
	defer r.host.mu.Unlock()
	ref := r.host.local.Add(r.at).Add(r.host.truth)
	r.host.local = r.host.local.Add(r.host.rtt)
	return ref, nil
}
