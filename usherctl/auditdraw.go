package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"usher/internal/catalog"
	"usher/internal/event"
	"usher/internal/lottery"
	"usher/internal/waitqueue"
)

// scheduleEvent is what one config change says of a scheduled drop.
type scheduleEvent struct {
	at         time.Time
	opensAt    *time.Time // nil: not scheduled
	commitment string     // the lottery's commitment, "" when none
}

// drawEvent is a recorded draw of the queue's pre-queue.
type drawEvent struct {
	streamSeq uint64
	stored    time.Time
	event.LotteryDrawn
}

// loadDrop adds to h what a scheduled drop's audit needs: the queue's
// config changes as far as the schedule goes, its recorded draws, and
// where USHER_ENTRIES begins now.
func loadDrop(ctx context.Context, js jetstream.JetStream, h *history) error {
	q := h.queue
	err := readStream(ctx, js, window{stream: event.StreamOps, filters: []string{event.ConfigChangedSubject}}, func(m storedMsg) error {
		var e struct {
			Type string `json:"type"`
			Data struct {
				Queue  string `json:"queue"`
				Config *struct {
					OpensAt *time.Time `json:"opensAt"`
					Lottery *struct {
						Commitment string `json:"commitment"`
					} `json:"lottery"`
				} `json:"config"`
			} `json:"data"`
		}
		if json.Unmarshal(m.Data, &e) != nil || e.Type != event.TypeConfigChanged || e.Data.Queue != q || e.Data.Config == nil {
			return nil
		}
		s := scheduleEvent{at: m.Stored, opensAt: e.Data.Config.OpensAt}
		if l := e.Data.Config.Lottery; l != nil {
			s.commitment = l.Commitment
		}
		h.schedules = append(h.schedules, s)
		return nil
	})
	if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return err
	}
	err = readStream(ctx, js, window{stream: event.StreamOps, filters: []string{event.LotteryDrawnSubject}}, func(m storedMsg) error {
		var d event.LotteryDrawn
		if _, err := event.Unmarshal(m.Data, event.TypeLotteryDrawn, &d); err != nil {
			h.malformed++
			return nil
		}
		if d.Queue == q {
			h.draws = append(h.draws, drawEvent{streamSeq: m.Seq, stored: m.Stored, LotteryDrawn: d})
		}
		return nil
	})
	if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return err
	}
	if st, err := js.Stream(ctx, event.StreamEntries); err == nil {
		if info, err := st.Info(ctx); err == nil {
			h.entriesFirst = info.State.FirstSeq
		}
	}
	return nil
}

// scheduleOf reads the queue's schedule from the catalog, or failing that
// (a deleted queue's tombstone too) from the last config change the
// history holds.
func scheduleOf(ctx context.Context, js jetstream.JetStream, h *history) schedule {
	if v, ok := catalogValue(ctx, js, h.queue); ok {
		var cfg catalog.Config
		if _, deleted := catalog.RetiredAt(v); !deleted && json.Unmarshal(v, &cfg) == nil {
			s := schedule{opensAt: cfg.OpensAt, from: "the catalog"}
			if cfg.Lottery != nil {
				s.commitment = cfg.Lottery.Commitment
			}
			return s
		}
	}
	if n := len(h.schedules); n > 0 {
		return schedule{opensAt: h.schedules[n-1].opensAt, from: "the config history"}
	}
	return schedule{}
}

// schedule is what the catalog (or, failing that, the config history)
// says of the queue's scheduled drop.
type schedule struct {
	opensAt *time.Time // nil: not scheduled
	from    string     // where opensAt came from
	// commitment is the lottery's commitment the catalog shows now ("":
	// none or unknown).
	commitment string
}

// drop is a queue's scheduled drop as the streams show it, with its draw
// recomputed.
type drop struct {
	sched schedule
	now   time.Time
	// draw is the last usher.lottery.drawn.v1 of the queue; nil: none.
	draw *drawEvent
	// seed is the revealed seed's bytes: nil when it is not 32 bytes of
	// hex (whether or not it matches the commitment).
	seed []byte
	// order is the pre-queue of the draw's entries cursor, recomputed from
	// USHER_ENTRIES, in lottery order; place maps each of its entries'
	// sequences to its place (1-based).
	order []lottery.Entry
	place map[uint64]int
	// at is from when the drawn wait in line: the draw's record, or the
	// first admission of a drawn entry if that was stored earlier (the
	// line is drawn before the record is published).
	at time.Time
	// published is the commitment the config history shows before
	// opensAt (the last change before it that carried one), at when.
	published   string
	publishedAt time.Time
	h           *history
}

// drawBound is the highest entry id the draw's entries cursor covers
// (event.PlaceBound): the cursor is a stream sequence, entries are places.
// It asks h as read so far: a rebuild learns where places count in groups
// as it reads the joins, before any entry past that point.
func (d *drop) drawBound() uint64 { return d.h.places.Bound(d.draw.EntriesCursor) }

// newDrop finds the queue's draw in the history and recomputes it.
func newDrop(h *history, l *line, sched schedule, now time.Time) *drop {
	d := &drop{sched: sched, now: now, place: map[uint64]int{}, h: h}
	if len(h.draws) == 0 {
		return d
	}
	ev := h.draws[len(h.draws)-1]
	d.draw, d.at = &ev, ev.stored
	if b, err := hex.DecodeString(ev.Seed); err == nil && len(b) == lottery.SeedSize {
		d.seed = b
	}
	for _, s := range h.schedules {
		if s.commitment != "" && s.at.Before(ev.OpensAt) {
			d.published, d.publishedAt = s.commitment, s.at
		}
	}
	if d.seed == nil {
		return d
	}
	d.order = lottery.Sorted(d.seed, preQueueAt(h, l, ev.EntriesCursor))
	for i, e := range d.order {
		d.place[e.Seq] = i + 1
		if x := l.bySeq[e.Seq]; x != nil && x.adm != nil && x.adm.stored.Before(d.at) {
			d.at = x.adm.stored
		}
	}
	return d
}

// preQueueAt replays USHER_ENTRIES up to stream sequence cursor the way
// the line's join and leave scripts do (internal/waitqueue/scripts.go) and
// returns the live pre-queue there, by sequence: exactly what a draw at
// that cursor places. A join is an alias of its user's entry when that
// entry is live (pre-queued, waiting, or admitted and neither expired nor
// used by an order) and is not the join's prev; a leave finishes the live
// entry it names (through an alias), and a leave of an unknown entry
// leaves a tombstone its join then finds. Whether an admitted entry was
// still live when a join came is judged from the admission's expiresAt and
// the order events' times, as project does.
func preQueueAt(h *history, l *line, cursor uint64) []lottery.Entry {
	type rec struct {
		user   string
		status waitqueue.Status // pre, waiting (admitted: see live) or left
		alias  uint64
	}
	recs := map[uint64]*rec{}
	ptr := map[string]uint64{} // the user's entry, as the line points at it
	live := func(seq uint64, at time.Time) bool {
		r := recs[seq]
		if r == nil || r.alias != 0 {
			return false
		}
		switch r.status {
		case waitqueue.PreQueued:
			return true
		case waitqueue.Waiting:
			e := l.bySeq[seq]
			if e == nil || e.adm == nil {
				return true
			}
			return e.adm.ExpiresAt.After(at) && (e.usedAt.IsZero() || e.usedAt.After(at))
		}
		return false
	}
	for _, ev := range h.entries {
		if ev.streamSeq > cursor {
			break
		}
		if !ev.leave {
			if recs[ev.seq] != nil {
				continue // a leave's tombstone: the join finds it and makes nothing
			}
			if cur := ptr[ev.user]; cur != 0 && cur != ev.prev && live(cur, ev.stored) {
				recs[ev.seq] = &rec{user: ev.user, alias: cur}
				continue
			}
			st := waitqueue.Waiting
			if ev.preQueue && !ev.priority {
				st = waitqueue.PreQueued
			}
			recs[ev.seq] = &rec{user: ev.user, status: st}
			ptr[ev.user] = ev.seq
			continue
		}
		seq := ev.target
		r := recs[seq]
		if r != nil && r.alias != 0 {
			seq, r = r.alias, recs[r.alias]
		}
		switch {
		case r == nil:
			recs[seq] = &rec{user: ev.user, status: waitqueue.Left}
		case live(seq, ev.stored):
			r.status = waitqueue.Left
		}
	}
	var out []lottery.Entry
	for seq, r := range recs {
		if r.alias == 0 && r.status == waitqueue.PreQueued {
			out = append(out, lottery.Entry{Seq: seq, User: r.user})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	return out
}

// checkLottery checks the draw: the seed is the one committed to, the
// pre-queue it placed is the one the stream holds at its cursor, in
// lottery order, and the drawn were admitted in that order.
func checkLottery(h *history, l *line, d *drop) check {
	c := check{name: "lottery (drawn order)"}
	if d.draw == nil {
		c.skipped = d.noDraw(h)
		if c.skipped == "" {
			c.violations = append(c.violations, fmt.Sprintf("opensAt %s (from %s) passed %s ago but no draw recorded "+
				"(no %s for the queue on USHER_OPS); %d joins went into the pre-queue",
				d.sched.opensAt.UTC().Format(time.RFC3339), d.sched.from, d.now.Sub(*d.sched.opensAt).Round(time.Second),
				"usher.lottery.drawn.v1", h.preQueueJoins))
		}
		return c
	}
	ev := d.draw
	// (a) The seed is the one committed to, and the commitment the one
	// published before the drop opened.
	switch _, err := lottery.Reveal(ev.Seed, ev.Commitment); {
	case err == nil:
	case d.seed == nil:
		c.violations = append(c.violations, fmt.Sprintf("the draw revealed %q, not a %d-byte seed in hex: nobody can check its order",
			ev.Seed, lottery.SeedSize))
	default:
		c.violations = append(c.violations, fmt.Sprintf("the revealed seed does not match the commitment: SHA-256(seed) = %s, "+
			"the commitment is %s (the order could have been chosen after the fact)", lottery.Commitment(d.seed), ev.Commitment))
	}
	if d.published != "" && d.published != ev.Commitment {
		c.violations = append(c.violations, fmt.Sprintf("the draw was checked against commitment %s, but the commitment published "+
			"before opensAt (config change of %s) is %s", ev.Commitment, d.publishedAt.UTC().Format(time.RFC3339Nano), d.published))
	}
	if d.sched.commitment != "" && d.sched.commitment != ev.Commitment {
		c.violations = append(c.violations, fmt.Sprintf("the catalog shows commitment %s, the draw %s", d.sched.commitment, ev.Commitment))
	}
	if d.seed == nil {
		return c
	}
	// (b) The pre-queue of the cursor, in lottery order, is what was drawn.
	if digest := lottery.Digest(d.order); len(d.order) != ev.Entries || digest != ev.OrderDigest {
		c.violations = append(c.violations, d.mismatch(h, l, digest))
	}
	// (c) The drawn were admitted in lottery order: readyAt never goes
	// back as the place grows.
	var ahead *entry
	aheadPlace := 0
	for i, r := range d.order {
		e := l.bySeq[r.Seq]
		if e == nil || e.adm == nil {
			continue
		}
		if ahead != nil && e.adm.ReadyAt.Before(ahead.adm.ReadyAt) {
			c.violations = append(c.violations, fmt.Sprintf("lottery place %d, seq %d (%s), was admitted (readyAt %s) before place %d, seq %d (%s), who drew ahead of it (readyAt %s)",
				i+1, e.seq, e.user, stamp(e.adm.ReadyAt), aheadPlace, ahead.seq, ahead.user, stamp(ahead.adm.ReadyAt)))
		}
		if ahead == nil || e.adm.ReadyAt.After(ahead.adm.ReadyAt) {
			ahead, aheadPlace = e, i+1
		}
	}
	return c
}

// noDraw says why there is no draw to check, or "" when there should be
// one: opensAt passed more than a minute ago.
func (d *drop) noDraw(h *history) string {
	s := d.sched
	switch {
	case s.opensAt != nil && d.now.Sub(*s.opensAt) > time.Minute:
		return ""
	case s.opensAt != nil:
		return fmt.Sprintf("not drawn yet: opensAt %s (from %s)", s.opensAt.UTC().Format(time.RFC3339), s.from)
	case h.preQueueJoins > 0:
		return fmt.Sprintf("no draw recorded and no opensAt known, though %d joins went into a pre-queue", h.preQueueJoins)
	default:
		return "no scheduled drop (no opensAt, no draw recorded)"
	}
}

// mismatch explains a draw whose count or digest is not the recomputed
// pre-queue's: both figures, and the first place where the order the
// admissions show leaves the recomputed one.
func (d *drop) mismatch(h *history, l *line, digest string) string {
	ev := d.draw
	var b strings.Builder
	fmt.Fprintf(&b, "the draw placed %d entries (order digest %s); the pre-queue recomputed from USHER_ENTRIES up to seq %d holds %d (digest %s)",
		ev.Entries, ev.OrderDigest, ev.EntriesCursor, len(d.order), digest)
	// What the admissions show: the drawn (and any other pre-queue join up
	// to the cursor) by readyAt, against the recomputed order of those
	// admitted.
	var shown []*entry
	for _, e := range l.entries {
		if e.adm != nil && e.alias == 0 && (d.place[e.seq] > 0 || (e.preQueue && e.seq <= d.drawBound())) {
			shown = append(shown, e)
		}
	}
	sort.SliceStable(shown, func(i, j int) bool {
		if !shown[i].adm.ReadyAt.Equal(shown[j].adm.ReadyAt) {
			return shown[i].adm.ReadyAt.Before(shown[j].adm.ReadyAt)
		}
		return shown[i].adm.streamSeq < shown[j].adm.streamSeq
	})
	var want []lottery.Entry
	for _, r := range d.order {
		if e := l.bySeq[r.Seq]; e != nil && e.adm != nil {
			want = append(want, r)
		}
	}
	diff := false
	for k, e := range shown {
		switch {
		case k >= len(want):
			fmt.Fprintf(&b, "; seq %d (%s) was admitted as drawn after every recomputed place%s", e.seq, e.user, d.outside(e))
		case want[k].Seq != e.seq:
			fmt.Fprintf(&b, "; first difference at lottery place %d: the recomputed order puts seq %d (%s) there, the admissions show seq %d (%s)%s",
				d.place[want[k].Seq], want[k].Seq, want[k].User, e.seq, e.user, d.outside(e))
		default:
			continue
		}
		diff = true
		break
	}
	switch {
	case diff:
	case len(shown) == 0:
		b.WriteString("; no drawn entry was admitted yet: compare usherctl audit --lottery-list with the list the draw published")
	default:
		fmt.Fprintf(&b, "; the %d drawn admitted so far follow the recomputed order: the difference is among the drawn not admitted "+
			"(compare usherctl audit --lottery-list with the list the draw published)", len(shown))
	}
	if h.entriesFirst > 1 {
		fmt.Fprintf(&b, " (USHER_ENTRIES holds events from seq %d on: older joins expired, so the recomputed pre-queue may lack some)", h.entriesFirst)
	}
	return b.String()
}

// outside notes an entry the recomputed pre-queue does not hold.
func (d *drop) outside(e *entry) string {
	if d.place[e.seq] > 0 {
		return ""
	}
	return ", which the recomputed pre-queue does not hold"
}

// writeList writes the recomputed pre-queue's user ids in lottery order,
// one a line: the list anyone can check with the script of docs/events.md.
func (d *drop) writeList(path string) error {
	switch {
	case d.draw == nil:
		return fmt.Errorf("--lottery-list: no draw recorded for the queue: no order to list")
	case d.seed == nil:
		return fmt.Errorf("--lottery-list: the draw revealed no usable seed (%q): no order to list", d.draw.Seed)
	}
	var b strings.Builder
	for _, e := range d.order {
		b.WriteString(e.User)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("--lottery-list: %w", err)
	}
	return nil
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// placeClass is how an entry's place in line is decided.
type placeClass int

const (
	placeFIFO     placeClass = iota // by join sequence, behind every drawn entry
	placeDrawn                      // by lottery place, ahead of every FIFO entry
	placePriority                   // allowed past the line: outside the order
	placeUndrawn                    // pre-queued and not drawn (left before the draw, or no draw yet): not in line
)

// classOf says how e's place is decided. A join into the pre-queue after
// the draw's cursor queues FIFO, as the join script puts it once drawn.
func (d *drop) classOf(e *entry) placeClass {
	switch {
	case e.priority:
		return placePriority
	case d.place[e.seq] > 0:
		return placeDrawn
	case e.preQueue && (d.draw == nil || e.seq <= d.drawBound()):
		return placeUndrawn
	}
	return placeFIFO
}

// sortByPlace sorts entries in line by place: the drawn by lottery
// place, then everyone else by join sequence.
func (d *drop) sortByPlace(es []*entry) {
	type keyed struct {
		place int // 0: not drawn
		e     *entry
	}
	ks := make([]keyed, len(es))
	for i, e := range es {
		ks[i] = keyed{d.place[e.seq], e}
	}
	sort.Slice(ks, func(i, j int) bool {
		a, b := ks[i], ks[j]
		switch {
		case a.place > 0 && b.place > 0:
			return a.place < b.place
		case a.place > 0 || b.place > 0:
			return a.place > 0
		}
		return a.e.seq < b.e.seq
	})
	for i, k := range ks {
		es[i] = k.e
	}
}

// describe names an entry for a report line.
func (d *drop) describe(e *entry) string {
	if p := d.place[e.seq]; p > 0 {
		return fmt.Sprintf("seq %d (%s, lottery place %d)", e.seq, e.user, p)
	}
	return fmt.Sprintf("seq %d (%s)", e.seq, e.user)
}
