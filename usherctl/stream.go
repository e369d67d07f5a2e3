package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// storedMsg is one event as a stream holds it.
type storedMsg struct {
	Seq     uint64
	Subject string
	Stored  time.Time // when the stream stored it
	Data    []byte
	Pending uint64 // matching events stored after this one, as of its delivery
}

// window says which part of a stream to read.
type window struct {
	stream    string
	filters   []string
	fromSeq   uint64    // first sequence; 0 = the stream's first
	fromTime  time.Time // first stored time; zero = none
	untilSeq  uint64    // last sequence; 0 = none
	untilTime time.Time // last stored time; zero = none
	// follow keeps reading new events as they arrive; otherwise the read
	// ends at the last matching event stored when it began.
	follow bool
}

// errStop ends a read early without an error.
var errStop = errors.New("stop reading")

// readStream calls fn with every event in the window, in stream order, with
// an ordered consumer (ephemeral, flow-controlled, reset on any gap).
func readStream(ctx context.Context, js jetstream.JetStream, w window, fn func(storedMsg) error) error {
	st, err := js.Stream(ctx, w.stream)
	if err != nil {
		return fmt.Errorf("stream %s: %w", w.stream, err)
	}
	// Without --follow the read ends at the newest matching event as of now,
	// found with one direct lookup per filter: events keep arriving on a live
	// queue, and waiting for "no more" would be a guess with a timeout.
	var last uint64
	if !w.follow {
		for _, f := range w.filters {
			m, err := st.GetLastMsgForSubject(ctx, f)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue
			}
			if err != nil {
				return fmt.Errorf("stream %s: last event on %s: %w", w.stream, f, err)
			}
			if m.Sequence > last {
				last = m.Sequence
			}
		}
		if last == 0 || last < w.fromSeq {
			return nil
		}
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: w.filters, InactiveThreshold: time.Minute}
	switch {
	case w.fromSeq > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, w.fromSeq
	case !w.fromTime.IsZero():
		t := w.fromTime
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &t
	default:
		cfg.DeliverPolicy = jetstream.DeliverAllPolicy
	}
	cons, err := js.OrderedConsumer(ctx, w.stream, cfg)
	if err != nil {
		return fmt.Errorf("stream %s: consumer: %w", w.stream, err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(2048))
	if err != nil {
		return fmt.Errorf("stream %s: consume: %w", w.stream, err)
	}
	defer it.Stop()
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("stream %s: read: %w", w.stream, err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("stream %s: metadata: %w", w.stream, err)
		}
		seq := meta.Sequence.Stream
		if w.untilSeq > 0 && seq > w.untilSeq {
			return nil
		}
		if !w.untilTime.IsZero() && meta.Timestamp.After(w.untilTime) {
			return nil
		}
		err = fn(storedMsg{Seq: seq, Subject: m.Subject(), Stored: meta.Timestamp, Data: m.Data(), Pending: meta.NumPending})
		if errors.Is(err, errStop) {
			return nil
		}
		if err != nil {
			return err
		}
		if !w.follow && (seq >= last || meta.NumPending == 0) {
			return nil
		}
	}
}
