package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"usher/shared/catalog"
	"usher/shared/event"
	"usher/shared/lottery"
	"usher/shared/waitqueue"
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
rebuilt line; admitted records are written first to narrow that window.`

// defaultRebuildChunk is how many records a rebuild writes between progress
// reports.
const defaultRebuildChunk = 20000

func (c *cli) rebuild(ctx context.Context, args []string) error {
	fs := newFlags("rebuild", rebuildSynopsis)
	q := fs.String("queue", "", "the queue to rebuild (required)")
	force := fs.Bool("force", false, "run even though the queue's Redis state looks intact")
	dryRun := fs.Bool("dry-run", false, "report what would be restored, write nothing")
	pos, err := c.parse(fs, args)
	if err != nil {
		return done(err)
	}
	switch {
	case len(pos) > 0:
		return usagef("rebuild: unexpected arguments %q", pos)
	case *q == "":
		return usagef("rebuild: --queue is required")
	case !catalog.ValidName(*q):
		return usagef("rebuild: --queue %q is not a queue name", *q)
	}
	nc, js, err := c.jetStream(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	rdb, store, err := c.redisStore(ctx)
	if err != nil {
		return err
	}
	defer rdb.Close()

	start := time.Now()
	h, err := loadHistory(ctx, js, *q, parts{orders: true})
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
			"the lottery order cannot be recomputed, so the drawn cannot be put back in their places", *q,
			event.TypeLotteryDrawn, d.draw.streamSeq, d.draw.Seed, lottery.SeedSize)
	}
	recs := l.records(c.now(), d)
	notes := drawNotes(h, l, d, recs)

	intact, probed, err := looksIntact(ctx, store, *q, recs)
	if err != nil {
		return err
	}
	if intact > 0 && !*force {
		return fmt.Errorf("queue %s looks intact: %d of the %d oldest entries the streams hold are in Redis; "+
			"run with --force to add only what is missing (nothing is overwritten)", *q, intact, probed)
	}
	if *dryRun {
		want := map[waitqueue.Status]int{}
		for _, r := range recs {
			if r.Alias != 0 {
				want[waitqueue.Alias]++
			} else {
				want[r.Status]++
			}
		}
		fmt.Fprintf(c.stdout, "rebuild %s (dry run): the streams hold %s\n", *q, h.summary())
		fmt.Fprintf(c.stdout, "would restore up to %d records: %s\n", len(recs), countsOf(want))
		for _, n := range notes {
			fmt.Fprintln(c.stdout, n)
		}
		return nil
	}
	// The draw first: an admitter that saw the drawn back in line without
	// it would draw an empty pre-queue over them, and a pre-queue join
	// restored after the draw must queue FIFO, as the join script puts it.
	drawRestored := false
	if ev := d.draw; ev != nil {
		if drawRestored, err = store.RestoreDraw(ctx, *q, waitqueue.Drawing{Drawn: true, Entries: ev.Entries,
			Cursor: ev.EntriesCursor, Digest: ev.OrderDigest}); err != nil {
			return err
		}
	}
	chunk := c.rebuildChunk
	if chunk <= 0 {
		chunk = defaultRebuildChunk
	}
	total := waitqueue.RestoreResult{Created: map[waitqueue.Status]int{}}
	for len(recs) > 0 {
		n := min(chunk, len(recs))
		res, err := store.Restore(ctx, *q, recs[:n])
		if err != nil {
			return err
		}
		recs = recs[n:]
		total.Kept += res.Kept
		for st, k := range res.Created {
			total.Created[st] += k
		}
		c.log.Info("rebuild progress", "queue", *q, "written", n, "left", len(recs))
		if c.hooks.rebuildBatch != nil {
			c.hooks.rebuildBatch(n)
		}
	}
	created := 0
	for _, k := range total.Created {
		created += k
	}
	fmt.Fprintf(c.stdout, "rebuilt %s from %s (read in %v, %v in all)\n", *q, h.summary(),
		read.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	fmt.Fprintf(c.stdout, "restored %d records: %s\n", created, countsOf(total.Created))
	fmt.Fprintf(c.stdout, "kept %d records already in Redis\n", total.Kept)
	if d.draw != nil {
		if drawRestored {
			fmt.Fprintf(c.stdout, "restored the draw's record (drawn %d, drawCursor %d, drawDigest %s)\n",
				d.draw.Entries, d.draw.EntriesCursor, d.draw.OrderDigest)
		} else {
			fmt.Fprintln(c.stdout, "kept the draw's record already in Redis")
		}
	}
	for _, n := range notes {
		fmt.Fprintln(c.stdout, n)
	}
	if h.malformed > 0 {
		fmt.Fprintf(c.stdout, "skipped %d malformed events\n", h.malformed)
	}
	return nil
}

// looksIntact probes Redis for the oldest live entries the streams hold
// (their records never expire while live); with none live, the oldest
// entries. New joins that arrived after a loss are the newest, so they do
// not make a lost queue look intact.
func looksIntact(ctx context.Context, store *waitqueue.Store, q string, recs []waitqueue.Record) (found, probed int, err error) {
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
			out = append(out, fmt.Sprintf("no draw recorded: %d pre-queued shoppers restored into the pre-queue, with no place, "+
				"for the admitter to draw at the opening", pre))
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
