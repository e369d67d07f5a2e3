package main

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"usher/internal/bus"
	"usher/internal/waitqueue"
)

// catchUpWait bounds one batch of direct gets: a replica cut off from the
// others may take the request and never answer, and the next batch (or
// the next pass) asks again, likely of another.
const catchUpWait = time.Second

// catchUp applies, with direct gets, the queue's events the stream holds
// after pos, for a follower that could not make its consumer. Making one
// is a request to the cluster's metadata leader, and a NATS node whose
// disk stalls while it leads that group (or a healed partition, while the
// group elects again) leaves every new consumer unmade for as long as it
// lasts — the queue's admission with it, since nobody is admitted before
// the line has applied the streams' heads. Every replica answers a direct
// get without the metadata leader. Reading explicit sequences from the
// cursor on, a replica behind the leader answers fewer events, never
// others; what it missed, the next batch or the consumer delivers. It
// returns how many events it applied (errRewound: the line lost writes, or
// the stream is another incarnation, and the pass starts again).
func (f *follower) catchUp(ctx context.Context, pos waitqueue.Position) (int, error) {
	applied, prev := 0, pos.Seq
	for ctx.Err() == nil {
		if now := f.streamID(); now != "" && now != pos.StreamID {
			return applied, errRewound
		}
		batch := make([]jetstream.Msg, 0, f.batch)
		gctx, cancel := context.WithTimeout(ctx, catchUpWait)
		end, err := f.get(gctx, bus.GetRequest{Seq: prev + 1, Subject: f.subject, Batch: f.batch}, func(m bus.Stored) error {
			batch = append(batch, storedMsg{m})
			return nil
		})
		cancel()
		if len(batch) == 0 || (err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout)) {
			return applied, err
		}
		last, err := f.applyBatch(ctx, pos.StreamID, prev, batch)
		if err != nil {
			return applied, err
		}
		applied, prev = applied+len(batch), last
		if end.Pending == 0 {
			return applied, nil
		}
	}
	return applied, nil
}

// storedMsg is a message read with a direct get, as the followers' apply
// functions read a delivered one: its subject, data, headers and stream
// sequence, time and pending count. It is nobody's delivery: there is
// nothing to acknowledge.
type storedMsg struct{ m bus.Stored }

var errNotDelivered = errors.New("a message read with a direct get has no delivery to acknowledge")

func (s storedMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Stream: s.m.Seq}, NumPending: s.m.Pending,
		Timestamp: s.m.Stored}, nil
}
func (s storedMsg) Data() []byte                     { return s.m.Data }
func (s storedMsg) Headers() nats.Header             { return s.m.Header }
func (s storedMsg) Subject() string                  { return s.m.Subject }
func (s storedMsg) Reply() string                    { return "" }
func (s storedMsg) Ack() error                       { return errNotDelivered }
func (s storedMsg) DoubleAck(context.Context) error  { return errNotDelivered }
func (s storedMsg) Nak() error                       { return errNotDelivered }
func (s storedMsg) NakWithDelay(time.Duration) error { return errNotDelivered }
func (s storedMsg) InProgress() error                { return errNotDelivered }
func (s storedMsg) Term() error                      { return errNotDelivered }
func (s storedMsg) TermWithReason(string) error      { return errNotDelivered }
