package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"

	"usher/internal/testenv"
)

// fakeShared is the shared breaker state in memory, counting its reads.
type fakeShared struct {
	open  atomic.Bool
	down  atomic.Bool // reads fail
	reads atomic.Int64
}

func (f *fakeShared) MarkOpen(context.Context, time.Duration) error { f.open.Store(true); return nil }
func (f *fakeShared) MarkClosed(context.Context) error              { f.open.Store(false); return nil }
func (f *fakeShared) Open(context.Context) (bool, error) {
	f.reads.Add(1)
	if f.down.Load() {
		return false, errors.New("redis down")
	}
	return f.open.Load(), nil
}

// Blocked reads the shared state at most once per sharedEvery, not once
// an order: another worker's open breaker is seen within that time, and
// this worker's own opening and closing at once.
func TestBlockedReadsTheSharedStateOncePerInterval(t *testing.T) {
	shared := &fakeShared{}
	const open = 20 * time.Millisecond
	b := newBreaker(slog.New(slog.NewTextHandler(io.Discard, nil)), shared, open, func(float64) {})
	now := time.Unix(1_000_000, 0)
	b.now = func() time.Time { return now }
	ctx := context.Background()

	for range 100 {
		if b.Blocked(ctx) {
			t.Fatal("Blocked = true with every breaker closed")
		}
	}
	if got := shared.reads.Load(); got != 1 {
		t.Fatalf("100 orders within %v read the shared state %d times, want 1", sharedEvery, got)
	}

	// Another worker's breaker opens: seen once the copy is sharedEvery old.
	shared.open.Store(true)
	now = now.Add(sharedEvery - time.Millisecond)
	if b.Blocked(ctx) {
		t.Fatal("Blocked = true before the copy is sharedEvery old, want the copy (closed)")
	}
	now = now.Add(time.Millisecond)
	if !b.Blocked(ctx) {
		t.Fatalf("Blocked = false %v after the last read, with the shared state open", sharedEvery)
	}
	if got := shared.reads.Load(); got != 2 {
		t.Fatalf("shared state read %d times, want 2", got)
	}

	// This worker's breaker opens and closes: the copy follows at once.
	shared.open.Store(false)
	now = now.Add(sharedEvery)
	b.Blocked(ctx)
	for range 5 {
		b.Execute(func() (string, error) { return "", errPaymentUnavailable })
	}
	if !b.Blocked(ctx) {
		t.Fatal("Blocked = false with this worker's breaker open")
	}
	// After the open period (the breaker's own clock) one probe closes it.
	testenv.Eventually(t, 5*time.Second, func() bool { return b.cb.State() == gobreaker.StateHalfOpen }, "breaker half-open")
	if _, err := b.Execute(func() (string, error) { return "pay_1", nil }); err != nil {
		t.Fatalf("probe: %v", err)
	}
	before := shared.reads.Load()
	if b.Blocked(ctx) {
		t.Fatal("Blocked = true right after this worker's breaker closed, want the copy updated by the close")
	}
	if got := shared.reads.Load(); got != before {
		t.Fatalf("Blocked read the shared state right after the close updated the copy (%d reads, want %d)", got, before)
	}

	// A failed read says closed and is not kept: the next call reads again.
	now = now.Add(sharedEvery)
	shared.open.Store(true)
	shared.down.Store(true)
	if b.Blocked(ctx) {
		t.Fatal("Blocked = true on a failed read, want closed")
	}
	shared.down.Store(false)
	if !b.Blocked(ctx) {
		t.Fatal("Blocked = false after a failed read, with the shared state open: the failure was kept")
	}
}
