package gate

import (
	"testing"
	"time"

	"usher/internal/waitqueue"
	"usher/internal/waitqueue/passes"
)

// A remembered check is good until the recheck has passed or its admission
// expires, whichever is first; forgotten, it is gone; a recheck of 0
// remembers nothing.
func TestRecentRemembersUntilRecheckOrExpiry(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	held := passes.Use{Status: waitqueue.Admitted, TokenID: "t1", ExpiresAt: t0.Add(time.Hour)}
	r := newRecent(time.Second)
	k := passKey{queue: "q", seq: 1, user: "alice"}
	r.put(k, held, "tok", t0)
	if h, ok := r.get(k, t0.Add(999*time.Millisecond)); !ok || h.token != "tok" || h.use.TokenID != "t1" {
		t.Errorf("within the recheck = %+v, %v; want remembered", h, ok)
	}
	if _, ok := r.get(k, t0.Add(time.Second)); ok {
		t.Error("at the recheck: still remembered, want asked again")
	}
	soon := passes.Use{Status: waitqueue.Admitted, TokenID: "t2", ExpiresAt: t0.Add(300 * time.Millisecond)}
	r.put(k, soon, "tok2", t0)
	if _, ok := r.get(k, t0.Add(300*time.Millisecond)); ok {
		t.Error("past the admission's expiry: still remembered")
	}
	r.put(k, held, "tok", t0)
	r.forget(k)
	if _, ok := r.get(k, t0); ok {
		t.Error("forgotten: still remembered")
	}
	off := newRecent(0)
	off.put(k, held, "tok", t0)
	if _, ok := off.get(k, t0); ok {
		t.Error("a recheck of 0 remembered a check")
	}
}

// The memory is bounded: full, it drops what has lapsed, and while nothing
// has, it remembers nothing new.
func TestRecentIsBounded(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	held := passes.Use{Status: waitqueue.Admitted, ExpiresAt: t0.Add(time.Hour)}
	r := newRecent(time.Second)
	r.max = 2
	r.put(passKey{seq: 1}, held, "a", t0)
	r.put(passKey{seq: 2}, held, "b", t0)
	r.put(passKey{seq: 3}, held, "c", t0)
	if _, ok := r.get(passKey{seq: 3}, t0); ok || len(r.held) != 2 {
		t.Errorf("full: remembered a third (%d held)", len(r.held))
	}
	later := t0.Add(2 * time.Second)
	r.put(passKey{seq: 3}, held, "c", later)
	if _, ok := r.get(passKey{seq: 3}, later); !ok || len(r.held) != 1 {
		t.Errorf("full of lapsed checks: %d held, want the new one alone", len(r.held))
	}
}
