package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"usher/internal/catalog"
	"usher/internal/event"
	"usher/internal/lottery"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/projection"
)

const rebuildSynopsis = `usherctl rebuild --queue Q [--force] [--dry-run]

After Redis lost a queue's data, rebuilds its waiting line, admitted set and
token records from USHER_ENTRIES, USHER_ADMISSIONS and (if it holds any)
USHER_ORDERS: every shopper is back in the same place, every admitted
shopper is READY again with the same token id, readyAt and expiresAt.

A scheduled drop is rebuilt as its draw left it (USHER_OPS): before the draw
the pre-queued are back in the pre-queue, with no place, for the admitter to
draw at the opening; after it the draw is recorded again and the drawn wait
in their lottery places (recomputed from the revealed seed and the joins up
to the draw's entries cursor), ahead of every later join. Joins allowed past
the line are back ahead of everyone.

It only creates records that are missing, never overwrites one and never
moves anyone, so it is idempotent and safe while the gateway and admitters
keep running. It refuses a queue whose Redis state looks intact (the oldest
live entries the streams hold are in Redis) unless --force. Pausing the queue
first (usherctl queue pause Q) keeps the admitter from admitting into a half
rebuilt line; admitted records are written first to narrow that window.
Unless the queue was drawn (or --dry-run), it writes while it reads the
joins: each entry once no leave still to come names it.`

// defaultRebuildChunk is how many records a rebuild writes between progress
// reports.
const defaultRebuildChunk = 20000

// rebuild puts a queue's records back in Redis from the streams: as it
// reads the joins when no draw placed anyone, after reading everything
// when one did or on a dry run.
func (c *cli) rebuild(ctx context.Context, args []string) error {
	f, err := c.rebuildFlagsOf(args)
	if err != nil {
		return done(err)
	}
	nc, js, err := c.jetStream(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	if at, deleted := deletedAt(ctx, js, f.queue); deleted {
		return fmt.Errorf("rebuild: queue %s was deleted (%s): no admitter works on it, so its line is not put back; "+
			"its events stay in the streams for replay, audit and report", f.queue, at.UTC().Format(time.RFC3339))
	}
	rdb, store, err := c.redisStore(ctx)
	if err != nil {
		return err
	}
	defer rdb.Close()

	start := time.Now()
	h := &history{queue: f.queue}
	if err := loadDrop(ctx, js, h); err != nil {
		return err
	}
	w := &restorer{c: c, store: store, q: f.queue, total: waitqueue.RestoreResult{Created: map[waitqueue.Status]int{}}}
	if len(h.draws) == 0 && !f.dryRun {
		return c.rebuildAsRead(ctx, js, w, h, f.force, start)
	}
	return c.rebuildAfterRead(ctx, js, w, f, start)
}

// rebuildFlags are rebuild's command line.
type rebuildFlags struct {
	queue  string
	force  bool
	dryRun bool
}

// rebuildFlagsOf parses rebuild's command line; every mistake in it is a
// usage error, found before anything is read.
func (c *cli) rebuildFlagsOf(args []string) (rebuildFlags, error) {
	fs := newFlags("rebuild", rebuildSynopsis)
	var f rebuildFlags
	fs.StringVar(&f.queue, "queue", "", "the queue to rebuild (required)")
	fs.BoolVar(&f.force, "force", false, "run even though the queue's Redis state looks intact")
	fs.BoolVar(&f.dryRun, "dry-run", false, "report what would be restored, write nothing")
	pos, err := c.parse(fs, args)
	switch {
	case err != nil:
		return f, err
	case len(pos) > 0:
		return f, usagef("rebuild: unexpected arguments %q", pos)
	case f.queue == "":
		return f, usagef("rebuild: --queue is required")
	case !catalog.ValidName(f.queue):
		return f, usagef("rebuild: --queue %q is not a queue name", f.queue)
	}
	return f, nil
}

// rebuildAfterRead rebuilds a queue reading its whole history first: a
// draw's places come from every pre-queue join up to its cursor, and a dry
// run writes nothing.
func (c *cli) rebuildAfterRead(ctx context.Context, js jetstream.JetStream, w *restorer, f rebuildFlags, start time.Time) error {
	h, err := loadHistory(ctx, js, f.queue, parts{orders: true})
	if err != nil {
		return err
	}
	if err := loadDrop(ctx, js, h); err != nil {
		return err
	}
	if err := h.unknownQueue(ctx, js, "rebuild"); err != nil {
		return err
	}
	read := time.Since(start)
	l := project(h)
	d := newDrop(h, l, schedule{}, c.now())
	if d.draw != nil && d.seed == nil {
		return fmt.Errorf("queue %s was drawn (%s, USHER_OPS seq %d) but the draw revealed %q, not a %d-byte seed in hex: "+
			"the lottery order cannot be recomputed, so the drawn cannot be put back in their places", f.queue,
			event.TypeLotteryDrawn, d.draw.streamSeq, d.draw.Seed, lottery.SeedSize)
	}
	recs := l.records(c.now(), d)
	notes := drawNotes(h, l, d, recs)

	if err := w.intact(ctx, recs, f.force); err != nil {
		return err
	}
	if f.dryRun {
		w.reportDryRun(h, recs, notes)
		return nil
	}
	drawRestored, err := w.restoreDraw(ctx, d)
	if err != nil {
		return err
	}
	for len(recs) > 0 {
		n := min(w.chunk(), len(recs))
		if err := w.write(ctx, recs[:n]); err != nil {
			return err
		}
		recs = recs[n:]
	}
	w.report(h, read, start)
	w.reportDraw(d, drawRestored)
	w.notes(h, notes)
	return nil
}

// rebuildAsRead rebuilds a queue no draw placed, writing records while it
// reads the joins: the read (NATS) and the write (Redis) overlap instead of
// following each other, each about half of a rebuild's time.
//
// The leaves are read first (with the admissions and order events), up to
// the entries stream's newest event as of the start, then the joins up to
// the same point; the projection applies each leave just before the first
// join after it, exactly as it would reading both in stream order. Only a
// leave changes an entry after its join, so an entry is final once no leave
// still to come names it or its user (a leave of a later alias of theirs
// lands on it); entries are released in the order made, up to the first one
// not final, and not before every admitted entry is final, so admitted
// records are still written first. The waiting are written in join order,
// release by release: one allowed past the line is written when the read
// reaches it, not ahead of those before it (pause the queue first).
func (c *cli) rebuildAsRead(ctx context.Context, js jetstream.JetStream, w *restorer, h *history, force bool, start time.Time) error {
	until, leaves, err := readBeforeJoins(ctx, js, h)
	if err != nil {
		return err
	}
	r := newRelease(h, leaves, until, c.now(), w.chunk())
	read, err := w.restoreAsRead(ctx, js, h, r, until, force, start)
	if err != nil {
		return err
	}
	if err := h.unknownQueue(ctx, js, "rebuild"); err != nil {
		return err
	}
	w.report(h, read, start)
	w.notes(h, r.notes(h.queue))
	return nil
}

// readBeforeJoins reads into h what must be known before the first join is
// projected: the queue's leaves up to until, the entries stream's newest
// event of the queue as of now (the joins are read up to the same point),
// and its admission and order events.
func readBeforeJoins(ctx context.Context, js jetstream.JetStream, h *history) (until uint64, leaves []entryEvent, err error) {
	enter, leave := event.EnterSubject(h.queue), event.LeaveSubject(h.queue)
	until, _, err = lastOf(ctx, js.Conn(), window{stream: event.StreamEntries, filters: []string{enter, leave}})
	if err != nil {
		return 0, nil, err
	}
	if until > 0 {
		err := readStream(ctx, js, window{stream: event.StreamEntries, filters: []string{leave}, untilSeq: until}, func(m storedMsg) error {
			leaves = append(leaves, h.decode(m)...)
			return nil
		})
		if err != nil {
			return 0, nil, err
		}
	}
	if err := h.readAdmissions(ctx, js); err != nil {
		return 0, nil, err
	}
	if err := h.readOrders(ctx, js); err != nil {
		return 0, nil, err
	}
	return until, leaves, nil
}

// restoreAsRead reads the queue's joins up to until into r and writes the
// records r releases, the read and the writes running side by side with one
// chunk between them. It returns how long the read took.
func (w *restorer) restoreAsRead(ctx context.Context, js jetstream.JetStream, h *history, r *release, until uint64, force bool, start time.Time) (time.Duration, error) {
	chunks := make(chan []waitqueue.Record, 1)
	var read time.Duration
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		for recs := range chunks {
			if err := w.write(gctx, recs); err != nil {
				return err
			}
		}
		return nil
	})
	g.Go(func() error {
		defer close(chunks)
		if until > 0 {
			enter := window{stream: event.StreamEntries, filters: []string{event.EnterSubject(h.queue)}, untilSeq: until}
			err := readStream(gctx, js, enter, func(m storedMsg) error {
				for _, ev := range h.decode(m) {
					if err := w.handOver(gctx, chunks, r.join(ev), false, force); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		read = time.Since(start)
		return w.handOver(gctx, chunks, r.end(), true, force)
	})
	if err := g.Wait(); err != nil {
		return 0, err
	}
	return read, nil
}

// handOver passes recs to the writer a chunk at a time. The first records
// handed over hold the oldest live entries (see release.ready): Redis is
// asked about them before any write, and a queue that looks intact is
// refused (unless force) before anything is written.
func (w *restorer) handOver(ctx context.Context, chunks chan<- []waitqueue.Record, recs []waitqueue.Record, end, force bool) error {
	if !w.probed && (recs != nil || end) {
		if err := w.intact(ctx, recs, force); err != nil {
			return err
		}
	}
	for len(recs) > 0 {
		n := min(w.chunk(), len(recs))
		select {
		case chunks <- recs[:n]:
		case <-ctx.Done():
			return ctx.Err()
		}
		recs = recs[n:]
	}
	return nil
}

// notes says what a rebuild as read could not restore as the live line
// held it: pre-queued shoppers no draw placed, and leaves that came too late
// for the records already written.
func (r *release) notes(q string) []string {
	var notes []string
	if r.preQueued > 0 {
		notes = append(notes, undrawnNote(r.preQueued))
	}
	if r.late > 0 {
		notes = append(notes, fmt.Sprintf("warning: %d leaves named a user other than their entry's, after its record was written: "+
			"those entries are restored as they were before the leave (usherctl audit --queue %s; rebuild --dry-run reads "+
			"everything first)", r.late, q))
	}
	return notes
}

// release hands a rebuild's records over as they become final (see
// rebuildAsRead).
type release struct {
	p     *projector
	now   time.Time
	d     *drop
	chunk int
	// leaves still to apply, in stream order, and how many of them name
	// each user and each entry.
	leaves    []entryEvent
	byUser    map[string]int
	byTarget  map[uint64]int
	held      []*entry // made and not yet handed over, in the order made
	final     int      // how many of held are final
	read      uint64   // the last join read
	gate      uint64   // the last admitted entry's id (see setGate)
	h         *history
	until     uint64 // the last stream sequence the read covers
	since     uint64 // the h.places.Since() gate was set with
	first     bool   // whether records were handed over
	holding   int    // entries made that may hold a slot and are not final
	live      int    // live records among the final, until then
	preQueued int    // pre-queued records handed over
	late      int    // leaves of an entry handed over (see applyLeaves)
}

// probe is how many of the oldest live entries a rebuild asks Redis for
// before writing anything (see looksIntact).
const probe = 100

func newRelease(h *history, leaves []entryEvent, until uint64, now time.Time, chunk int) *release {
	r := &release{p: newProjector(h, 0), now: now, d: newDrop(h, nil, schedule{}, now), chunk: chunk, leaves: leaves,
		byUser: map[string]int{}, byTarget: map[uint64]int{}, h: h, until: until}
	for _, ev := range leaves {
		r.byUser[ev.user]++
		r.byTarget[ev.target]++
	}
	r.setGate()
	return r
}

// setGate sets gate to the last admitted entry the read up to until
// covers. Entries are places (event.Place), which count in groups from
// the queue's first usher.joins.v2 message: until the read meets one,
// the bound is until itself, after it the places of until's message.
func (r *release) setGate() {
	r.since = r.h.places.Since()
	bound := r.h.places.Bound(r.until)
	r.gate = 0
	for _, a := range r.h.admissions {
		if a.Seq <= bound {
			r.gate = max(r.gate, a.Seq)
		}
	}
}

// join applies a join (and the leaves before it) and returns the records
// that became final and may be written now.
func (r *release) join(ev entryEvent) []waitqueue.Record {
	if r.since != r.h.places.Since() {
		r.setGate()
	}
	r.applyLeaves(ev.streamSeq)
	e := r.p.add(ev)
	if r.holds(e) {
		r.holding++
	}
	r.held = append(r.held, e)
	r.read = ev.seq
	return r.ready(false)
}

// holds reports whether e may hold a slot: admitted with a token not
// expired. The first records handed over wait for every such entry to be
// final, so that they come before anyone waiting.
func (r *release) holds(e *entry) bool { return e.adm != nil && e.adm.ExpiresAt.After(r.now) }

// end applies the leaves after the last join and returns every record left.
func (r *release) end() []waitqueue.Record {
	r.applyLeaves(math.MaxUint64)
	r.p.done()
	return r.ready(true)
}

// applyLeaves applies the leaves stored before sequence before. A leave
// names its entry's owner (the gateway's is the signed ticket's user, the
// admitter's the entry's), so one that finishes an entry already handed
// over is a leave that did not: counted in late, its entry restored as
// before it.
func (r *release) applyLeaves(before uint64) {
	for len(r.leaves) > 0 && r.leaves[0].seq < before {
		ev := r.leaves[0]
		r.leaves = r.leaves[1:]
		r.byUser[ev.user]--
		r.byTarget[ev.target]--
		target := r.p.l.bySeq[ev.target]
		if target != nil && target.alias != 0 {
			target = r.p.l.bySeq[target.alias]
		}
		if e := r.p.add(ev); e != nil {
			r.held = append(r.held, e)
		} else if target != nil && target.released && target.leftAt.Equal(ev.stored) {
			r.late++
		}
	}
}

// ready returns the final records held, once there are a chunk of them
// (all of them at the end), admitted first within them.
func (r *release) ready(end bool) []waitqueue.Record {
	for r.final < len(r.held) {
		e := r.held[r.final]
		if !end && (r.byUser[e.user] > 0 || r.byTarget[e.seq] > 0) {
			break
		}
		r.final++
		if r.holds(e) {
			r.holding--
		}
		if !r.first && e.alias == 0 && e.record(r.now, r.d).Status.Live() {
			r.live++
		}
	}
	switch {
	case end:
	case !r.first && (r.read < r.gate || r.holding > 0 || r.live < probe), r.final < r.chunk:
		return nil
	}
	r.first = true
	for _, e := range r.held[:r.final] {
		e.released = true
	}
	recs := ordered(r.held[:r.final], r.now, r.d)
	r.held, r.final = r.held[r.final:], 0
	for _, rec := range recs {
		if rec.Alias == 0 && rec.Status == waitqueue.PreQueued {
			r.preQueued++
		}
	}
	return recs
}

// restorer writes a rebuild's records, chunk by chunk, and says what it
// wrote.
type restorer struct {
	c      *cli
	store  *projection.Projection
	q      string
	total  waitqueue.RestoreResult
	probed bool
}

func (w *restorer) chunk() int {
	if w.c.rebuildChunk > 0 {
		return w.c.rebuildChunk
	}
	return defaultRebuildChunk
}

// intact refuses a queue whose Redis state looks intact, unless force.
func (w *restorer) intact(ctx context.Context, recs []waitqueue.Record, force bool) error {
	w.probed = true
	found, probed, err := looksIntact(ctx, w.store, w.q, recs)
	if err != nil {
		return err
	}
	if found > 0 && !force {
		return fmt.Errorf("queue %s looks intact: %d of the %d oldest entries the streams hold are in Redis; "+
			"run with --force to add only what is missing (nothing is overwritten)", w.q, found, probed)
	}
	return nil
}

func (w *restorer) write(ctx context.Context, recs []waitqueue.Record) error {
	res, err := w.store.Restore(ctx, w.q, recs)
	if err != nil {
		return err
	}
	w.total.Kept += res.Kept
	for st, k := range res.Created {
		w.total.Created[st] += k
	}
	w.c.log.Info("rebuild progress", "queue", w.q, "written", len(recs))
	if w.c.hooks.rebuildBatch != nil {
		w.c.hooks.rebuildBatch(len(recs))
	}
	return nil
}

func (w *restorer) report(h *history, read time.Duration, start time.Time) {
	created := 0
	for _, k := range w.total.Created {
		created += k
	}
	fmt.Fprintf(w.c.stdout, "rebuilt %s from %s (read in %v, %v in all)\n", w.q, h.summary(),
		read.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	fmt.Fprintf(w.c.stdout, "restored %d records: %s\n", created, countsOf(w.total.Created))
	fmt.Fprintf(w.c.stdout, "kept %d records already in Redis\n", w.total.Kept)
}

func (w *restorer) notes(h *history, notes []string) {
	for _, n := range notes {
		fmt.Fprintln(w.c.stdout, n)
	}
	if h.malformed > 0 {
		fmt.Fprintf(w.c.stdout, "skipped %d malformed events\n", h.malformed)
	}
}

// reportDryRun says what a dry run would restore, by status, with the
// draw's notes.
func (w *restorer) reportDryRun(h *history, recs []waitqueue.Record, notes []string) {
	want := map[waitqueue.Status]int{}
	for _, r := range recs {
		if r.Alias != 0 {
			want[waitqueue.Alias]++
		} else {
			want[r.Status]++
		}
	}
	fmt.Fprintf(w.c.stdout, "rebuild %s (dry run): the streams hold %s\n", w.q, h.summary())
	fmt.Fprintf(w.c.stdout, "would restore up to %d records: %s\n", len(recs), countsOf(want))
	for _, n := range notes {
		fmt.Fprintln(w.c.stdout, n)
	}
}

// restoreDraw writes the draw's record, if the queue was drawn, before any
// shopper's: an admitter that saw the drawn back in line without it would
// draw an empty pre-queue over them, and a pre-queue join restored after
// the draw must queue FIFO, as the join script puts it. It reports whether
// the record was written (false: Redis held it already).
func (w *restorer) restoreDraw(ctx context.Context, d *drop) (bool, error) {
	ev := d.draw
	if ev == nil {
		return false, nil
	}
	return w.store.RestoreDraw(ctx, w.q, waitqueue.Drawing{Drawn: true, Entries: ev.Entries,
		Cursor: ev.EntriesCursor, Digest: ev.OrderDigest})
}

// reportDraw says whether the draw's record was restored or kept.
func (w *restorer) reportDraw(d *drop, restored bool) {
	if d.draw == nil {
		return
	}
	if restored {
		fmt.Fprintf(w.c.stdout, "restored the draw's record (drawn %d, drawCursor %d, drawDigest %s)\n",
			d.draw.Entries, d.draw.EntriesCursor, d.draw.OrderDigest)
	} else {
		fmt.Fprintln(w.c.stdout, "kept the draw's record already in Redis")
	}
}

// looksIntact probes Redis for the oldest live entries the streams hold
// (their records never expire while live); with none live, the oldest
// entries. New joins that arrived after a loss are the newest, so they do
// not make a lost queue look intact.
func looksIntact(ctx context.Context, store *projection.Projection, q string, recs []waitqueue.Record) (found, probed int, err error) {
	const probe = 100
	var live, all []uint64
	for _, r := range recs {
		if r.Alias == 0 && r.Status.Live() {
			live = append(live, r.Seq)
		}
		all = append(all, r.Seq)
	}
	seqs := live
	if len(seqs) == 0 {
		seqs = all
	}
	oldest := lowest(seqs, probe)
	found, err = store.Existing(ctx, q, oldest)
	return found, len(oldest), err
}

// lowest returns up to n of the smallest values.
func lowest(seqs []uint64, n int) []uint64 {
	s := append([]uint64(nil), seqs...)
	slices.Sort(s)
	if len(s) > n {
		s = s[:n]
	}
	return s
}

func countsOf(m map[waitqueue.Status]int) string {
	order := []waitqueue.Status{waitqueue.Waiting, waitqueue.Admitted, waitqueue.Expired, waitqueue.Used, waitqueue.Left, waitqueue.Alias,
		waitqueue.PreQueued}
	out := ""
	for i, st := range order {
		if i > 0 {
			out += " "
		}
		out += fmt.Sprintf("%s=%d", st, m[st])
	}
	return out
}

// undrawnNote says where pre pre-queued shoppers went with no draw recorded.
func undrawnNote(pre int) string {
	return fmt.Sprintf("no draw recorded: %d pre-queued shoppers restored into the pre-queue, with no place, "+
		"for the admitter to draw at the opening", pre)
}

// drawNotes says how the records place a scheduled drop's shoppers, and
// warns where they cannot be what the live line held: a draw whose
// pre-queue, recomputed from USHER_ENTRIES, is not the one it placed (its
// count or digest differ: older joins expired, or the draw was not the
// lottery's), and pre-queue joins up to the draw's cursor that the
// recomputed draw does not hold (restored FIFO).
func drawNotes(h *history, l *line, d *drop, recs []waitqueue.Record) []string {
	pre, drawn, stray := 0, 0, 0
	for _, r := range recs {
		switch {
		case r.Alias != 0:
		case r.Status == waitqueue.PreQueued:
			pre++
		case r.Status != waitqueue.Waiting:
		case d.place[r.Seq] > 0:
			drawn++
		default:
			if e := l.bySeq[r.Seq]; e != nil && d.draw != nil && d.classOf(e) == placeUndrawn {
				stray++
			}
		}
	}
	var out []string
	ev := d.draw
	if ev == nil {
		if pre > 0 {
			out = append(out, undrawnNote(pre))
		}
		return out
	}
	out = append(out, fmt.Sprintf("drawn at entries cursor %d (%s, USHER_OPS seq %d): %d of the %d drawn still waiting, restored in "+
		"their lottery places ahead of every later join", ev.EntriesCursor, event.TypeLotteryDrawn, ev.streamSeq, drawn, ev.Entries))
	if digest := lottery.Digest(d.order); len(d.order) != ev.Entries || digest != ev.OrderDigest {
		w := fmt.Sprintf("warning: the draw placed %d entries (order digest %s) but the pre-queue recomputed from USHER_ENTRIES "+
			"up to seq %d holds %d (digest %s): the drawn are restored in the recomputed lottery order, which may not be the one "+
			"Redis held (usherctl audit --queue %s says where they differ)", ev.Entries, ev.OrderDigest, ev.EntriesCursor,
			len(d.order), digest, h.queue)
		if h.entriesFirst > 1 {
			w += fmt.Sprintf("; USHER_ENTRIES holds events from seq %d on: older joins expired", h.entriesFirst)
		}
		out = append(out, w)
	}
	if stray > 0 {
		out = append(out, fmt.Sprintf("warning: %d pre-queue joins up to the draw's cursor are live but not in the recomputed draw: "+
			"restored FIFO, behind the drawn", stray))
	}
	return out
}
