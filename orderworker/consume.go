package main

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"usher/internal/bus"
	"usher/internal/event"
)

// consumerName is the durable consumer every order worker shares: the
// stream's order requests are split among them (a work queue).
const consumerName = event.ConsumerOrderWorker

// delivery is the part of a JetStream message the consumer uses.
type delivery interface {
	Data() []byte
	Metadata() (*jetstream.MsgMetadata, error)
	Ack() error
	NakWithDelay(delay time.Duration) error
	Term() error
	InProgress() error
}

// consumer feeds order requests to the worker, many at a time, and is the
// one place that acks, naks and logs their outcome.
type consumer struct {
	log     *slog.Logger
	w       *worker
	ackWait time.Duration
	sem     chan struct{}
	wg      sync.WaitGroup
	feed    *windowFeed // nil: no adaptive admission figures
	crash   func(error) // a test hook fired: stop everything now
}

// bindConsumer returns the shared durable consumer of order requests, as
// the admitter declares it (bus.OrderWorkerDurable), once it exists: a
// worker may look it up, pull from it and acknowledge, never create or
// change it — no role but the admitter may create a consumer. On a broker
// that authenticates nobody (the tests', the fault harness's) the worker
// declares it itself, with its own ack wait and bound on requests handed
// out, as every service declares the streams there. The consumer's ack
// wait is its configuration's (cons.CachedInfo().Config.AckWait).
func bindConsumer(ctx context.Context, s bus.Settings, nc *nats.Conn, js jetstream.JetStream, log *slog.Logger,
	ackWait time.Duration, maxPending int) (jetstream.Consumer, error) {
	if s.As(bus.OrderWorker, log).Declares(nc) {
		d := bus.OrderWorkerDurable(bus.OrderWork{AckWait: ackWait, MaxAckPending: maxPending})
		return js.CreateOrUpdateConsumer(ctx, d.Stream, d.Config)
	}
	return bus.BindDurable(ctx, js, event.StreamOrders, consumerName, log)
}

// Run consumes until ctx ends, then drains: no new messages, the ones in
// hand are finished (within the caller's shutdown bound: work is canceled
// when workCtx ends).
func (c *consumer) Run(ctx, workCtx context.Context, cons jetstream.Consumer) error {
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case c.sem <- struct{}{}:
		case <-workCtx.Done():
			return // shutting down: it will be redelivered
		}
		c.wg.Add(1)
		go func() {
			defer func() { <-c.sem; c.wg.Done() }()
			c.handle(workCtx, m)
		}()
	}, jetstream.PullMaxMessages(cap(c.sem)))
	if err != nil {
		return err
	}
	<-ctx.Done()
	cc.Drain()
	select {
	case <-cc.Closed():
	case <-workCtx.Done():
	}
	c.wg.Wait()
	return nil
}

// handle processes one message and settles it with the broker. While it
// works it tells the broker so, so a slow payment is not redelivered to
// another worker meanwhile.
func (c *consumer) handle(ctx context.Context, m delivery) {
	var req event.OrderRequested
	if _, err := event.Unmarshal(m.Data(), event.TypeOrderRequested, &req); err != nil {
		c.log.Error("dropping a malformed order request", "err", err)
		_ = m.Term()
		return
	}
	redelivered, stored := false, time.Now()
	if md, err := m.Metadata(); err == nil {
		redelivered, stored = md.NumDelivered > 1, md.Timestamp
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(c.ackWait / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = m.InProgress()
			}
		}
	}()
	start := time.Now()
	actx, att := withAttempt(ctx)
	err := c.w.process(actx, req, redelivered, stored)
	close(done)
	c.feed.observe(req.Queue, req.RequestedAt, c.w.now(), att, err)
	log := c.log.With("order", req.OrderID, "queue", req.Queue)
	var later retryLater
	var hook hookError
	switch {
	case err == nil:
		if err := m.Ack(); err != nil {
			log.Warn("ack", "err", err) // redelivery will find it final
		}
		c.w.metrics.latency.Observe(time.Since(req.RequestedAt).Seconds())
		log.Debug("order finished", "took", time.Since(start))
	case errors.As(err, &hook):
		c.crash(hook.err) // as if the process died here: no ack, no nak
	case errors.As(err, &later):
		_ = m.NakWithDelay(later.after)
	case errors.Is(err, errPoison):
		log.Error("dropping an order request that can never succeed", "err", err)
		_ = m.Term()
	case ctx.Err() != nil:
		// Shutting down: leave it for redelivery.
	default:
		log.Error("order step failed; will retry", "err", err)
		_ = m.NakWithDelay(time.Second)
	}
}
