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
//
// An ordered consumer lives on one replica of the stream, and after a NATS
// node's restart that may be one that has not caught up: it says nothing is
// pending while the stream's leader holds more, or delivers nothing at all.
// So without --follow the end is the leader's: a read that seems to end
// before the last event the leader held when it began asks the leader
// again, and a consumer silent for 4 to 5 s while the leader holds events
// after the last one read is replaced by one from just after it.
func readStream(ctx context.Context, js jetstream.JetStream, w window, fn func(storedMsg) error) error {
	const silentFor = 5 * time.Second
	st, err := js.Stream(ctx, w.stream)
	if err != nil {
		return fmt.Errorf("stream %s: %w", w.stream, err)
	}
	// Without --follow the read ends at the newest matching event as of now,
	// found with one direct lookup per filter: events keep arriving on a live
	// queue, and waiting for "no more" would be a guess with a timeout.
	var last uint64
	if !w.follow {
		var stored time.Time
		if last, stored, err = lastOf(ctx, st, w); err != nil {
			return err
		}
		// A start after the newest event: the consumer would deliver
		// nothing, and the leader's newest event, never read, kept the
		// read waiting for it forever (--since 1s on a quiet queue).
		if last == 0 || last < w.fromSeq || stored.Before(w.fromTime) {
			return nil
		}
	}
	var read uint64 // the last sequence handed to fn
	var it jetstream.MessagesContext
	open := func() error {
		cfg := jetstream.OrderedConsumerConfig{FilterSubjects: w.filters, InactiveThreshold: time.Minute}
		switch {
		case read > 0:
			cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, read+1
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
		if it, err = cons.Messages(jetstream.PullMaxMessages(2048)); err != nil {
			return fmt.Errorf("stream %s: consume: %w", w.stream, err)
		}
		return nil
	}
	if err := open(); err != nil {
		return err
	}
	defer func() { it.Stop() }()
	// more asks the leader whether it holds events after the last read
	// (after last too, if events were deleted since it was read).
	more := func() (bool, error) {
		now, _, err := lastOf(ctx, st, w)
		if err != nil {
			return false, err
		}
		last = min(last, now)
		return last > read, nil
	}
	// next bounds the wait for a message, without --follow: silentFor from
	// when it was made, made again once a second while messages come — not
	// once per message, on the path a rebuild reads every join through.
	next, cancel := ctx, context.CancelFunc(func() {})
	var made time.Time
	renew := func() {
		if !w.follow {
			cancel()
			next, cancel = context.WithTimeout(ctx, silentFor)
			made = time.Now()
		}
	}
	defer func() { cancel() }()
	renew()
	for {
		m, err := it.Next(jetstream.NextContext(next))
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !w.follow && errors.Is(err, context.DeadlineExceeded) {
				ok, err := more()
				if err != nil || !ok {
					return err
				}
				it.Stop() // a lagging replica's consumer: read on with another
				if err := open(); err != nil {
					return err
				}
				renew()
				continue
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
		read = seq
		if !w.follow && time.Since(made) >= time.Second {
			renew()
		}
		if w.follow || seq < last && meta.NumPending > 0 {
			continue
		}
		if seq >= last {
			return nil
		}
		// Nothing pending by this consumer's replica, though the leader
		// held more when the read began: ask it again.
		if ok, err := more(); err != nil || !ok {
			return err
		}
	}
}

// lastOf is the newest event of the window's filters the stream's leader
// holds (0: none), and when the stream stored it.
func lastOf(ctx context.Context, st jetstream.Stream, w window) (uint64, time.Time, error) {
	var last uint64
	var stored time.Time
	for _, f := range w.filters {
		m, err := st.GetLastMsgForSubject(ctx, f)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return 0, time.Time{}, fmt.Errorf("stream %s: last event on %s: %w", w.stream, f, err)
		}
		if m.Sequence > last {
			last, stored = m.Sequence, m.Time
		}
	}
	return last, stored, nil
}
