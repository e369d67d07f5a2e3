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
