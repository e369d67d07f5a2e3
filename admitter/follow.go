package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"usher/internal/bus"
	"usher/internal/event"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/projection"
)

// A follower applies one stream's events of one queue to the queue's line
// in Redis, in stream order, from where the line's cursor says it stopped.
//
// There is no durable consumer and no ack: the cursor in Redis, moved in the
// same atomic step as the events' effects, is the only record of progress.
// So nothing waits for an ack wait: a follower that freezes or dies holds
// nothing back (another admitter's follower, or its own restart, reads the
// cursor and goes on at once), and a Redis that loses writes loses the
// cursor's advance with them — the follower notices (its next apply, or its
// once-a-second check, finds the cursor behind what it applied) and replays
// exactly the gap. Several admitters may follow the same queue: an event at
// or below the cursor is skipped, so each is applied once.
//
// Each queue has its own followers, so one queue's trouble (a Redis shard
// down, an event it cannot apply) never holds back another queue.
type follower struct {
	log     *slog.Logger
	js      jetstream.JetStream
	line    *projection.Projection
	queue   string
	stream  string   // JetStream stream name
	field   string   // the cursor's field (waitqueue.StreamEntries, …)
	filters []string // the queue's subjects in the stream
	subject string   // one subject that matches them all (a direct get takes one)
	// get reads the stream with a direct get (see catchUp).
	get func(ctx context.Context, req bus.GetRequest, fn func(bus.Stored) error) (bus.GetEnd, error)
	// apply decodes and applies a batch in one script call.
	apply func(ctx context.Context, streamID string, prev uint64, msgs []jetstream.Msg) (waitqueue.Applied, error)
	// onStale is called when the line belongs to another incarnation of
	// the stream (entries only): it clears the line so it starts afresh.
	onStale func(ctx context.Context) error
	batch   int
	metrics *metrics
	// streamID is the stream's identity as the admitter last read it: a
	// stream deleted and recreated under a running follower (whose ordered
	// consumer would carry on at its old sequence) is noticed by it.
	streamID func() string
	// head is the last event of the queue the stream holds, as its leader
	// says: a consumer that has been silent while the stream holds events
	// after the last one applied is replaced (see checkSilence).
	head func(ctx context.Context) (waitqueue.Head, error)

	applied atomic.Uint64 // the last stream sequence this follower applied
	pending atomic.Uint64 // messages in the stream after the last one delivered
	kick    chan struct{} // check the cursor now (an admission tick found the line behind)

	mu         sync.Mutex
	stuckSince time.Time // when the current batch first failed to apply (zero: not stuck)
	stuckAt    uint64    // its first sequence
}

func newFollower(a *admitter, q, stream, field, subject string, filters ...string) *follower {
	return &follower{log: a.log.With("queue", q, "stream", stream), js: a.js, line: a.projection, queue: q,
		stream: stream, field: field, filters: filters, subject: subject, batch: 1000, metrics: a.metrics, kick: make(chan struct{}, 1),
		streamID: func() string { return a.streams.StreamID(stream) },
		head:     func(ctx context.Context) (waitqueue.Head, error) { return a.streams.Head(ctx, stream, q) },
		get: func(ctx context.Context, req bus.GetRequest, fn func(bus.Stored) error) (bus.GetEnd, error) {
			return bus.Get(ctx, a.js.Conn(), stream, req, fn)
		}}
}

// Kick asks the follower to check the line's cursor at once.
func (f *follower) Kick() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// errRewound ends one pass of follow: the line's cursor went back.
var errRewound = errors.New("the line lost writes: its cursor is behind what was applied")

// errSilent ends one pass of follow: its consumer delivers nothing, or
// lags (see lagFor), although the stream holds events after the last one
// applied.
var errSilent = errors.New("the consumer does not deliver what the stream holds")

// silentFor is how long a consumer may deliver nothing before the follower
// asks the stream's leader whether it holds events the consumer has not
// delivered. While the answer is no (an idle queue), it asks again after
// twice as long each time, up to silentMax: an idle queue costs its
// followers a question every half minute, not every second. A question
// nobody answers (no leader yet) is asked again at the next second, and a
// kick (the admission tick found the line behind the stream) asks at once,
// at most once a second.
const (
	silentFor = 3 * time.Second
	silentMax = 30 * time.Second
)

// lagFor is how long a consumer may leave undelivered an event the
// stream's leader held, while the admission ticks find the line behind,
// before the follower replaces it. An ordered consumer lives on one
// replica, which NATS picks at random: one that lags (a node catching up
// after its disk resumed or its partition healed) goes on delivering,
// older events one after another, so it is never silent, and the queue's
// admission would wait on that replica's catch-up.
const lagFor = 2 * time.Second

// createWait bounds the creation of a follower's consumer, as headWait
// bounds a read of a stream's head: a request sent while the cluster has
// no metadata leader (a NATS node killed; the fault suite's elections take
// 4–7 s) is never answered, and with the client's default of 5 s a queue's
// admission would stay stopped up to 5 s after the new leader could have
// made the consumer (a consumer silent for silentFor, 3 s, is replaced
// while the election may still be running). Asked again a moment after a
// second, it is made within about a second of the election.
const createWait = time.Second

// Run follows the stream until ctx ends, starting again from the line's
// cursor whenever the line turns out to have lost writes.
func (f *follower) Run(ctx context.Context) error {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := f.follow(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, errRewound):
			f.metrics.rewinds.WithLabelValues(f.queue, f.field).Inc()
			backoff = 100 * time.Millisecond
			continue
		case errors.Is(err, errSilent):
			backoff = 100 * time.Millisecond
			continue
		case err != nil:
			f.log.Warn("following stream", "err", err)
			sleep(ctx, backoff)
			backoff = min(2*backoff, 2*time.Second)
		}
	}
	return nil
}

// follow is one pass: read the cursor, consume from just after it, apply
// batches until the line turns out to have lost writes or ctx ends.
func (f *follower) follow(ctx context.Context) error {
	pos, err := f.position(ctx)
	if err != nil {
		return err
	}
	msgs, cc, err := f.consume(ctx, pos)
	if err != nil {
		n, cerr := f.catchUp(ctx, pos)
		if n > 0 {
			f.log.Info("no consumer yet; applied the stream's events with direct gets", "n", n, "consumer", err)
		}
		if cerr != nil || n == 0 {
			return errors.Join(err, cerr)
		}
		return nil // a new pass tries the consumer again at once
	}
	defer cc.Stop()

	p := newPass(pos, msgs, f.batch)
	f.applied.Store(p.prev)
	check := time.NewTicker(time.Second)
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-msgs:
			err = f.applyDelivered(ctx, p, m)
		case <-f.kick:
			err = f.onKick(ctx, p)
		case now := <-check.C:
			err = f.onCheck(ctx, p, now)
		}
		if err != nil {
			return err
		}
	}
}

// position reads where a pass starts: the stream's identity and the line's
// cursor in it. A cursor of another incarnation of the stream means nothing
// in this one, so the pass starts at the stream's beginning — after the
// line is cleared (entries only), since what it holds came from events the
// stream no longer has.
func (f *follower) position(ctx context.Context) (waitqueue.Position, error) {
	sid, err := bus.StreamID(ctx, f.js, f.stream)
	if err != nil {
		return waitqueue.Position{}, err
	}
	cur, err := f.line.Cursor(ctx, f.queue)
	if err != nil {
		return waitqueue.Position{}, err
	}
	pos := cur[f.field]
	if pos.StreamID == sid {
		return pos, nil
	}
	if pos.StreamID != "" && f.onStale != nil {
		f.log.Warn("the line belongs to an older incarnation of the stream; starting it afresh",
			"had", pos.StreamID, "now", sid)
		if err := f.onStale(ctx); err != nil {
			return waitqueue.Position{}, err
		}
	}
	return waitqueue.Position{StreamID: sid}, nil
}

// consume starts an ordered consumer of the queue's subjects just after
// pos. Its deliveries go through a channel of two batches, so the pass can
// gather what is already delivered into one script call; the callback gives
// up on ctx's end so that stopping the consumer never waits on a full
// channel. Creation is bounded by createWait (see there).
func (f *follower) consume(ctx context.Context, pos waitqueue.Position) (chan jetstream.Msg, jetstream.ConsumeContext, error) {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: f.filters, DeliverPolicy: jetstream.DeliverAllPolicy}
	if pos.Seq > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, pos.Seq+1
	}
	cctx, cancel := context.WithTimeout(ctx, createWait)
	cons, err := f.js.OrderedConsumer(cctx, f.stream, cfg)
	cancel()
	if err != nil {
		return nil, nil, fmt.Errorf("consumer: %w", err)
	}
	msgs := make(chan jetstream.Msg, 2*f.batch)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case msgs <- m:
		case <-ctx.Done():
		}
	}, jetstream.PullMaxMessages(f.batch))
	if err != nil {
		return nil, nil, fmt.Errorf("consume: %w", err)
	}
	return msgs, cc, nil
}

// A pass is what one pass of follow carries from one event to the next:
// the stream it follows, the last sequence it applied, and the clock by
// which its consumer is judged silent (see silentFor).
type pass struct {
	sid   string
	msgs  chan jetstream.Msg
	batch []jetstream.Msg // reused by every batch, so a busy queue allocates none
	prev  uint64          // the last sequence applied
	heard time.Time       // the last delivery, or the consumer's start
	ask   time.Time       // when to ask the leader next
	wait  time.Duration   // the wait after that
	asked time.Time       // the last question to the leader
	// lagHead is an event the leader held at lagSince and the consumer had
	// not delivered then (0: none noted; see lagFor).
	lagHead  uint64
	lagSince time.Time
}

func newPass(pos waitqueue.Position, msgs chan jetstream.Msg, batch int) *pass {
	p := &pass{sid: pos.StreamID, msgs: msgs, batch: make([]jetstream.Msg, 0, batch), prev: pos.Seq}
	p.heardAt(time.Now())
	return p
}

// heardAt starts the silence clock again: a consumer that delivers is not
// silent, and the next question waits the shortest wait.
func (p *pass) heardAt(now time.Time) {
	p.heard = now
	p.ask, p.wait = now.Add(silentFor), silentFor
}

// applyDelivered applies m together with whatever else is already
// delivered, up to a batch: one script call for all that waits rather than
// one per event.
func (f *follower) applyDelivered(ctx context.Context, p *pass, m jetstream.Msg) error {
	p.batch = append(p.batch[:0], m)
fill:
	for len(p.batch) < f.batch {
		select {
		case m := <-p.msgs:
			p.batch = append(p.batch, m)
		default:
			break fill
		}
	}
	last, err := f.applyBatch(ctx, p.sid, p.prev, p.batch)
	if err != nil {
		return err
	}
	p.prev = last
	p.heardAt(time.Now())
	return nil
}

// onCheck is the once-a-second look at the line's cursor and at a consumer
// that has gone silent.
func (f *follower) onCheck(ctx context.Context, p *pass, now time.Time) error {
	if err := f.checkCursor(ctx, p.sid); err != nil {
		return err
	}
	return f.askIfSilent(ctx, p, now)
}

// onKick answers an admission tick that found the line behind the stream:
// the cursor is checked now, and a consumer silent for silentFor is asked
// about now, not after an idle queue's wait or at the next check; one that
// delivers is judged by its lag (see lagFor) — at most once a second,
// since a tick kicks every 20 ms while the line is behind (within the
// second, the next check asks).
func (f *follower) onKick(ctx context.Context, p *pass) error {
	if err := f.checkCursor(ctx, p.sid); err != nil {
		return err
	}
	if soon := p.heard.Add(silentFor); soon.Before(p.ask) {
		p.ask = soon
	}
	now := time.Now()
	switch {
	case now.Sub(p.asked) < time.Second:
		return nil
	case now.Sub(p.heard) < silentFor:
		return f.askIfLagging(ctx, p, now)
	}
	return f.askIfSilent(ctx, p, now)
}

// askIfLagging notes an event the stream's leader holds and the consumer
// has not delivered, and replaces the consumer if, lagFor later, it still
// has not. Deliveries waiting in the channel are this follower's own
// slowness, not the consumer's: nothing is judged while there are any.
func (f *follower) askIfLagging(ctx context.Context, p *pass, now time.Time) error {
	if len(p.msgs) > 0 {
		return nil
	}
	p.asked = now
	if p.lagHead > p.prev {
		if now.Sub(p.lagSince) < lagFor {
			return nil
		}
		f.log.Warn("the consumer lags the stream's leader; following it with a new consumer",
			"applied", p.prev, "leaderHeld", p.lagHead, "since", now.Sub(p.lagSince).Round(time.Millisecond).String())
		return errSilent
	}
	p.lagHead = 0
	h, err := f.head(ctx)
	if err != nil || h.StreamID != p.sid || h.Seq <= p.prev {
		return nil // no leader to ask, or nothing undelivered
	}
	p.lagHead, p.lagSince = h.Seq, now
	return nil
}

// askIfSilent asks the stream's leader about a consumer that has delivered
// nothing for silentFor, once its wait is up (see checkSilence). Deliveries
// waiting in the channel are not silence. A question nobody answers (no
// leader yet, an election) leaves the wait as it was, so it is asked again
// at the next check or kick; an answer doubles the wait, up to silentMax.
func (f *follower) askIfSilent(ctx context.Context, p *pass, now time.Time) error {
	if len(p.msgs) > 0 || now.Sub(p.heard) < silentFor || now.Before(p.ask) {
		return nil
	}
	answered, err := f.checkSilence(ctx, p.sid, p.heard)
	p.asked = now
	if err != nil || !answered {
		return err
	}
	p.ask, p.wait = now.Add(p.wait), min(2*p.wait, silentMax)
	return nil
}

// applyBatch applies one batch, retrying while Redis cannot take it: the
// batch is never dropped, and while it waits the follower reports what it
// holds back.
func (f *follower) applyBatch(ctx context.Context, sid string, prev uint64, batch []jetstream.Msg) (uint64, error) {
	first, last := seqOf(batch[0]), seqOf(batch[len(batch)-1])
	backoff := 50 * time.Millisecond
	for {
		res, err := f.apply(ctx, sid, prev, batch)
		if err == nil {
			f.unstuck()
			if res.Rewound {
				f.log.Warn("the line lost writes; replaying from its cursor", "applied", prev, "cursor", res.Cursor)
				return 0, errRewound
			}
			if res.Conflicts > 0 {
				f.log.Error("events name another user than the line holds for their entry; skipped",
					"n", res.Conflicts, "from", first, "to", last)
			}
			f.applied.Store(last)
			if md, err := batch[len(batch)-1].Metadata(); err == nil {
				f.pending.Store(md.NumPending)
				f.metrics.behind.WithLabelValues(f.queue, f.field).Set(float64(md.NumPending))
			}
			f.metrics.applied.WithLabelValues(f.queue, f.field).Add(float64(len(batch)))
			return last, nil
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if errors.Is(err, waitqueue.ErrStale) {
			return 0, errRewound // follow starts again and clears the line
		}
		f.stuck(first, err)
		sleep(ctx, backoff)
		backoff = min(2*backoff, time.Second)
	}
}

// checkCursor compares the line's cursor with what this follower applied:
// a cursor behind it means Redis lost writes (a restart that lost its last
// second, a failover, a flush) even if no new event has come to show it.
func (f *follower) checkCursor(ctx context.Context, sid string) error {
	if now := f.streamID(); now != "" && now != sid {
		f.log.Warn("the stream was recreated; following the new one", "was", sid, "now", now)
		return errRewound
	}
	cur, err := f.line.Cursor(ctx, f.queue)
	if err != nil {
		f.stuck(f.applied.Load()+1, err)
		return nil
	}
	pos := cur[f.field]
	at := pos.Seq
	if pos.StreamID != sid {
		at = 0
	}
	if applied := f.applied.Load(); at < applied {
		f.log.Warn("the line lost writes; replaying from its cursor", "applied", applied, "cursor", at)
		return errRewound
	}
	return nil
}

// checkSilence asks the stream's leader for the queue's last event. One
// after the last applied, while the consumer has delivered nothing since
// heard, means the consumer will not deliver it: an ordered consumer is
// one replica's, and after a NATS node's kill that may be a replica that
// has not caught up (its heartbeats go on, so the client does not replace
// it) — the queue's admission would wait for it. A new consumer is made
// from the cursor. A leader that cannot answer says nothing either way:
// answered is false, and the follower asks again at its next check rather
// than after the longer wait of an idle queue — a stream without a leader
// for a while (a NATS node's kill) is the case this check is for, and the
// first answer after the election is the one that counts.
func (f *follower) checkSilence(ctx context.Context, sid string, heard time.Time) (answered bool, err error) {
	h, err := f.head(ctx)
	if err != nil {
		return false, nil
	}
	if h.StreamID != sid {
		return true, nil
	}
	if applied := f.applied.Load(); h.Seq > applied {
		f.log.Warn("the stream holds events its consumer has not delivered; following it with a new consumer",
			"applied", applied, "head", h.Seq, "silent", time.Since(heard).Round(time.Millisecond).String())
		return true, errSilent
	}
	return true, nil
}

// stuck records that the batch starting at seq cannot be applied, and
// says so once a second while it lasts: this is what holds the queue's
// admission back.
func (f *follower) stuck(seq uint64, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	if f.stuckSince.IsZero() {
		f.stuckSince, f.stuckAt = now, seq
		return
	}
	held := now.Sub(f.stuckSince)
	f.metrics.stalled.WithLabelValues(f.queue, f.field).Set(held.Seconds())
	if held >= time.Second {
		f.log.Error("holding back the queue: events cannot be applied to the line",
			"seq", f.stuckAt, "for", held.Round(time.Millisecond).String(), "err", err)
	}
}

func (f *follower) unstuck() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.stuckSince.IsZero() {
		f.log.Info("events apply again", "seq", f.stuckAt, "after", time.Since(f.stuckSince).Round(time.Millisecond).String())
		f.stuckSince = time.Time{}
		f.metrics.stalled.WithLabelValues(f.queue, f.field).Set(0)
	}
}

func seqOf(m jetstream.Msg) uint64 {
	md, err := m.Metadata()
	if err != nil {
		return 0
	}
	return md.Sequence.Stream
}

// The three followers of a queue.

func entriesFollower(a *admitter, q string) *follower {
	f := newFollower(a, q, event.StreamEntries, waitqueue.StreamEntries, event.EntrySubjects(q), event.EnterSubject(q), event.LeaveSubject(q))
	dec := &entryDecoder{log: f.log} // the follower applies one batch at a time
	f.apply = func(ctx context.Context, sid string, prev uint64, msgs []jetstream.Msg) (waitqueue.Applied, error) {
		// A batch is cut, between messages, into calls of at most
		// maxEntryEvents events (a usher.joins.v2 message may list up to
		// 1024 joins), so one script call holds Redis no longer than a
		// batch of one-join messages did; a message's joins stay in one
		// call, which applies them all (see apply_entries.lua).
		var res waitqueue.Applied
		evs := make([]waitqueue.EntryEvent, 0, min(len(msgs), maxEntryEvents))
		// apply applies evs[:n] and keeps the rest.
		apply := func(n int) error {
			r, err := a.projection.ApplyEntries(ctx, q, sid, prev, evs[:n])
			if err != nil {
				return err
			}
			res.Cursor, res.Rewound, res.Conflicts = r.Cursor, r.Rewound, res.Conflicts+r.Conflicts
			prev = evs[n-1].StreamSeq
			evs = evs[:copy(evs, evs[n:])]
			return nil
		}
		for _, m := range msgs {
			n := len(evs)
			evs = dec.appendTo(evs, m)
			if n > 0 && len(evs) > maxEntryEvents {
				if err := apply(n); err != nil || res.Rewound {
					return res, err
				}
			}
		}
		if len(evs) == 0 {
			return res, nil
		}
		err := apply(len(evs))
		return res, err
	}
	f.onStale = func(ctx context.Context) error {
		_, err := a.projection.Remove(ctx, q, false)
		return err
	}
	return f
}

func admissionsFollower(a *admitter, q string) *follower {
	f := newFollower(a, q, event.StreamAdmissions, waitqueue.StreamAdmissions, event.AdmittedSubject(q), event.AdmittedSubject(q))
	f.apply = func(ctx context.Context, sid string, prev uint64, msgs []jetstream.Msg) (waitqueue.Applied, error) {
		evs := make([]waitqueue.AdmissionEvent, 0, len(msgs))
		for _, m := range msgs {
			evs = append(evs, decodeAdmission(f.log, a.epoch, m))
		}
		return a.projection.ApplyAdmissions(ctx, q, sid, prev, evs)
	}
	return f
}

func ordersFollower(a *admitter, q string) *follower {
	f := newFollower(a, q, event.StreamOrders, waitqueue.StreamOrders, event.OrderSubjects(q), event.OrderSubjects(q))
	f.apply = func(ctx context.Context, sid string, prev uint64, msgs []jetstream.Msg) (waitqueue.Applied, error) {
		evs := make([]waitqueue.OrderEvent, 0, len(msgs))
		for _, m := range msgs {
			evs = append(evs, decodeOrder(f.log, a.epoch, m))
		}
		return a.projection.ApplyOrders(ctx, q, sid, prev, a.orderHold, evs)
	}
	return f
}

// maxEntryEvents is the most entry events one ApplyEntries call carries
// (but a message's joins are never split): the follower's batch of
// one-join messages.
const maxEntryEvents = 1000

// entryDecoder reads entry events, reusing one buffer for the joins of
// the messages it reads.
type entryDecoder struct {
	log   *slog.Logger
	joins []event.Joined
}

// appendTo appends to evs what m says: a join, a usher.joins.v2 message's
// joins (one event per join, each with its index: the projection gives
// each its place), or a leave. An event that cannot be read is applied as
// nothing (a leave of entry 0): the cursor passes it, it holds nobody back.
func (d *entryDecoder) appendTo(evs []waitqueue.EntryEvent, m jetstream.Msg) []waitqueue.EntryEvent {
	seq := seqOf(m)
	var at time.Time
	if md, err := m.Metadata(); err == nil {
		at = md.Timestamp
	}
	switch {
	case event.IsEnter(m.Subject()):
		_, joins, grouped, err := event.UnmarshalEnter(m.Data(), d.joins)
		d.joins = joins
		if err != nil {
			d.log.Error("skipping a malformed join event", "seq", seq, "err", err)
			break
		}
		for i, j := range joins {
			if j.User == "" {
				// Applied as nothing (see projection's entriesArgs); the
				// message's other joins keep their places.
				d.log.Error("skipping a join without a user", "seq", seq, "index", i)
			}
			kind := waitqueue.InLine
			switch {
			case j.Priority:
				kind = waitqueue.Priority
			case j.PreQueue:
				kind = waitqueue.PreQueue
			}
			evs = append(evs, waitqueue.EntryEvent{StreamSeq: seq, Grouped: grouped, Index: i, User: j.User, Prev: j.Prev, Kind: kind, At: at})
		}
		return evs
	case event.IsLeave(m.Subject()):
		var l event.Left
		if _, err := event.Unmarshal(m.Data(), event.TypeLeft, &l); err == nil && l.Seq > 0 {
			return append(evs, waitqueue.EntryEvent{StreamSeq: seq, Leave: true, Entry: l.Seq, User: l.User, Reason: l.Reason, At: at})
		} else {
			d.log.Error("skipping a malformed leave event", "seq", seq, "err", err)
		}
	}
	return append(evs, waitqueue.EntryEvent{StreamSeq: seq, Leave: true})
}

// decodeAdmission reads an admission of the current entries stream; any
// other comes back with Entry 0 (applied as nothing).
func decodeAdmission(log *slog.Logger, epoch func() string, m jetstream.Msg) waitqueue.AdmissionEvent {
	seq := seqOf(m)
	var a event.Admitted
	if _, err := event.Unmarshal(m.Data(), event.TypeAdmitted, &a); err != nil {
		log.Error("skipping a malformed admission event", "seq", seq, "err", err)
		return waitqueue.AdmissionEvent{StreamSeq: seq}
	}
	if _, ep, s, ok := waitqueue.ParseTokenID(a.TokenID); !ok || ep != epoch() || s != a.Seq {
		return waitqueue.AdmissionEvent{StreamSeq: seq}
	}
	return waitqueue.AdmissionEvent{StreamSeq: seq, Entry: a.Seq, User: a.User, TokenID: a.TokenID,
		ReadyAt: a.ReadyAt, ExpiresAt: a.ExpiresAt}
}

// decodeOrder reads an order request or final order of the current entries
// stream; any other comes back with Entry 0 (applied as nothing).
func decodeOrder(log *slog.Logger, epoch func() string, m jetstream.Msg) waitqueue.OrderEvent {
	seq := seqOf(m)
	none := waitqueue.OrderEvent{StreamSeq: seq}
	var o struct {
		TokenID     string    `json:"tokenId"`
		OrderID     string    `json:"orderId"`
		User        string    `json:"user"`
		RequestedAt time.Time `json:"requestedAt"`
		SKU         string    `json:"sku"`
		Quantity    int       `json:"quantity"`
		Status      string    `json:"status"`
	}
	env, err := event.Unmarshal(m.Data(), event.TypeOrderRequested, &o)
	final := false
	if errors.Is(err, event.ErrType) && (env.Type == event.TypeOrderCompleted || env.Type == event.TypeOrderFailed) {
		_, err = event.Unmarshal(m.Data(), env.Type, &o)
		final = true
	}
	if err != nil {
		log.Error("skipping a malformed order event", "seq", seq, "err", err)
		return none
	}
	_, ep, entry, ok := waitqueue.ParseTokenID(o.TokenID)
	if !ok || ep != epoch() || o.OrderID == "" {
		return none
	}
	if o.RequestedAt.IsZero() {
		o.RequestedAt = env.Time
	}
	var stored time.Time
	if md, err := m.Metadata(); err == nil {
		stored = md.Timestamp
	}
	return waitqueue.OrderEvent{StreamSeq: seq, Final: final, Paid: final && env.Type == event.TypeOrderCompleted,
		Entry: entry, TokenID: o.TokenID, OrderID: o.OrderID, User: o.User, RequestedAt: o.RequestedAt,
		SKU: o.SKU, Quantity: o.Quantity, Stored: stored}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
