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
	st, err := js.Stream(ctx, w.stream)
	if err != nil {
		return fmt.Errorf("stream %s: %w", w.stream, err)
	}
	r := &streamReader{js: js, st: st, w: w, next: ctx, cancel: func() {}}
	if !w.follow {
		if empty, err := r.findEnd(ctx); err != nil || empty {
			return err
		}
	}
	if err := r.open(ctx); err != nil {
		return err
	}
	defer r.stop()
	r.renew(ctx)
	for {
		m, err := r.it.Next(jetstream.NextContext(r.next))
		if err != nil {
			if again, err := r.replaceSilent(ctx, err); !again {
				return err
			}
			continue
		}
		if done, err := r.deliver(ctx, m, fn); done || err != nil {
			return err
		}
	}
}

// streamReader is one readStream's state: the consumer it reads with, the
// last sequence it handed on and, without --follow, where the read ends.
type streamReader struct {
	js   jetstream.JetStream
	st   jetstream.Stream
	w    window
	it   jetstream.MessagesContext
	read uint64 // the last sequence handed to fn
	last uint64 // without --follow: the leader's newest matching event
	// next bounds the wait for a message (with --follow, it is the read's
	// context): silentFor from made, made again once a second while
	// messages come — not once per message, on the path a rebuild reads
	// every join through.
	next   context.Context
	cancel context.CancelFunc
	made   time.Time
}

// silentFor is how long a read without --follow waits for a message
// before it asks the leader whether there are more.
const silentFor = 5 * time.Second

// findEnd sets the end of a read without --follow to the newest matching
// event as of now, found with one direct lookup per filter: events keep
// arriving on a live queue, and waiting for "no more" would be a guess
// with a timeout. It reports whether the window holds nothing.
func (r *streamReader) findEnd(ctx context.Context) (empty bool, err error) {
	last, stored, err := lastOf(ctx, r.st, r.w)
	if err != nil {
		return false, err
	}
	r.last = last
	// A start after the newest event: the consumer would deliver nothing,
	// and the leader's newest event, never read, kept the read waiting for
	// it forever (--since 1s on a quiet queue).
	return last == 0 || last < r.w.fromSeq || stored.Before(r.w.fromTime), nil
}

// open makes a consumer from just after the last event read, or from the
// window's start.
func (r *streamReader) open(ctx context.Context) error {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: r.w.filters, InactiveThreshold: time.Minute}
	switch {
	case r.read > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, r.read+1
	case r.w.fromSeq > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, r.w.fromSeq
	case !r.w.fromTime.IsZero():
		t := r.w.fromTime
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &t
	default:
		cfg.DeliverPolicy = jetstream.DeliverAllPolicy
	}
	cons, err := r.js.OrderedConsumer(ctx, r.w.stream, cfg)
	if err != nil {
		return fmt.Errorf("stream %s: consumer: %w", r.w.stream, err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(2048))
	if err != nil {
		return fmt.Errorf("stream %s: consume: %w", r.w.stream, err)
	}
	r.it = it
	return nil
}

func (r *streamReader) stop() {
	r.cancel()
	r.it.Stop()
}

// renew starts the wait for the next message again, without --follow.
func (r *streamReader) renew(ctx context.Context) {
	if !r.w.follow {
		r.cancel()
		r.next, r.cancel = context.WithTimeout(ctx, silentFor)
		r.made = time.Now()
	}
}

// more asks the leader whether it holds events after the last read
// (after the end too, if events were deleted since it was read).
func (r *streamReader) more(ctx context.Context) (bool, error) {
	now, _, err := lastOf(ctx, r.st, r.w)
	if err != nil {
		return false, err
	}
	r.last = min(r.last, now)
	return r.last > r.read, nil
}

// replaceSilent handles the error of a wait for a message, and reports
// whether to read on: without --follow, a consumer silent while the
// leader holds more is a lagging replica's, and another takes its place.
func (r *streamReader) replaceSilent(ctx context.Context, err error) (bool, error) {
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if r.w.follow || !errors.Is(err, context.DeadlineExceeded) {
		return false, fmt.Errorf("stream %s: read: %w", r.w.stream, err)
	}
	if ok, err := r.more(ctx); err != nil || !ok {
		return false, err
	}
	r.it.Stop()
	if err := r.open(ctx); err != nil {
		return false, err
	}
	r.renew(ctx)
	return true, nil
}

// deliver hands m to fn unless it is past the window, and reports whether
// the read is over.
func (r *streamReader) deliver(ctx context.Context, m jetstream.Msg, fn func(storedMsg) error) (bool, error) {
	meta, err := m.Metadata()
	if err != nil {
		return true, fmt.Errorf("stream %s: metadata: %w", r.w.stream, err)
	}
	seq := meta.Sequence.Stream
	if r.w.untilSeq > 0 && seq > r.w.untilSeq || !r.w.untilTime.IsZero() && meta.Timestamp.After(r.w.untilTime) {
		return true, nil
	}
	err = fn(storedMsg{Seq: seq, Subject: m.Subject(), Stored: meta.Timestamp, Data: m.Data(), Pending: meta.NumPending})
	if errors.Is(err, errStop) {
		return true, nil
	}
	if err != nil {
		return true, err
	}
	r.read = seq
	if !r.w.follow && time.Since(r.made) >= time.Second {
		r.renew(ctx)
	}
	if r.w.follow || seq < r.last && meta.NumPending > 0 {
		return false, nil
	}
	if seq >= r.last {
		return true, nil
	}
	// Nothing pending by this consumer's replica, though the leader held
	// more when the read began: ask it again.
	ok, err := r.more(ctx)
	return err != nil || !ok, err
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
