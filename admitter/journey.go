package main

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"usher/internal/event"
	"usher/internal/waitqueue"
)

// waits measures each admission's time in line (usher_time_in_line_seconds):
// from the join, as USHER_ENTRIES stored it, to the admission's readyAt.
//
// Every admitter may publish an admission (the outbox is shared), but the
// stream stores it once: only the admitter whose publish was stored (an ack
// that is not a duplicate) observes it, so two admitters never count one
// shopper twice. A crash between the ack and the observation loses that
// one observation, never adds one.
//
// The join's time is the stream's, as the line recorded it when it applied
// the join (the gateway's ingest, right after the stream stored it, on
// Redis's clock; a replay, the message's own timestamp): it comes with the
// admission from the outbox. Reading each join back from the stream instead
// was a JetStream API request per admission — at 5,000 admissions a second
// 0.3 of this machine's two cores across the admitter and nats-server. An
// entry the line recorded no time for (joined before it did) is still read
// from the stream, off the admission path (a goroutine works through the
// batches the announcements hand it; if it falls more than waitBacklog
// batches behind, newer ones are dropped and logged, never the admission
// slowed).
type waits struct {
	log     *slog.Logger
	js      jetstream.JetStream
	epoch   func() string // the entries stream's identity, as token ids carry it
	metrics *metrics
	jobs    chan waitBatch
	dropped atomic.Int64
	entries jetstream.Stream // the handle, read once
}

// waitBatch is what one announcement stored.
type waitBatch struct {
	queue string
	// opensAt is the queue's scheduled opening, if any: a shopper who joined
	// the pre-queue before it waits in line from the opening on.
	opensAt    *time.Time
	admissions []waitqueue.Admission
}

const waitBacklog = 1024

func newWaits(log *slog.Logger, js jetstream.JetStream, epoch func() string, m *metrics) *waits {
	return &waits{log: log, js: js, epoch: epoch, metrics: m, jobs: make(chan waitBatch, waitBacklog)}
}

// stored hands over the admissions whose publish this admitter stored.
func (w *waits) stored(q string, opensAt *time.Time, admissions []waitqueue.Admission) {
	if w == nil || len(admissions) == 0 {
		return
	}
	select {
	case w.jobs <- waitBatch{queue: q, opensAt: opensAt, admissions: admissions}:
	default:
		if w.dropped.Add(int64(len(admissions))) == int64(len(admissions)) {
			w.log.Warn("time in line not measured for some admissions: the join lookups are behind", "queue", q)
		}
	}
}

// Run observes the batches until ctx ends.
func (w *waits) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case b := <-w.jobs:
			for _, a := range b.admissions {
				if ctx.Err() != nil {
					return nil
				}
				if d, ok := w.inLine(ctx, b, a); ok {
					w.metrics.timeInLine.WithLabelValues(b.queue).Observe(d.Seconds())
				}
			}
		}
	}
}

// inLine is how long the admitted shopper waited: from their join (or the
// opening, for a pre-queue join before it) to their readyAt.
func (w *waits) inLine(ctx context.Context, b waitBatch, a waitqueue.Admission) (time.Duration, bool) {
	if _, ep, seq, ok := waitqueue.ParseTokenID(a.TokenID); !ok || ep != w.epoch() || seq != a.Seq {
		return 0, false // a token of another incarnation of the entries stream
	}
	joined, ok := a.JoinedAt, !a.JoinedAt.IsZero()
	if !ok {
		// An entry from before the line kept its join's time.
		if joined, ok = w.joinedAt(ctx, b.queue, a.Seq); !ok {
			return 0, false
		}
	}
	start := joined
	if b.opensAt != nil && start.Before(*b.opensAt) && !b.opensAt.After(a.ReadyAt) {
		start = *b.opensAt
	}
	return max(a.ReadyAt.Sub(start), 0), true
}

// joinedAt is when USHER_ENTRIES stored the join with sequence seq.
func (w *waits) joinedAt(ctx context.Context, q string, seq uint64) (time.Time, bool) {
	if w.entries == nil {
		st, err := w.js.Stream(ctx, event.StreamEntries)
		if err != nil {
			w.log.Debug("time in line: entries stream", "err", err)
			return time.Time{}, false
		}
		w.entries = st
	}
	gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	m, err := w.entries.GetMsg(gctx, seq)
	if err != nil {
		w.log.Debug("time in line: read the join", "queue", q, "seq", seq, "err", err)
		return time.Time{}, false
	}
	if m.Subject != event.EnterSubject(q) {
		return time.Time{}, false
	}
	return m.Time, true
}
