package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"usher/internal/catalog"
	"usher/internal/event"
	"usher/internal/waitqueue"
)

// history is everything the streams say about one queue.
type history struct {
	queue      string
	entries    []entryEvent  // joins and leaves, in stream order
	admissions []admission   // in stream order
	orders     []orderEvent  // in stream order
	configs    []configEvent // in stream order
	joins      int
	leaves     int
	malformed  int
	// preQueueJoins and priorityJoins count the joins of each kind
	// (priority wins when a join says both, as the admitter's follower
	// decides).
	preQueueJoins, priorityJoins int
	// What a scheduled drop's audit reads besides (see loadDrop): the
	// config changes as far as the schedule goes, the queue's recorded
	// draws (the last one counts), both in stream order, and the first
	// sequence USHER_ENTRIES still holds (older events expired; 0: unknown).
	schedules    []scheduleEvent
	draws        []drawEvent
	entriesFirst uint64
	enter        string // the queue's join subject, once asked
	// places gives the joins read their places: in groups from the
	// queue's first usher.joins.v2 message read.
	places event.Places
	// What decode reuses from one message to the next.
	joinsBuf []event.Joined
	evsBuf   []entryEvent
}

// silent reports whether the streams hold nothing of the queue: no entry,
// admission, order, config change or draw. Of a queue the catalog does not
// know either, that is a name nobody used (a typo), not an empty line.
func (h *history) silent() bool {
	return h.joins+h.leaves == 0 && len(h.admissions) == 0 && len(h.orders) == 0 && len(h.configs) == 0 && len(h.draws) == 0
}

// unknownQueue is cmd's answer for a queue nothing knows — the streams are
// silent of it and the catalog has no entry — and nil for any other: a
// clean verdict, an empty report or "rebuilt from 0 joins" with exit 0
// would pass a typo off as a fair, quiet or rebuilt queue. The catalog is
// asked only of a silent history.
func (h *history) unknownQueue(ctx context.Context, js jetstream.JetStream, cmd string) error {
	if !h.silent() {
		return nil
	}
	if _, known := currentTarget(ctx, js, h.queue); known {
		return nil
	}
	return noQueue(cmd, h.queue)
}

// noQueue is the error of cmd for queue q, which neither the streams nor
// the catalog know (unknownQueue, and replay's unknownReplayQueue).
func noQueue(cmd, q string) error {
	return fmt.Errorf("%s: no queue %s: the streams hold none of its events and the catalog has no entry (is the name right?)", cmd, q)
}

// entryEvent is a join (leave false) or a leave of USHER_ENTRIES.
type entryEvent struct {
	seq       uint64 // a join's place (its entry id), a leave's stream sequence
	streamSeq uint64 // the sequence of the event's message
	stored    time.Time
	leave     bool
	user      string
	target    uint64 // leave: the entry left
	// A join's previous entry as the gateway saw it (0: none), and its kind:
	// into a scheduled drop's pre-queue, or allowed past the line.
	prev     uint64
	preQueue bool
	priority bool
}

type admission struct {
	streamSeq uint64
	stored    time.Time
	event.Admitted
}

// orderEvent is an order event, decoded loosely: its type, token and
// order id (and for the report, a final order's status and reason and a
// request's time).
type orderEvent struct {
	streamSeq   uint64
	at          time.Time
	typ         string
	tokenID     string
	orderID     string
	user        string
	status      string
	reason      string
	requestedAt time.Time
}

type configEvent struct {
	at       time.Time
	target   int
	previous int // 0 when unknown
}

// parts says which streams loadHistory reads.
type parts struct{ orders, configs bool }

// loadHistory reads a queue's history, each stream up to its newest event
// as of the read.
func loadHistory(ctx context.Context, js jetstream.JetStream, q string, p parts) (*history, error) {
	h := &history{queue: q}
	err := readStream(ctx, js, window{stream: event.StreamEntries, filters: []string{event.EnterSubject(q), event.LeaveSubject(q)}}, func(m storedMsg) error {
		if h.entries == nil {
			h.entries = make([]entryEvent, 0, m.Pending+1) // the read's size, known from its first event
		}
		h.entries = append(h.entries, h.decode(m)...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := h.readAdmissions(ctx, js); err != nil {
		return nil, err
	}
	if p.orders {
		if err := h.readOrders(ctx, js); err != nil {
			return nil, err
		}
	}
	if p.configs {
		err = readStream(ctx, js, window{stream: event.StreamOps, filters: []string{event.ConfigChangedSubject}}, func(m storedMsg) error {
			e, ok := decodeLoose(m.Data)
			if !ok || e.Type != event.TypeConfigChanged || e.Data.Queue != q || e.Data.Config == nil || e.Data.Config.TargetActive == nil {
				return nil
			}
			c := configEvent{at: m.Stored, target: e.Data.Config.bound()}
			if e.Data.Previous != nil && e.Data.Previous.TargetActive != nil {
				c.previous = e.Data.Previous.bound()
			}
			h.configs = append(h.configs, c)
			return nil
		})
		if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, err
		}
	}
	return h, nil
}

// decode decodes a join, the joins of a usher.joins.v2 message, or a leave
// of h's queue, counting them (none: a malformed event, counted as such).
// The events are valid until the next call: the caller copies them.
// A join's seq is its place (event.Place), counted from the first
// usher.joins.v2 message of the queue h read: the stream is read in order
// from its start, as the admitter's follower applies it.
func (h *history) decode(m storedMsg) []entryEvent {
	if h.enter == "" {
		h.enter = event.EnterSubject(h.queue)
	}
	if m.Subject == h.enter {
		_, joins, grouped, err := event.UnmarshalEnter(m.Data, h.joinsBuf)
		h.joinsBuf = joins
		if err != nil {
			h.malformed++
			return nil
		}
		evs := h.evsBuf[:0]
		for i, j := range joins {
			h.joins++
			switch {
			case j.Priority:
				h.priorityJoins++
			case j.PreQueue:
				h.preQueueJoins++
			}
			evs = append(evs, entryEvent{seq: h.places.Of(m.Seq, i, grouped), streamSeq: m.Seq, stored: m.Stored, user: j.User,
				prev: j.Prev, preQueue: j.PreQueue, priority: j.Priority})
		}
		h.evsBuf = evs
		return evs
	}
	var l event.Left
	if _, err := event.Unmarshal(m.Data, event.TypeLeft, &l); err != nil {
		h.malformed++
		return nil
	}
	h.leaves++
	h.evsBuf = append(h.evsBuf[:0], entryEvent{seq: m.Seq, streamSeq: m.Seq, stored: m.Stored, leave: true, user: l.User, target: l.Seq})
	return h.evsBuf
}

// readAdmissions reads the queue's admissions.
func (h *history) readAdmissions(ctx context.Context, js jetstream.JetStream) error {
	return readStream(ctx, js, window{stream: event.StreamAdmissions, filters: []string{event.AdmittedSubject(h.queue)}}, func(m storedMsg) error {
		var a event.Admitted
		if _, err := event.Unmarshal(m.Data, event.TypeAdmitted, &a); err != nil {
			h.malformed++
			return nil
		}
		h.admissions = append(h.admissions, admission{streamSeq: m.Seq, stored: m.Stored, Admitted: a})
		return nil
	})
}

// readOrders reads the queue's order events. The orders stream may not
// exist yet, or hold no order events: then no token is known to be used.
func (h *history) readOrders(ctx context.Context, js jetstream.JetStream) error {
	q := h.queue
	// The queue's subjects only, as the admitter's follower reads them: the
	// stream holds every queue's orders of 30 days.
	err := readStream(ctx, js, window{stream: event.StreamOrders, filters: []string{event.OrderSubjects(q)}}, func(m storedMsg) error {
		e, ok := decodeLoose(m.Data)
		if !ok || !strings.HasPrefix(e.Type, "usher.order.") || e.Data.TokenID == "" || !e.of(q) {
			return nil
		}
		// When the order happened: its time, stamped by the order
		// worker's clock, but never later than the stream stored it.
		// The worker publishes a final order before it frees the slot
		// (and the admitter frees it only after applying the stored
		// event), so the stored time bounds the slot's end from below
		// whatever the worker's clock said: a clock a slow sample left
		// ahead of Redis's (by 210 ms after a Redis failover, say) would
		// date orders after their slots were reused, and the audit would
		// count a slot that was never held.
		at := e.Time
		if at.IsZero() || m.Stored.Before(at) {
			at = m.Stored
		}
		h.orders = append(h.orders, orderEvent{streamSeq: m.Seq, at: at, typ: e.Type, tokenID: e.Data.TokenID, orderID: e.Data.OrderID,
			user: e.Data.User, status: e.Data.Status, reason: e.Data.Reason, requestedAt: e.Data.RequestedAt})
		return nil
	})
	if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return err
	}
	return nil
}

// looseConfig is the part of a recorded queue configuration the audit
// reads: how many slots it let be held.
type looseConfig struct {
	TargetActive *int `json:"targetActive"`
	Adaptive     *struct {
		Enabled bool `json:"enabled"`
		Max     int  `json:"max"`
	} `json:"adaptive"`
}

// bound is the most slots the configuration let be held: targetActive,
// or for an adaptive queue (whose limit moves within its bounds without
// every move recorded) its adaptive max.
func (c *looseConfig) bound() int {
	if c.Adaptive != nil && c.Adaptive.Enabled && c.Adaptive.Max > 0 {
		return c.Adaptive.Max
	}
	return *c.TargetActive
}

// catalogValue is what the catalog's bucket holds for queue q (a
// configuration, or a deleted queue's tombstone), if anything.
func catalogValue(ctx context.Context, js jetstream.JetStream, q string) ([]byte, bool) {
	kv, err := js.KeyValue(ctx, catalog.Bucket)
	if err != nil {
		return nil, false
	}
	e, err := kv.Get(ctx, q)
	if err != nil {
		return nil, false
	}
	return e.Value(), true
}

// currentTarget reads the queue's targetActive from the catalog (an
// adaptive queue's adaptive max).
func currentTarget(ctx context.Context, js jetstream.JetStream, q string) (int, bool) {
	v, ok := catalogValue(ctx, js, q)
	if !ok {
		return 0, false
	}
	var cfg catalog.Config
	if json.Unmarshal(v, &cfg) != nil || cfg.TargetActive < 1 {
		return 0, false
	}
	if cfg.AdaptiveOn() {
		return cfg.Adaptive.Max, true
	}
	return cfg.TargetActive, true
}

// deletedAt reports whether the catalog holds queue q's tombstone: it was
// deleted, and when.
func deletedAt(ctx context.Context, js jetstream.JetStream, q string) (time.Time, bool) {
	v, ok := catalogValue(ctx, js, q)
	if !ok {
		return time.Time{}, false
	}
	return catalog.RetiredAt(v)
}

// entry is one shopper's entry as the projection sees it.
type entry struct {
	seq     uint64
	user    string
	joined  time.Time
	alias   uint64 // the earlier entry this join duplicates, or 0
	adm     *admission
	usedAt  time.Time // first order completion or failure of its token (see loadHistory)
	orderID string    // that order's id
	// claimedAt is when an order took its token: its first order event.
	// The gateway publishes an order's request only once its claim made the
	// entry used, so from then on a leave finds it used and changes nothing,
	// and a join of the same user finds it finished.
	claimedAt time.Time
	leftAt    time.Time
	orphan    bool // a leave whose join the streams no longer hold
	// The kind of its join: into a scheduled drop's pre-queue, or allowed
	// past the line (which wins, as the admitter's follower decides).
	preQueue bool
	priority bool
	released bool // a rebuild wrote its record (see release)
}

// line is the queue replayed from its history: what the live scripts
// would have made of the same events.
type line struct {
	entries []*entry // by sequence
	bySeq   map[uint64]*entry
	// admittedTwice lists admissions of an entry already admitted.
	admittedTwice []admission
}

// project replays the history the way the ingest, leave and admit scripts
// did. Admissions and order events come from other streams; they are
// matched to entries by join sequence and token id, and their times decide
// what a later join or leave found (a user whose entry is still live when
// they join again gets an alias, as the ingest script does, unless that
// entry is the join's prev: the gateway saw it finished).
func project(h *history) *line {
	p := newProjector(h, h.joins)
	for _, ev := range h.entries {
		p.add(ev)
	}
	return p.done()
}

// projector builds a line event by event, in stream order (see project):
// a rebuild feeds it joins as it reads them.
type projector struct {
	l                 *line
	admOf             map[uint64]*admission
	usedAt, claimedAt map[string]time.Time
	usedBy            map[string]string
	users             map[string]*entry // each user's entry a join of theirs is judged against
	slab              []entry           // entries to come, allocated a block at a time
}

// newProjector matches h's admissions and order events to the entries to
// come; joins is how many joins it expects (a size hint).
func newProjector(h *history, joins int) *projector {
	p := &projector{l: &line{bySeq: make(map[uint64]*entry, joins)}, admOf: make(map[uint64]*admission, len(h.admissions)),
		usedAt: map[string]time.Time{}, usedBy: map[string]string{}, claimedAt: map[string]time.Time{},
		users: make(map[string]*entry, joins), slab: make([]entry, joins)}
	for i := range h.admissions {
		a := &h.admissions[i]
		if _, dup := p.admOf[a.Seq]; dup {
			p.l.admittedTwice = append(p.l.admittedTwice, *a)
			continue
		}
		p.admOf[a.Seq] = a
	}
	for _, o := range h.orders {
		if t, ok := p.claimedAt[o.tokenID]; !ok || o.at.Before(t) {
			p.claimedAt[o.tokenID] = o.at
		}
		if o.typ != event.TypeOrderCompleted && o.typ != event.TypeOrderFailed {
			continue
		}
		if t, ok := p.usedAt[o.tokenID]; !ok || o.at.Before(t) {
			p.usedAt[o.tokenID], p.usedBy[o.tokenID] = o.at, o.orderID
		}
	}
	return p
}

// live reports whether e was live at at: not an alias, not left, and if
// admitted neither expired nor claimed by an order.
func live(e *entry, at time.Time) bool {
	if e.alias != 0 || !e.leftAt.IsZero() {
		return false
	}
	if e.adm != nil {
		if !e.adm.ExpiresAt.After(at) {
			return false
		}
		if !e.claimedAt.IsZero() && !e.claimedAt.After(at) {
			return false
		}
	}
	return true
}

// add applies the next event of USHER_ENTRIES and returns the entry it
// made (a join, or a leave of an entry the streams no longer hold), or nil.
func (p *projector) add(ev entryEvent) *entry {
	l := p.l
	if !ev.leave {
		if len(p.slab) == 0 {
			p.slab = make([]entry, 4096)
		}
		e := &p.slab[0]
		p.slab = p.slab[1:]
		*e = entry{seq: ev.seq, user: ev.user, joined: ev.stored, adm: p.admOf[ev.seq],
			priority: ev.priority, preQueue: ev.preQueue && !ev.priority}
		if e.adm != nil {
			e.usedAt, e.orderID = p.usedAt[e.adm.TokenID], p.usedBy[e.adm.TokenID]
			e.claimedAt = p.claimedAt[e.adm.TokenID]
		} else if cur := p.users[ev.user]; cur != nil && cur.seq != ev.prev && live(cur, ev.stored) {
			e.alias = cur.seq
		}
		if e.alias == 0 {
			p.users[ev.user] = e
		}
		l.entries = append(l.entries, e)
		l.bySeq[e.seq] = e
		return e
	}
	e := l.bySeq[ev.target]
	if e != nil && e.alias != 0 {
		e = l.bySeq[e.alias]
	}
	if e == nil {
		e = &entry{seq: ev.target, user: ev.user, leftAt: ev.stored, orphan: true}
		l.entries = append(l.entries, e)
		l.bySeq[e.seq] = e
		return e
	}
	// A claimed token's entry is used whatever the clocks say of the
	// leave: a leave before the claim would have left the claim nothing
	// to take (the claim script refuses a left entry).
	if live(e, ev.stored) && e.claimedAt.IsZero() {
		e.leftAt = ev.stored
	}
	return nil
}

// done is the line, its entries by sequence.
func (p *projector) done() *line {
	bySeq := func(a, b *entry) int { return cmp.Compare(a.seq, b.seq) }
	if !slices.IsSortedFunc(p.l.entries, bySeq) { // only orphans are out of order
		slices.SortFunc(p.l.entries, bySeq)
	}
	return p.l
}

// status is where an entry stands at now.
func (e *entry) status(now time.Time) waitqueue.Status {
	switch {
	case !e.leftAt.IsZero():
		return waitqueue.Left
	case e.adm == nil:
		return waitqueue.Waiting
	case !e.usedAt.IsZero():
		return waitqueue.Used
	case !e.adm.ExpiresAt.After(now):
		return waitqueue.Expired
	default:
		return waitqueue.Admitted
	}
}

// records returns the Redis records of the line at now, placed as the live
// scripts place them given the queue's drop d (see placeOf), in the order
// a rebuild writes them (see ordered).
func (l *line) records(now time.Time, d *drop) []waitqueue.Record {
	if d == nil {
		d = &drop{place: map[uint64]int{}}
	}
	return ordered(l.entries, now, d)
}

// record is e's Redis record at now, placed as the live scripts place it
// given the queue's drop d.
func (e *entry) record(now time.Time, d *drop) waitqueue.Record {
	r := waitqueue.Record{Seq: e.seq, User: e.user, Alias: e.alias}
	if e.orphan {
		r.User = "" // the leave script does not point the user at an unknown entry
	}
	if e.alias == 0 {
		r.Status = e.status(now)
	}
	if r.Status == waitqueue.Waiting {
		r.Status, r.Score = d.placeOf(e)
	}
	if e.adm != nil {
		r.TokenID, r.ReadyAt, r.ExpiresAt = e.adm.TokenID, e.adm.ReadyAt, e.adm.ExpiresAt
		if r.Status == waitqueue.Used {
			r.OrderID = e.orderID
		}
	}
	return r
}

// ordered returns the records of es (by sequence) at now: admitted ones
// first (so an admitter ticking during a rebuild sees every held slot
// before it sees anyone waiting), then the waiting in line order (so it
// sees the head of the line before anyone behind), then the rest by
// sequence.
func ordered(es []*entry, now time.Time, d *drop) []waitqueue.Record {
	// Counted first, then each record made where it belongs: appending to
	// three growing slices moved records over and over (a third of a
	// rebuild's CPU at 200,000 shoppers), and a second slice to sort them
	// into cost as much again in fresh memory.
	admitted, waiting := 0, 0
	for _, e := range es {
		switch e.record(now, d).Status {
		case waitqueue.Admitted:
			admitted++
		case waitqueue.Waiting:
			waiting++
		}
	}
	out := make([]waitqueue.Record, len(es))
	a, w, x := 0, admitted, admitted+waiting
	for _, e := range es {
		r := e.record(now, d)
		switch r.Status {
		case waitqueue.Admitted:
			out[a], a = r, a+1
		case waitqueue.Waiting:
			out[w], w = r, w+1
		default:
			out[x], x = r, x+1
		}
	}
	score := func(r waitqueue.Record) float64 {
		if r.Score != 0 {
			return r.Score
		}
		return float64(r.Seq)
	}
	byScore := func(p, q waitqueue.Record) int { return cmp.Compare(score(p), score(q)) }
	if line := out[admitted : admitted+waiting]; !slices.IsSortedFunc(line, byScore) {
		slices.SortStableFunc(line, byScore)
	}
	return out
}

// priorityOffset is how far ahead of every place the join script puts a
// join allowed past the line: its score is seq - 2^52.
const priorityOffset = 1 << 52

// placeOf is how the live scripts hold a waiting entry of the queue whose
// drop is d (see classOf): a join allowed past the line scored seq - 2^52;
// one the draw placed scored place / (n + 1), as drop.Drop.Draw stages it
// (below 1, ahead of every FIFO place); a pre-queue join while no draw is
// recorded pre-queued, with no place until the admitter draws; everyone
// else FIFO, scored by sequence (score 0 here). A pre-queue join up to
// the draw's cursor that the recomputed draw does not hold queues FIFO
// too: it has to be somewhere, and the draw is over (rebuild warns).
func (d *drop) placeOf(e *entry) (waitqueue.Status, float64) {
	switch d.classOf(e) {
	case placePriority:
		return waitqueue.Waiting, float64(e.seq) - priorityOffset
	case placeDrawn:
		return waitqueue.Waiting, float64(d.place[e.seq]) / float64(len(d.order)+1)
	case placeUndrawn:
		if d.draw == nil {
			return waitqueue.PreQueued, 0
		}
	}
	return waitqueue.Waiting, 0
}

func (h *history) summary() string {
	s := fmt.Sprintf("%d joins, %d leaves, %d admissions, %d order events", h.joins, h.leaves, len(h.admissions), len(h.orders))
	if h.preQueueJoins > 0 || h.priorityJoins > 0 || len(h.draws) > 0 {
		s += fmt.Sprintf(" (%d joins into the pre-queue, %d priority joins, %d draws recorded)", h.preQueueJoins, h.priorityJoins, len(h.draws))
	}
	return s
}
