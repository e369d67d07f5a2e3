package testenv

import (
	"context"
	"testing"
	"time"

	"usher/internal/waitqueue"
)

// Epoch is the entries stream identity tests use when no real stream
// numbers their lines.
const Epoch = "e1"

// EntriesApplier applies the entries stream to a line (the projection).
type EntriesApplier interface {
	ApplyEntries(ctx context.Context, q, epoch string, prev uint64, evs []waitqueue.EntryEvent) (waitqueue.Applied, error)
}

// Ticker runs a queue's admission tick (the admission).
type Ticker interface {
	Admit(ctx context.Context, q string, t waitqueue.Tick) (waitqueue.TickResult, error)
}

// Applied moves q's entries cursor up to upTo, as the admitter's follower
// would once it has applied every join up to it, for a test that put the
// entries in line itself (Ingest) instead of running a follower. epoch is
// the identity the cursor counts in (Epoch, or the real stream's).
func Applied(t testing.TB, line EntriesApplier, q, epoch string, upTo uint64) {
	t.Helper()
	_, err := line.ApplyEntries(context.Background(), q, epoch, 0, []waitqueue.EntryEvent{{StreamSeq: upTo, Leave: true}})
	if err != nil {
		t.Fatal(err)
	}
}

// Tick runs q's admission tick once it is due (the schedule is Redis's:
// a tick within tickMs of the last one waits), and returns what it did.
func Tick(t testing.TB, line Ticker, q string, tk waitqueue.Tick) waitqueue.TickResult {
	t.Helper()
	if tk.Epoch == "" {
		tk.Epoch = Epoch
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := line.Admit(context.Background(), q, tk)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Early {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("admission tick of %s never due", q)
		}
		time.Sleep(r.Next)
	}
}
