package main

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"usher/shared/catalog"
	"usher/shared/event"
	"usher/shared/waitqueue"
)

// queueLister is the part of the catalog the admitter reads.
type queueLister interface {
	List() []catalog.Config
}

// watermarker says up to which join sequence everyone is in line.
type watermarker interface {
	Watermark(ctx context.Context, maxAge time.Duration) (uint64, error)
}

// asyncPublisher is the part of JetStream the admitter publishes with.
type asyncPublisher interface {
	PublishAsync(subj string, data []byte, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error)
}

// breakerState says whether the payment breaker is open: while it is, the
// order path cannot take more shoppers and admission pauses.
type breakerState interface {
	Open(ctx context.Context) (bool, error)
}

// hooks let tests stop the admitter at its crash points.
type hooks struct {
	afterAdmit   func(q string) error // after the script, before publishing
	afterPublish func(q string) error // after the acks, before trimming the outbox
}

// admitter runs one admission loop per configured queue.
type admitter struct {
	log       *slog.Logger
	queues    queueLister
	line      *waitqueue.Store
	events    asyncPublisher
	watermark watermarker
	breaker   breakerState // nil: never paused by the payment breaker
	now       func() time.Time
	rand      *rand.Rand
	randMu    sync.Mutex
	hooks     hooks
	metrics   *metrics
}

// Run starts a loop for every queue as queues appear, until ctx ends or a
// loop fails.
func (a *admitter) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	failed := make(chan error, 1)
	running := map[string]bool{}
	scan := time.NewTicker(100 * time.Millisecond)
	defer scan.Stop()
	for {
		for _, cfg := range a.queues.List() {
			if running[cfg.Name] {
				continue
			}
			running[cfg.Name] = true
			name := cfg.Name
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := a.loop(ctx, name); err != nil {
					select {
					case failed <- err:
					default:
					}
				}
			}()
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-failed:
			return err
		case <-scan.C:
		}
	}
}

// loop ticks one queue, re-reading its configuration every tick so changes
// apply within one tick.
func (a *admitter) loop(ctx context.Context, q string) error {
	log := a.log.With("queue", q)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		cfg, ok := a.configOf(q)
		if !ok {
			return nil
		}
		if err := a.tick(ctx, cfg); err != nil {
			if h, isHook := err.(hookError); isHook {
				return h.err
			}
			if ctx.Err() != nil {
				return nil
			}
			log.Error("admission tick", "err", err)
		}
		timer.Reset(time.Duration(cfg.TickMs) * time.Millisecond)
	}
}

func (a *admitter) configOf(q string) (catalog.Config, bool) {
	for _, cfg := range a.queues.List() {
		if cfg.Name == q {
			return cfg, true
		}
	}
	return catalog.Config{}, false
}

// hookError is a test hook's verdict: the loop stops as if it crashed.
type hookError struct{ err error }

func (h hookError) Error() string { return h.err.Error() }

// tick is one admission step for a queue: announce what a previous tick (or
// a crashed admitter) left in the outbox, admit, announce.
func (a *admitter) tick(ctx context.Context, cfg catalog.Config) error {
	start := time.Now()
	if err := a.announce(ctx, cfg.Name); err != nil {
		return err
	}
	tickLen := time.Duration(cfg.TickMs) * time.Millisecond
	wm, err := a.watermark.Watermark(ctx, tickLen/2)
	if err != nil {
		return err
	}
	a.randMu.Lock()
	offset := a.rand.IntN(1000)
	a.randMu.Unlock()
	paused := cfg.State != catalog.StateOpen
	if a.breaker != nil {
		// Back-pressure: while payments cannot go through, admitting more
		// shoppers would only pile orders up behind the breaker. Read even
		// for a paused queue, so the breaker gauge stays current.
		open, err := a.breaker.Open(ctx)
		if err != nil {
			return err
		}
		a.metrics.observeBreaker(open)
		paused = paused || open
	}
	res, err := a.line.Admit(ctx, cfg.Name, waitqueue.Tick{
		Now:             a.now(),
		TargetActive:    cfg.TargetActive,
		MaxAdmitPerTick: cfg.MaxAdmitPerTick,
		TickLength:      tickLen,
		TokenTTL:        time.Duration(cfg.TokenTTLSeconds) * time.Second,
		Watermark:       wm,
		Paused:          paused,
		Offset:          offset,
	})
	if err != nil {
		return err
	}
	a.metrics.observeTick(cfg, res, time.Since(start))
	if a.hooks.afterAdmit != nil {
		if err := a.hooks.afterAdmit(cfg.Name); err != nil {
			return hookError{err}
		}
	}
	if res.Admitted == 0 {
		return nil
	}
	return a.announce(ctx, cfg.Name)
}

// announce publishes the outbox with each token id as Nats-Msg-Id and trims
// what the stream acknowledged. A repeat (after a crash, or by a second
// admitter) is dropped by the stream's duplicate window.
func (a *admitter) announce(ctx context.Context, q string) error {
	for {
		pending, err := a.line.Outbox(ctx, q, 512)
		if err != nil || len(pending) == 0 {
			return err
		}
		futures := make([]jetstream.PubAckFuture, 0, len(pending))
		for _, ad := range pending {
			body, err := event.Marshal(ad.TokenID, event.TypeAdmitted, ad.User, ad.ReadyAt, event.Admitted{
				Queue: ad.Queue, User: ad.User, Seq: ad.Seq, TokenID: ad.TokenID,
				ReadyAt: ad.ReadyAt.UTC(), ExpiresAt: ad.ExpiresAt.UTC(),
			})
			if err != nil {
				return err
			}
			f, err := a.events.PublishAsync(event.AdmittedSubject(q), body, jetstream.WithMsgID(ad.TokenID))
			if err != nil {
				return fmt.Errorf("publish admission: %w", err)
			}
			futures = append(futures, f)
		}
		var done []uint64
		var firstErr error
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	wait:
		for i, f := range futures {
			select {
			case <-f.Ok():
				done = append(done, pending[i].Seq)
			case err := <-f.Err():
				if firstErr == nil {
					firstErr = fmt.Errorf("admission %s not stored: %w", pending[i].TokenID, err)
				}
			case <-wctx.Done():
				firstErr = fmt.Errorf("admissions not acknowledged: %w", wctx.Err())
				break wait
			}
		}
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if a.hooks.afterPublish != nil {
			if err := a.hooks.afterPublish(q); err != nil {
				return hookError{err}
			}
		}
		if err := a.line.Announced(ctx, q, done); err != nil {
			return err
		}
		a.metrics.announced.Add(float64(len(done)))
		if firstErr != nil {
			return firstErr
		}
		if len(pending) < 512 {
			return nil
		}
	}
}
