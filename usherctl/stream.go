package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"usher/internal/bus"
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

// readStream calls fn with every event in the window, in stream order,
// read with batched direct gets (bus.Get): usherctl may create no consumer
// (see bus.Policy.Permissions). The next batch is asked for as soon as the
// last one has arrived, while fn works through it, as a consumer would
// send the next messages ahead.
//
// A direct get may be answered by any replica of the stream, and after a
// NATS node's restart that may be one that has not caught up: it answers
// that nothing matches after the last event read while the stream's leader
// holds more. So without --follow the end is the leader's: a read that
// seems to end before the last event the leader held when it began asks
// the leader again, and reads on from just after the last event read.
// With --follow the read asks again four times a second once it has read
// everything.
func readStream(ctx context.Context, js jetstream.JetStream, w window, fn func(storedMsg) error) error {
	nc := js.Conn()
	// Without --follow the read ends at the newest matching event as of now,
	// found with one lookup by the leader per filter: events keep arriving
	// on a live queue, and waiting for "no more" would be a guess with a
	// timeout.
	var last uint64
	if !w.follow {
		var stored time.Time
		var err error
		if last, stored, err = lastOf(ctx, nc, w); err != nil {
			return err
		}
		// A start after the newest event: nothing to read.
		if last == 0 || last < w.fromSeq || stored.Before(w.fromTime) {
			return nil
		}
	}
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	events := make(chan bus.Stored, readBatch)
	fetched := make(chan error, 1)
	go func() {
		defer close(events)
		fetched <- fetch(fctx, nc, w, last, events)
	}()
	// done ends the read early: the fetch stops, and what it sent is
	// dropped.
	done := func(err error) error {
		stop()
		for range events {
		}
		if errors.Is(err, errStop) {
			return nil
		}
		return err
	}
	for m := range events {
		if w.untilSeq > 0 && m.Seq > w.untilSeq || !w.untilTime.IsZero() && m.Stored.After(w.untilTime) {
			return done(nil)
		}
		if len(w.filters) > 1 && !matchesAny(w.filters, m.Subject) {
			continue
		}
		if err := fn(storedMsg{Seq: m.Seq, Subject: m.Subject, Stored: m.Stored, Data: m.Data, Pending: m.Pending}); err != nil {
			return done(err)
		}
	}
	return <-fetched
}

// fetch sends to events every event of the window's stream on its filters
// (see cover), from its start, batch after batch, until the leader's last
// (or, with --follow, until ctx ends).
func fetch(ctx context.Context, nc *nats.Conn, w window, last uint64, events chan<- bus.Stored) error {
	filter := cover(w.filters)
	var read uint64 // the last sequence fetched
	for {
		req := bus.GetRequest{Subject: filter, Batch: readBatch}
		switch {
		case read > 0:
			req.Seq = read + 1
		case w.fromSeq > 0:
			req.Seq = w.fromSeq
		case !w.fromTime.IsZero():
			t := w.fromTime
			req.StartTime = &t
		}
		end, err := bus.Get(ctx, nc, w.stream, req, func(m bus.Stored) error {
			select {
			case events <- m:
				read = m.Seq
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		if err != nil {
			return fmt.Errorf("stream %s: read: %w", w.stream, err)
		}
		if end.Last > 0 && end.Pending > 0 {
			continue
		}
		if !w.follow {
			if read >= last {
				return nil
			}
			// Nothing more by the replica that answered, though the
			// leader held more when the read began: ask the leader again
			// (events may have been deleted since), and another replica.
			now, _, err := lastOf(ctx, nc, w)
			if err != nil {
				return err
			}
			if last = min(last, now); read >= last {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// readBatch is how many events one direct get asks for.
const readBatch = 4096

// lastOf is the newest event of the window's filters the stream's leader
// holds (0: none), and when the stream stored it: a message get through
// the JetStream API, which the leader answers (a direct get may be answered
// by a replica that has not caught up).
func lastOf(ctx context.Context, nc *nats.Conn, w window) (uint64, time.Time, error) {
	var last uint64
	var stored time.Time
	for _, f := range w.filters {
		req, _ := json.Marshal(map[string]string{"last_by_subj": f})
		m, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+w.stream, req)
		if err != nil {
			return 0, time.Time{}, fmt.Errorf("stream %s: last event on %s: %w", w.stream, f, err)
		}
		var resp struct {
			Error *struct {
				Code        int    `json:"code"`
				ErrCode     int    `json:"err_code"`
				Description string `json:"description"`
			} `json:"error"`
			Message struct {
				Seq  uint64    `json:"seq"`
				Time time.Time `json:"time"`
			} `json:"message"`
		}
		if err := json.Unmarshal(m.Data, &resp); err != nil {
			return 0, time.Time{}, fmt.Errorf("stream %s: last event on %s: %w", w.stream, f, err)
		}
		if e := resp.Error; e != nil {
			if e.Code == 404 && e.ErrCode == noMessageFound {
				continue
			}
			if e.Code == 404 {
				return 0, time.Time{}, fmt.Errorf("stream %s: %w", w.stream, jetstream.ErrStreamNotFound)
			}
			return 0, time.Time{}, fmt.Errorf("stream %s: last event on %s: %s", w.stream, f, e.Description)
		}
		if resp.Message.Seq > last {
			last, stored = resp.Message.Seq, resp.Message.Time
		}
	}
	return last, stored, nil
}

// noMessageFound is JetStream's error code for a get that found nothing.
const noMessageFound = 10037

// cover is one subject filter matching every subject the filters match:
// the filter itself, or, for filters of as many tokens, each token the
// filters disagree on made a wildcard (usher.enter.q and usher.leave.q:
// usher.*.q); else everything.
func cover(filters []string) string {
	if len(filters) == 1 {
		return filters[0]
	}
	tokens := strings.Split(filters[0], ".")
	for _, f := range filters[1:] {
		other := strings.Split(f, ".")
		if len(other) != len(tokens) {
			return ">"
		}
		for i := range tokens {
			if other[i] != tokens[i] {
				if tokens[i] == ">" || other[i] == ">" {
					return ">"
				}
				tokens[i] = "*"
			}
		}
	}
	return strings.Join(tokens, ".")
}

// matchesAny reports whether subject matches one of the filters.
func matchesAny(filters []string, subject string) bool {
	for _, f := range filters {
		if matches(f, subject) {
			return true
		}
	}
	return false
}

// matches reports whether subject matches the NATS filter pattern.
func matches(pattern, subject string) bool {
	p, s := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, tok := range p {
		switch {
		case tok == ">":
			return len(s) > i
		case i >= len(s):
			return false
		case tok != "*" && tok != s[i]:
			return false
		}
	}
	return len(p) == len(s)
}
