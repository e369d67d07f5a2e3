package main

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"usher/internal/adaptive"
	"usher/internal/catalog"
	"usher/internal/orders"
)

// The adaptive admission (package adaptive) judges the order path by what
// the order workers see: every attempt at an order adds its cost to the
// queue's current decision window in Redis — how many orders finished and
// their latency, payment calls left unanswered, orders failed or put back
// to wait, and the database connection holds the attempt's own statements
// took. Only queues whose adaptive admission is on are counted.

// attempt collects what one attempt at an order cost. It travels in the
// attempt's context, so the payment client and the store's connection
// hook add to it without knowing about it.
type attempt struct {
	mu        sync.Mutex
	timeouts  int64
	holds     int64
	slowHolds int64
	holdMax   time.Duration
	holdSum   time.Duration
	final     orders.Order // the order as it finished (finish)
	finished  bool
}

type attemptKey struct{}

// withAttempt returns ctx carrying a new attempt.
func withAttempt(ctx context.Context) (context.Context, *attempt) {
	a := &attempt{}
	return context.WithValue(ctx, attemptKey{}, a), a
}

func attemptOf(ctx context.Context) *attempt {
	a, _ := ctx.Value(attemptKey{}).(*attempt)
	return a
}

// notePaymentCall counts a charge call that got no answer (outcome
// "unavailable": a timeout, a 5xx, a refused connection).
func notePaymentCall(ctx context.Context, outcome string) {
	if a := attemptOf(ctx); a != nil && outcome == "unavailable" {
		a.mu.Lock()
		a.timeouts++
		a.mu.Unlock()
	}
}

// noteHold counts the attempt's share of a database connection hold (the
// store's HoldOf hook: a batch's hold divided among its statements).
func noteHold(ctx context.Context, d time.Duration) {
	if a := attemptOf(ctx); a != nil {
		a.mu.Lock()
		a.holds++
		if d > adaptive.SlowHoldMs*time.Millisecond {
			a.slowHolds++
		}
		a.holdMax = max(a.holdMax, d)
		a.holdSum += d
		a.mu.Unlock()
	}
}

// noteFinal records the order as the attempt finished it.
func noteFinal(ctx context.Context, o orders.Order) {
	if a := attemptOf(ctx); a != nil {
		a.mu.Lock()
		a.final, a.finished = o, true
		a.mu.Unlock()
	}
}

// sample is what the attempt adds to its queue's window: requested is when
// the order was requested, now when the attempt ended, err what it
// returned (nil: the order is final).
func (a *attempt) sample(requested, now time.Time, err error) adaptive.Sample {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := adaptive.Sample{Timeouts: a.timeouts, Holds: a.holds, SlowHolds: a.slowHolds,
		HoldMs: float64(a.holdSum) / float64(time.Millisecond), HoldMaxMs: float64(a.holdMax) / float64(time.Millisecond)}
	var later retryLater
	switch {
	case err == nil && a.finished:
		ms := float64(now.Sub(requested)) / float64(time.Millisecond)
		s.Orders, s.LatencyMs, s.MaxMs = 1, ms, ms
		if a.final.Status == orders.Failed && a.final.Reason != orders.ReasonDeclined {
			s.Failed = 1 // the order path failed it; a declined card is the shopper's
		}
	case errors.As(err, &later) && !later.moment:
		s.Deferred = 1
	}
	return s
}

// windowRecorder adds samples to a queue's decision window (adaptive.Store).
type windowRecorder interface {
	Record(ctx context.Context, q string, window time.Duration, s adaptive.Sample) error
}

// windowFeed gathers the attempts' samples per queue and adds them to the
// queues' windows every interval: one Redis call per queue per interval,
// not one per order. A sample lands in the window that is current when it
// is flushed (Redis time), at most one interval late. It is safe for
// concurrent use; Run flushes until its context ends, and once more.
type windowFeed struct {
	rec      windowRecorder
	queues   queueCatalog
	log      *slog.Logger
	interval time.Duration

	mu      sync.Mutex
	pending map[string]*adaptive.Sample
}

func newWindowFeed(rec windowRecorder, queues queueCatalog, log *slog.Logger) *windowFeed {
	return &windowFeed{rec: rec, queues: queues, log: log, interval: 100 * time.Millisecond, pending: map[string]*adaptive.Sample{}}
}

// observe adds the attempt at req's order to its queue's next flush, when
// the queue's admission is adaptive. It never blocks on Redis.
func (f *windowFeed) observe(q string, requested, now time.Time, a *attempt, err error) {
	if f == nil {
		return
	}
	if cfg, ok := f.queues.Get(q); !ok || !cfg.AdaptiveOn() {
		return
	}
	s := a.sample(requested, now, err)
	if s == (adaptive.Sample{}) {
		return
	}
	f.mu.Lock()
	if p := f.pending[q]; p != nil {
		p.Add(s)
	} else {
		f.pending[q] = &s
	}
	f.mu.Unlock()
}

// Run flushes every interval until ctx ends, then once more.
func (f *windowFeed) Run(ctx context.Context) error {
	t := time.NewTicker(f.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			f.flush(fctx)
			cancel()
			return nil
		case <-t.C:
			f.flush(ctx)
		}
	}
}

// flush adds what was gathered to the queues' windows. A sample that
// cannot be written is dropped and logged: the figures steer admission,
// they are not a record.
func (f *windowFeed) flush(ctx context.Context) {
	f.mu.Lock()
	batch := f.pending
	f.pending = map[string]*adaptive.Sample{}
	f.mu.Unlock()
	for q, s := range batch {
		window := time.Duration(catalog.DefaultAdaptiveWindowMs) * time.Millisecond
		if cfg, ok := f.queues.Get(q); ok {
			window = time.Duration(cfg.AdaptiveWindow()) * time.Millisecond
		}
		if err := f.rec.Record(ctx, q, window, *s); err != nil && ctx.Err() == nil {
			f.log.Warn("order figures not added to the adaptive window", "queue", q, "orders", s.Orders, "err", err)
		}
	}
}
