package admission

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"usher/internal/waitqueue"
)

// AtOnceWait is how long AdmitAtOnce waits, unless told otherwise, for the
// follower to apply a join and for a tick that found the line current
// before it answers the join as it is (the next tick admits it; the
// shopper learns it by push or poll). A few ticks: the wait costs nobody a
// place.
const AtOnceWait = 500 * time.Millisecond

// Join is a join the gateway has just put in line (Ingest), as
// AdmitAtOnce takes it.
type Join struct {
	Queue, Epoch string
	// Entry is the join's entry as Ingest answered it.
	Entry waitqueue.Entry
	// Passthrough: the queue admits every join at once, whatever its
	// place (nobody waits there).
	Passthrough bool
	// Admits: the queue admits now — it is open, and not a scheduled
	// drop awaiting its draw (whose ticks admit nobody either: a join
	// admitted at once could pass the pre-queue still to be drawn).
	Admits bool
	// Limits are what an admission at once obeys besides what the
	// queue's last tick recorded (see Admission.AdmitNow).
	Limits waitqueue.AtOnce
	// Wait bounds the wait for the follower and for a current line
	// (zero: AtOnceWait).
	Wait time.Duration
}

// Outcome is what AdmitAtOnce did with a join.
type Outcome struct {
	// Entry is the join's entry as the line holds it now: admitted when
	// this call (or, in a passthrough queue, a tick) admitted it; the
	// join's own entry when nothing was read.
	Entry waitqueue.Entry
	// ReadyNow: the entry was admitted at once, READY at Redis's time of
	// the admission, which has passed — the caller may judge it at its
	// readyAt when its own clock, synced to Redis's, is a moment behind
	// (else the join's answer would say WAITING, first in line, for a
	// millisecond).
	ReadyNow bool
}

// Poller reads an entry back (line.Line's Poll): the join's, once it is
// admitted.
type Poller interface {
	Poll(ctx context.Context, q string, seq uint64) (waitqueue.Entry, error)
}

// AdmitAtOnce admits a join at once when it can — no tick, no second
// request: every join of a passthrough queue, and a join into an empty
// line with a slot free (no crowd, no wait); never while the queue does
// not admit (j.Admits). The admission is AdmitNow's (FIFO, in one atomic
// step, by what the last tick recorded it obeyed — its limit, what is left
// of its maxAdmitPerTick, nobody while it found admission paused — and,
// for a stock-aware queue, by the units that could still be sold across
// every queue selling its SKUs, counted at that moment), or AdmitEntry's
// for a passthrough join, taken once the admitter's follower has applied
// the join (a few milliseconds), so nobody who joined first is passed.
// While a guard only a tick lifts holds (ErrNotCurrent), it tries again
// every quarter tick. Past j.Wait, or when the line cannot say, the join
// is answered as it is: the next tick admits it.
//
// It returns the join's entry as it is after — read back with line — and
// an error only when Redis could not be read or written, which the caller
// logs: the join stands either way.
func (a *Admission) AdmitAtOnce(ctx context.Context, line Poller, j Join) (Outcome, error) {
	e := j.Entry
	if j.Passthrough && e.Status == waitqueue.Admitted {
		return Outcome{Entry: e, ReadyNow: true}, nil // a tick admitted it already
	}
	alone := e.Status == waitqueue.Waiting && e.Position == 1 && e.Waiting == 1
	if !j.Admits || e.Status != waitqueue.Waiting || !(j.Passthrough || alone) {
		return Outcome{Entry: e}, nil
	}
	wait := j.Wait
	if wait <= 0 {
		wait = AtOnceWait
	}
	deadline := time.Now().Add(wait)
	if !j.Passthrough {
		// FIFO: only once the follower has applied every join before this
		// one, so nobody who joined first is passed. A passthrough entry
		// goes in at once, whatever the follower applied: nobody waits
		// there.
		applied, err := a.awaitApplied(ctx, j, deadline)
		if err != nil || !applied {
			return Outcome{Entry: e}, err // !applied: the follower is behind, the next tick admits
		}
	}
	admitted, err := a.admitBefore(ctx, j, deadline)
	if err != nil || admitted == nil {
		return Outcome{Entry: e}, err // nil: still not current, the next tick admits
	}
	now, err := line.Poll(ctx, j.Queue, e.Seq)
	if err != nil {
		return Outcome{Entry: e}, fmt.Errorf("read %s/%d back after admitting it at once (the shopper's next poll or push says READY): %w", j.Queue, e.Seq, err)
	}
	return Outcome{Entry: now, ReadyNow: j.Passthrough || slices.Contains(admitted, e.Seq)}, nil
}

// awaitApplied waits, until deadline, for the entries cursor to reach j's
// entry in j's stream, and says whether it did.
func (a *Admission) awaitApplied(ctx context.Context, j Join, deadline time.Time) (bool, error) {
	for {
		cur, err := a.client.Cursor(ctx, j.Queue)
		if err != nil {
			return false, fmt.Errorf("admit %s/%d at once: %w", j.Queue, j.Entry.Seq, err)
		}
		if p := cur[waitqueue.StreamEntries]; p.StreamID == j.Epoch && p.Bound() >= j.Entry.Seq {
			return true, nil
		}
		if time.Now().After(deadline) {
			return false, nil
		}
		if !pause(ctx, 2*time.Millisecond) {
			return false, fmt.Errorf("admit %s/%d at once: %w", j.Queue, j.Entry.Seq, ctx.Err())
		}
	}
}

// admitBefore admits j's entry (AdmitEntry) or the head of the line
// (AdmitNow), trying again while the line is not current, until deadline.
// It returns the sequences admitted (none: an empty slice), or nil when
// the line was not current by the deadline.
func (a *Admission) admitBefore(ctx context.Context, j Join, deadline time.Time) ([]uint64, error) {
	for {
		var admitted []uint64
		var err error
		if j.Passthrough {
			admitted, err = a.AdmitEntry(ctx, j.Queue, j.Epoch, j.Entry.Seq, j.Limits)
		} else {
			admitted, err = a.AdmitNow(ctx, j.Queue, j.Epoch, j.Limits)
		}
		switch {
		case err == nil:
			if admitted == nil {
				admitted = []uint64{}
			}
			return admitted, nil
		case !errors.Is(err, waitqueue.ErrNotCurrent):
			return nil, err
		}
		// The last tick found the line behind the streams (usually the
		// admission it had just published), is late, or caught up with
		// readyAts that lie ahead, or used a later stock reservation: the
		// next one, a tick away, lifts it.
		if time.Now().After(deadline) {
			return nil, nil
		}
		if !pause(ctx, max(j.Limits.TickLength/4, 5*time.Millisecond)) {
			return nil, fmt.Errorf("admit %s/%d at once: %w", j.Queue, j.Entry.Seq, ctx.Err())
		}
	}
}

// pause waits d, or less if ctx ends first: then it says false.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
