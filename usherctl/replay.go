package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"usher/internal/bus"
	"usher/internal/catalog"
	"usher/internal/event"
)

const replaySynopsis = `usherctl replay --stream entries|admissions|orders|ops --queue Q
         [--since 10m | --from-seq N | --from-time RFC3339] [--until RFC3339|SEQ]
         [--follow] [--format json|table] [--max N] [--republish SUBJECT [--yes]]

Prints a queue's events in stream order. Without a start flag it starts at the
stream's first event; without --follow it ends at the newest event stored when
it began. A queue neither the streams nor the catalog know is exit 1. In
json format each line is one object:

  {"seq":N,"stream":"USHER_ENTRIES","subject":"usher.enter.Q","stored":"RFC3339 time","event":{CloudEvents envelope as stored}}

--republish re-sends the events (their stored bytes, with headers
Usher-Replay-Stream and Usher-Replay-Seq, and Nats-Msg-Id replay/STREAM/SEQ)
to SUBJECT for a downstream service that lost its state. It asks first (or
--yes), stops after --max events, and refuses subjects of usher's own
streams: re-sending into the record would falsify it.`

// replayWindow maps --stream to the stream and the subjects of queue q.
// Ops events are filtered by queue after reading (their subjects do not
// carry it); order events by subject, and by their data as well.
func replayWindow(name, q string) (window, bool, error) {
	switch name {
	case "entries":
		return window{stream: event.StreamEntries, filters: []string{event.EnterSubject(q), event.LeaveSubject(q)}}, false, nil
	case "admissions":
		return window{stream: event.StreamAdmissions, filters: []string{event.AdmittedSubject(q)}}, false, nil
	case "orders":
		return window{stream: event.StreamOrders, filters: []string{event.OrderSubjects(q)}}, true, nil
	case "ops":
		// Every ops event of the queue: configuration changes, adaptive
		// limit moves, draws.
		return window{stream: event.StreamOps, filters: []string{event.OpsSubjects}}, true, nil
	}
	return window{}, false, usagef("--stream %q: want entries, admissions, orders or ops", name)
}

// replayFlags are replay's command line.
type replayFlags struct {
	stream, queue, fromTime, until, format, republish string
	since                                             time.Duration
	fromSeq                                           uint64
	follow, yes                                       bool
	max                                               int
}

func (c *cli) replay(ctx context.Context, args []string) error {
	fs := newFlags("replay", replaySynopsis)
	var f replayFlags
	fs.StringVar(&f.stream, "stream", "", "entries, admissions, orders or ops (required)")
	fs.StringVar(&f.queue, "queue", "", "the queue (required)")
	fs.DurationVar(&f.since, "since", 0, "start at events stored this long ago, e.g. 10m")
	fs.Uint64Var(&f.fromSeq, "from-seq", 0, "start at this stream sequence")
	fs.StringVar(&f.fromTime, "from-time", "", "start at events stored at or after this RFC3339 time")
	fs.StringVar(&f.until, "until", "", "stop after this RFC3339 time or stream sequence")
	fs.BoolVar(&f.follow, "follow", false, "keep printing new events until interrupted")
	fs.StringVar(&f.format, "format", "json", "json (one object per line) or table")
	fs.IntVar(&f.max, "max", 1_000_000, "stop after this many events")
	fs.StringVar(&f.republish, "republish", "", "re-send the events to this subject")
	fs.BoolVar(&f.yes, "yes", false, "republish without asking")
	pos, err := c.parse(fs, args)
	if err != nil {
		return done(err)
	}
	if len(pos) > 0 {
		return usagef("replay: unexpected arguments %q", pos)
	}
	w, byData, err := c.replayWindowOf(f)
	if err != nil {
		return err
	}
	nc, js, err := c.jetStream(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()

	if f.republish != "" {
		return c.republish(ctx, nc, js, w, byData, f)
	}
	out := bufio.NewWriterSize(c.stdout, 64<<10)
	n := 0
	err = readStream(ctx, js, w, func(m storedMsg) error {
		if byData && !ofQueue(m.Data, f.queue) {
			return nil
		}
		var err error
		if f.format == "table" {
			err = writeRow(out, m)
		} else {
			err = writeJSON(out, w.stream, m)
		}
		if err != nil {
			return err
		}
		if n++; n >= f.max {
			return errStop
		}
		if m.Pending == 0 { // caught up: show it now (matters with --follow)
			return out.Flush()
		}
		return nil
	})
	if ferr := out.Flush(); err == nil {
		err = ferr
	}
	c.log.Debug("replay done", "stream", w.stream, "queue", f.queue, "events", n)
	if errors.Is(err, context.Canceled) && f.follow {
		return nil // interrupted, as --follow expects
	}
	if err == nil && n == 0 {
		err = unknownReplayQueue(ctx, js, f.queue)
	}
	return err
}

// unknownReplayQueue is replay's answer when it printed nothing for a queue
// nothing knows — no catalog entry, and no event of it in any stream — and
// nil for any other: an empty replay with exit 0 would pass a typo off as a
// quiet queue (audit, report and rebuild refuse such a name the same way).
func unknownReplayQueue(ctx context.Context, js jetstream.JetStream, q string) error {
	if _, known := currentTarget(ctx, js, q); known {
		return nil
	}
	for _, name := range []string{"entries", "admissions", "orders"} {
		w, _, _ := replayWindow(name, q)
		st, err := js.Stream(ctx, w.stream)
		if err != nil {
			return fmt.Errorf("stream %s: %w", w.stream, err)
		}
		for _, filter := range w.filters {
			info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
			if err != nil {
				return fmt.Errorf("stream %s: %w", w.stream, err)
			}
			if len(info.State.Subjects) > 0 {
				return nil
			}
		}
	}
	ops, _, _ := replayWindow("ops", q)
	found := false
	err := readStream(ctx, js, ops, func(m storedMsg) error {
		if found = ofQueue(m.Data, q); found {
			return errStop
		}
		return nil
	})
	if err != nil || found {
		return err
	}
	return noQueue("replay", q)
}

// replayWindowOf checks the flags all at once and turns them into a window.
func (c *cli) replayWindowOf(f replayFlags) (window, bool, error) {
	var problems []string
	if f.queue == "" {
		problems = append(problems, "--queue is required")
	} else if !catalog.ValidName(f.queue) {
		problems = append(problems, fmt.Sprintf("--queue %q is not a queue name", f.queue))
	}
	w, byData, err := replayWindow(f.stream, f.queue)
	if f.stream == "" {
		problems = append(problems, "--stream is required (entries, admissions, orders or ops)")
	} else if err != nil {
		problems = append(problems, err.Error())
	}
	starts := 0
	if f.since != 0 {
		starts++
		if f.since < 0 {
			problems = append(problems, "--since must be positive")
		}
		w.fromTime = c.now().Add(-f.since)
	}
	if f.fromSeq != 0 {
		starts++
		w.fromSeq = f.fromSeq
	}
	if f.fromTime != "" {
		starts++
		t, err := time.Parse(time.RFC3339Nano, f.fromTime)
		if err != nil {
			problems = append(problems, fmt.Sprintf("--from-time %q: want an RFC3339 time such as 2026-01-02T15:04:05Z", f.fromTime))
		}
		w.fromTime = t
	}
	if starts > 1 {
		problems = append(problems, "give at most one of --since, --from-seq, --from-time")
	}
	if f.until != "" {
		if n, err := strconv.ParseUint(f.until, 10, 64); err == nil {
			w.untilSeq = n
		} else if t, err := time.Parse(time.RFC3339Nano, f.until); err == nil {
			w.untilTime = t
		} else {
			problems = append(problems, fmt.Sprintf("--until %q: want an RFC3339 time or a stream sequence", f.until))
		}
	}
	if f.format != "json" && f.format != "table" {
		problems = append(problems, fmt.Sprintf("--format %q: want json or table", f.format))
	}
	if f.max < 1 {
		problems = append(problems, "--max must be at least 1")
	}
	if f.republish != "" {
		if err := checkRepublishSubject(f.republish); err != nil {
			problems = append(problems, err.Error())
		}
	} else if f.yes {
		problems = append(problems, "--yes only goes with --republish")
	}
	w.follow = f.follow
	if len(problems) > 0 {
		return w, false, usagef("replay: %s", strings.Join(problems, "; "))
	}
	return w, byData, nil
}

// replayLine is the json format: the stored envelope with where it is stored.
type replayLine struct {
	Seq     uint64          `json:"seq"`
	Stream  string          `json:"stream"`
	Subject string          `json:"subject"`
	Stored  time.Time       `json:"stored"`
	Event   json.RawMessage `json:"event,omitempty"`
	// Raw holds a stored body that is not JSON, so nothing is hidden.
	Raw string `json:"raw,omitempty"`
}

func writeJSON(w io.Writer, stream string, m storedMsg) error {
	l := replayLine{Seq: m.Seq, Stream: stream, Subject: m.Subject, Stored: m.Stored.UTC()}
	if json.Valid(m.Data) {
		l.Event = m.Data
	} else {
		l.Raw = string(m.Data)
	}
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	_, err = w.Write(b)
	return err
}

// looseEvent is any usher event, decoded for display and filtering only.
type looseEvent struct {
	ID   string    `json:"id"`
	Type string    `json:"type"`
	Time time.Time `json:"time"`
	Data struct {
		Queue    string       `json:"queue"`
		User     string       `json:"user"`
		By       string       `json:"by"`
		Seq      uint64       `json:"seq"`
		TokenID  string       `json:"tokenId"`
		OrderID  string       `json:"orderId"`
		Config   *looseConfig `json:"config"`
		Previous *looseConfig `json:"previous"`
		// An order's: its final status and reason, and when it was
		// requested (see usherctl report).
		Status      string    `json:"status"`
		Reason      string    `json:"reason"`
		RequestedAt time.Time `json:"requestedAt"`
		// A usher.joins.v2 message's joins, in their order.
		Joins []struct {
			User string `json:"user"`
		} `json:"joins"`
	} `json:"data"`
}

func decodeLoose(b []byte) (looseEvent, bool) {
	var e looseEvent
	err := json.Unmarshal(b, &e)
	return e, err == nil
}

// ofQueue reports whether an order or ops event belongs to queue q (see
// looseEvent.of).
func ofQueue(b []byte, q string) bool {
	e, ok := decodeLoose(b)
	return ok && e.of(q)
}

// of reports whether the event belongs to queue q: its data names the
// queue, or its token id is q's (tokens are "q:seq").
func (e looseEvent) of(q string) bool {
	if e.Data.Queue != "" {
		return e.Data.Queue == q
	}
	return strings.HasPrefix(e.Data.TokenID, q+":")
}

func writeRow(w io.Writer, m storedMsg) error {
	e, _ := decodeLoose(m.Data)
	var what []string
	if e.Data.User != "" {
		what = append(what, "user="+e.Data.User)
	}
	if len(e.Data.Joins) > 0 {
		users := make([]string, len(e.Data.Joins))
		for i, j := range e.Data.Joins {
			users[i] = j.User
		}
		what = append(what, "joins="+itoa(uint64(len(users))), "users="+strings.Join(users, ","))
	}
	if e.Data.Seq != 0 {
		what = append(what, "seq="+itoa(e.Data.Seq))
	}
	if e.Data.TokenID != "" {
		what = append(what, "token="+e.Data.TokenID)
	}
	if e.Data.OrderID != "" {
		what = append(what, "order="+e.Data.OrderID)
	}
	if e.Data.By != "" {
		what = append(what, "by="+e.Data.By)
	}
	_, err := fmt.Fprintf(w, "%-10d %-30s %-28s %s\n", m.Seq, m.Stored.UTC().Format(time.RFC3339Nano), e.Type, strings.Join(what, " "))
	return err
}

// checkRepublishSubject refuses a subject one of usher's own streams holds.
func checkRepublishSubject(subj string) error {
	if strings.ContainsAny(subj, "*> \t") || strings.HasPrefix(subj, ".") || strings.HasSuffix(subj, ".") || strings.Contains(subj, "..") {
		return fmt.Errorf("--republish %q: want a literal subject (no wildcards or spaces)", subj)
	}
	for _, st := range bus.Streams() {
		for _, pattern := range st.Subjects {
			if subjectMatches(pattern, subj) {
				return fmt.Errorf("--republish %q: that subject belongs to usher's stream %s; re-sending into the record would falsify it", subj, st.Name)
			}
		}
	}
	return nil
}

// subjectMatches reports whether a literal subject matches a NATS pattern.
func subjectMatches(pattern, subj string) bool {
	p, s := strings.Split(pattern, "."), strings.Split(subj, ".")
	for i, tok := range p {
		if tok == ">" {
			return len(s) > i
		}
		if i >= len(s) || (tok != "*" && tok != s[i]) {
			return false
		}
	}
	return len(p) == len(s)
}

// republish re-sends the window's events to f.republish after asking.
func (c *cli) republish(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, w window, byData bool, f replayFlags) error {
	if w.follow {
		return usagef("replay: --republish does not go with --follow")
	}
	held, err := heldEvents(ctx, js, w)
	if err != nil {
		return err
	}
	if held == 0 { // nothing to send: say so of a mistyped name before asking
		if err := unknownReplayQueue(ctx, js, f.queue); err != nil {
			return err
		}
	}
	p := &republisher{nc: nc, js: js, subject: f.republish}
	// A subject some stream captures gets JetStream publishes (acked); any
	// other gets core publishes and a flush.
	p.stream, _ = js.StreamNameBySubject(ctx, f.republish)
	question := fmt.Sprintf("Republish up to %d events of %s (queue %s) to %s", min(held, uint64(f.max)), w.stream, f.queue, f.republish)
	if p.stream != "" {
		question += " (stored by stream " + p.stream + ")"
	}
	if !f.yes && !c.ask(question) {
		fmt.Fprintln(c.stderr, "nothing republished")
		return nil
	}
	err = readStream(ctx, js, w, func(m storedMsg) error {
		if byData && !ofQueue(m.Data, f.queue) {
			return nil
		}
		if err := p.send(ctx, w.stream, m); err != nil {
			return err
		}
		if p.sent >= f.max {
			return errStop
		}
		return nil
	})
	if err == nil {
		err = p.finish(ctx)
	}
	if err == nil && p.sent == 0 {
		err = unknownReplayQueue(ctx, js, f.queue)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "republished %d events of %s (queue %s) to %s\n", p.sent, w.stream, f.queue, f.republish)
	return nil
}

// heldEvents counts the events of the window's filters the stream holds.
func heldEvents(ctx context.Context, js jetstream.JetStream, w window) (uint64, error) {
	st, err := js.Stream(ctx, w.stream)
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", w.stream, err)
	}
	var held uint64
	for _, filter := range w.filters {
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
		if err != nil {
			return 0, fmt.Errorf("stream %s: %w", w.stream, err)
		}
		for _, n := range info.State.Subjects {
			held += n
		}
	}
	return held, nil
}

// republishAcks bounds the JetStream acks outstanding.
const republishAcks = 1024

// republisher sends stored events to one subject: as JetStream publishes
// when stream stores it, as core publishes otherwise.
type republisher struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	subject string
	stream  string // the stream that stores subject, or ""
	pending []jetstream.PubAckFuture
	sent    int
}

// send republishes m, read from stream, with headers that say where it
// came from and a message id that makes a second replay a duplicate.
func (p *republisher) send(ctx context.Context, stream string, m storedMsg) error {
	msg := nats.NewMsg(p.subject)
	msg.Data = m.Data
	msg.Header.Set("Usher-Replay-Stream", stream)
	msg.Header.Set("Usher-Replay-Seq", itoa(m.Seq))
	msg.Header.Set(jetstream.MsgIDHeader, "replay/"+stream+"/"+itoa(m.Seq))
	if p.stream != "" {
		fut, err := p.js.PublishMsgAsync(msg)
		if err != nil {
			return fmt.Errorf("republish: %w", err)
		}
		if p.pending = append(p.pending, fut); len(p.pending) >= republishAcks {
			if err := p.wait(ctx); err != nil {
				return err
			}
		}
	} else if err := p.nc.PublishMsg(msg); err != nil {
		return fmt.Errorf("republish: %w", err)
	}
	if p.sent++; p.sent == 1 {
		// A broker that may not take the subject says so only
		// asynchronously, and never acks a JetStream publish it refused:
		// find out before sending the rest or waiting for an ack.
		return refused(p.nc, p.subject)
	}
	return nil
}

// wait waits for the acks outstanding.
func (p *republisher) wait(ctx context.Context) error {
	for _, f := range p.pending {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("republish to %s refused by stream %s: %w", p.subject, p.stream, err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	p.pending = p.pending[:0]
	return nil
}

// finish checks the broker took the subject and every publish was acked.
func (p *republisher) finish(ctx context.Context) error {
	if err := refused(p.nc, p.subject); err != nil {
		return err
	}
	return p.wait(ctx)
}

// refused flushes nc and reports a publish to subj the broker refused: a
// core publish outside the connection's permissions (usherctl's are
// replay.>) is dropped by the server, which tells the client only with an
// asynchronous error, ahead of the flush's answer.
func refused(nc *nats.Conn, subj string) error {
	if err := nc.FlushTimeout(10 * time.Second); err != nil {
		return fmt.Errorf("republish: %w", err)
	}
	if err := nc.LastError(); errors.Is(err, nats.ErrPermissionViolation) &&
		strings.Contains(err.Error(), fmt.Sprintf("Publish to %q", subj)) {
		return fmt.Errorf("republish to %s refused by the broker (%w): usherctl may publish only under replay.> "+
			"(a downstream reader <name> subscribes to replay.<name>.>)", subj, err)
	}
	return nil
}

// ask puts a y/N question on stderr and reads the answer from stdin.
func (c *cli) ask(question string) bool {
	fmt.Fprintf(c.stderr, "%s? [y/N] ", question)
	line, _ := bufio.NewReader(c.stdin).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true
	}
	return false
}
