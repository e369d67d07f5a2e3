package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"usher/shared/event"
	"usher/shared/waitqueue"
)

// ingestConsumer is the durable consumer every admitter shares.
const ingestConsumer = "admitter"

// ingester moves join and leave events from USHER_ENTRIES into the Redis
// line, acking each only after Redis accepted it.
type ingester struct {
	log   *slog.Logger
	line  *waitqueue.Store
	cons  jetstream.Consumer
	batch int

	// The ack floor is the watermark of admission: every join at or below
	// it is in line, whichever admitter ingested it.
	mu       sync.Mutex
	floor    uint64
	floorAt  time.Time
	observed func(n int)
}

func newIngester(ctx context.Context, log *slog.Logger, js jetstream.JetStream, line *waitqueue.Store, batch int) (*ingester, error) {
	cons, err := js.CreateOrUpdateConsumer(ctx, event.StreamEntries, jetstream.ConsumerConfig{
		Durable:       ingestConsumer,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxAckPending: 20000,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", ingestConsumer, err)
	}
	return &ingester{log: log, line: line, cons: cons, batch: batch, observed: func(int) {}}, nil
}

// Run ingests until ctx ends.
func (in *ingester) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		msgs, err := in.cons.Fetch(in.batch, jetstream.FetchMaxWait(250*time.Millisecond))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			in.log.Warn("fetch joins", "err", err)
			sleep(ctx, 100*time.Millisecond)
			continue
		}
		var batch []jetstream.Msg
		for m := range msgs.Messages() {
			batch = append(batch, m)
		}
		if err := msgs.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && ctx.Err() == nil {
			in.log.Warn("fetch joins", "err", err)
		}
		if len(batch) > 0 {
			in.handle(ctx, batch)
		}
	}
	return nil
}

// handle ingests one batch in stream order: joins in one pipelined round
// trip, leaves one by one. A message Redis did not take is not acked and
// comes back after AckWait.
func (in *ingester) handle(ctx context.Context, batch []jetstream.Msg) {
	var joins []waitqueue.Joined
	var joinMsgs []jetstream.Msg
	flush := func() bool {
		if len(joins) == 0 {
			return true
		}
		if err := in.line.IngestBatch(ctx, joins); err != nil {
			if ctx.Err() == nil {
				in.log.Error("ingest joins", "n", len(joins), "err", err)
			}
			for _, m := range joinMsgs {
				_ = m.Nak()
			}
			return false
		}
		for _, m := range joinMsgs {
			_ = m.Ack()
		}
		in.observed(len(joins))
		joins, joinMsgs = joins[:0], joinMsgs[:0]
		return true
	}
	for _, m := range batch {
		meta, err := m.Metadata()
		if err != nil {
			_ = m.Term()
			continue
		}
		switch {
		case strings.HasPrefix(m.Subject(), "usher.enter."):
			var j event.Joined
			if _, err := event.Unmarshal(m.Data(), event.TypeJoined, &j); err != nil || j.Queue == "" {
				in.log.Error("dropping malformed join event", "seq", meta.Sequence.Stream, "err", err)
				_ = m.Term()
				continue
			}
			joins = append(joins, waitqueue.Joined{Queue: j.Queue, Seq: meta.Sequence.Stream, User: j.User})
			joinMsgs = append(joinMsgs, m)
		case strings.HasPrefix(m.Subject(), "usher.leave."):
			// Joins before this leave go first: stream order is kept.
			if !flush() {
				_ = m.Nak()
				continue
			}
			var l event.Left
			if _, err := event.Unmarshal(m.Data(), event.TypeLeft, &l); err != nil {
				in.log.Error("dropping malformed leave event", "seq", meta.Sequence.Stream, "err", err)
				_ = m.Term()
				continue
			}
			if _, err := in.line.Leave(ctx, l.Queue, l.Seq, l.User); err != nil {
				if ctx.Err() == nil {
					in.log.Error("ingest leave", "err", err)
				}
				_ = m.Nak()
				continue
			}
			_ = m.Ack()
		default:
			_ = m.Term()
		}
	}
	flush()
}

// Watermark returns the consumer's ack floor, refreshed when older than
// maxAge.
func (in *ingester) Watermark(ctx context.Context, maxAge time.Duration) (uint64, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if time.Since(in.floorAt) < maxAge {
		return in.floor, nil
	}
	info, err := in.cons.Info(ctx)
	if err != nil {
		return in.floor, fmt.Errorf("consumer info: %w", err)
	}
	in.floor, in.floorAt = info.AckFloor.Stream, time.Now()
	return in.floor, nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
