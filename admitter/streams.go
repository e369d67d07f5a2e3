package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"usher/internal/bus"
	"usher/internal/event"
	"usher/internal/waitqueue"
)

// streamHeads reads how far the streams hold a queue's events.
type streamHeads struct {
	*bus.Identities
	js      jetstream.JetStream
	handles sync.Map // stream name → jetstream.Stream (one STREAM.INFO each, not one per tick)
}

// StreamID is the identity of a stream as last read.
func (s *streamHeads) StreamID(stream string) string { return s.Of(stream) }

// Head returns the last event of q that stream holds: a join or leave
// (entries), an admission, or an order event.
func (s *streamHeads) Head(ctx context.Context, stream, q string) (waitqueue.Head, error) {
	switch stream {
	case event.StreamEntries:
		return s.head(ctx, stream, event.EntrySubjects(q))
	case event.StreamAdmissions:
		return s.head(ctx, stream, event.AdmittedSubject(q))
	case event.StreamOrders:
		return s.head(ctx, stream, event.OrderSubjects(q))
	}
	return waitqueue.Head{}, fmt.Errorf("stream %s holds no events of a queue", stream)
}

// Heads returns the last admission and order event of q the streams hold.
func (s *streamHeads) Heads(ctx context.Context, q string) (admissions, orders waitqueue.Head, err error) {
	if admissions, err = s.Head(ctx, event.StreamAdmissions, q); err != nil {
		return
	}
	orders, err = s.Head(ctx, event.StreamOrders, q)
	return
}

// headWait bounds one read of a stream's head. A read sent while the
// stream's leader is gone (a NATS node killed; the election takes 4–7 s on
// the fault suite's cluster) is never answered, and without a bound it
// would wait for the client's default of 5 s: the tick that asked, and the
// follower's check for a silent consumer, would come back only then, and
// the queue's admission stay stopped seconds after the new leader could
// answer. Asked again after a second instead, they find it within one.
const headWait = time.Second

func (s *streamHeads) head(ctx context.Context, stream, subject string) (waitqueue.Head, error) {
	ctx, cancel := context.WithTimeout(ctx, headWait)
	defer cancel()
	h := waitqueue.Head{StreamID: s.Of(stream)}
	v, ok := s.handles.Load(stream)
	if !ok {
		st, err := s.js.Stream(ctx, stream)
		if err != nil {
			return h, fmt.Errorf("stream %s: %w", stream, err)
		}
		v, _ = s.handles.LoadOrStore(stream, st)
	}
	m, err := v.(jetstream.Stream).GetLastMsgForSubject(ctx, subject)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return h, nil
	case err != nil:
		return h, fmt.Errorf("last %s in %s: %w", subject, stream, err)
	}
	h.Seq = m.Sequence
	return h, nil
}
