// Package projection keeps the line a projection of the streams: the
// admitter's followers apply each stream's events to it in order, moving
// the stream's cursor in the same atomic step (so whatever Redis loses, it
// loses the cursor's advance with it, and the followers replay exactly the
// gap); a rebuild (usherctl) restores the records Redis lost; and a
// deleted or long-closed queue's line is removed.
package projection

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"usher/internal/keyspace"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/internal/linescript"
	"usher/internal/waitqueue/ledger"

	"github.com/redis/go-redis/v9"
)

// Projection keeps the line a projection of the streams: the admitter's
// followers apply each stream's events to it in order, moving the
// stream's cursor in the same step (see Cursor); a rebuild restores the
// records Redis lost (usherctl); and a deleted or long-closed queue's line
// is removed. It is safe for concurrent use.
type Projection struct {
	client *waitqueue.Client
	rdb    redis.UniversalClient
	ledger *ledger.Ledger
}

// New returns the Projection role on c.
func New(c *waitqueue.Client) *Projection {
	return &Projection{client: c, rdb: c.Redis(), ledger: ledger.New(c)}
}

// Cursor reads how far each stream is applied to q's line. A stream the
// line has never applied is absent.
func (p *Projection) Cursor(ctx context.Context, q string) (waitqueue.Cursor, error) {
	return p.client.Cursor(ctx, q)
}

// ApplyEntries applies joins and leaves in stream order. prev is the last
// stream sequence this follower applied (or where it started); epoch is the
// entries stream's identity. It returns ErrStale when the line belongs to
// another incarnation of the stream (Drop it and start again).
func (p *Projection) ApplyEntries(ctx context.Context, q, epoch string, prev uint64, evs []waitqueue.EntryEvent) (waitqueue.Applied, error) {
	k := keyspace.Of(q)
	args := entriesArgs{Start: applyStart{Stream: waitqueue.StreamEntries, StreamID: epoch, Prev: prev}, Events: evs}
	return p.applied(q, args.Start, applyEntriesScript.Run(ctx, p.rdb, linescript.Keys(k), args.argv(k, p.client.TombstoneTTL())...))
}

// ApplyAdmissions applies admissions in stream order (see
// apply_admissions.lua).
func (p *Projection) ApplyAdmissions(ctx context.Context, q, streamID string, prev uint64, evs []waitqueue.AdmissionEvent) (waitqueue.Applied, error) {
	k := keyspace.Of(q)
	args := admissionsArgs{Start: applyStart{Stream: waitqueue.StreamAdmissions, StreamID: streamID, Prev: prev}, Events: evs}
	return p.applied(q, args.Start, applyAdmissionsScript.Run(ctx, p.rdb, linescript.Keys(k), args.argv(k, p.client.TombstoneTTL())...))
}

// ApplyOrders applies order events in stream order; a requested order
// holds its slot until its request time plus hold (see apply_orders.lua).
func (p *Projection) ApplyOrders(ctx context.Context, q, streamID string, prev uint64, hold time.Duration, evs []waitqueue.OrderEvent) (waitqueue.Applied, error) {
	k := keyspace.Of(q)
	args := ordersArgs{Start: applyStart{Stream: waitqueue.StreamOrders, StreamID: streamID, Prev: prev}, Hold: hold,
		Keep: keyspace.BoughtTTL, Events: evs}
	return p.applied(q, args.Start, applyOrdersScript.Run(ctx, p.rdb, linescript.Keys(k), args.argv(k, p.client.TombstoneTTL())...))
}

// applied reads what an apply script of stream s did to q's line.
func (p *Projection) applied(q string, s applyStart, cmd *redis.Cmd) (waitqueue.Applied, error) {
	a, err := decodeApplied(cmd)
	if err != nil {
		return waitqueue.Applied{}, fmt.Errorf("apply %s to %s: %w", s.Stream, q, err)
	}
	return a, nil
}

// Forget removes a deleted queue's line from Redis, its cursor last: a
// removal cut short leaves the cursor, and Holds says there is more to do.
// The queue leaves the stock ledger first: its shoppers no longer hold
// units the queues it shared SKUs with would count.
func (p *Projection) Forget(ctx context.Context, q string) (int, error) {
	if err := p.ledger.Withdraw(ctx, q); err != nil {
		return 0, err
	}
	n, err := p.Remove(ctx, q, true)
	if err != nil {
		return n, err
	}
	if err := p.rdb.Unlink(ctx, keyspace.Of(q).Cursor()).Err(); err != nil {
		return n, fmt.Errorf("forget %s: %w", q, err)
	}
	return n + 1, nil
}

// Holds reports whether Redis holds a line for q: its cursor (any join
// applied) or its figures (any tick).
func (p *Projection) Holds(ctx context.Context, q string) (bool, error) {
	k := keyspace.Of(q)
	n, err := p.rdb.Exists(ctx, k.Cursor(), k.Stats()).Result()
	if err != nil {
		return false, fmt.Errorf("line of %s: %w", q, err)
	}
	return n > 0, nil
}

// Remove removes a queue's line from Redis: every entry, user pointer,
// counter and set. With keepCursor the cursor stays, so the followers do not
// replay what was dropped (a closed queue past its grace period); without
// it the line starts afresh (it belonged to an older incarnation of the
// entries stream).
func (p *Projection) Remove(ctx context.Context, q string, keepCursor bool) (int, error) {
	k := keyspace.Of(q)
	var n atomic.Int64
	scan := func(ctx context.Context, c *redis.Client) error {
		it := c.Scan(ctx, 0, k.Pattern(), 500).Iterator()
		var batch []string
		flush := func() error {
			if len(batch) == 0 {
				return nil
			}
			// Each key on its own: UNLINK of several keys must stay in one
			// slot, and these do, but one by one keeps it obvious.
			_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, key := range batch {
					p.Unlink(ctx, key)
				}
				return nil
			})
			n.Add(int64(len(batch)))
			batch = batch[:0]
			return err
		}
		for it.Next(ctx) {
			if key := it.Val(); !keepCursor || key != k.Cursor() {
				batch = append(batch, key)
			}
			if len(batch) == 500 {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		if err := it.Err(); err != nil {
			return err
		}
		return flush()
	}
	var err error
	switch c := p.rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, scan)
	case *redis.Client:
		err = scan(ctx, c)
	default:
		err = errors.New("unsupported Redis client")
	}
	if err != nil {
		return int(n.Load()), fmt.Errorf("remove the line of %s: %w", q, err)
	}
	return int(n.Load()), nil
}

// restoreBatch is how many records go into one script call: big enough to
// amortise the round trip, small enough not to block Redis for long (and
// below what Lua's unpack takes: the script unpacks two values a record).
const restoreBatch = 256

// Restore writes records that Redis lost, in the order given, creating each
// only if it is absent. It is idempotent and safe to run while the gateway
// and admitters work on the same queue: it never overwrites a record and
// never moves anyone in the line. Give admitted records first, so an
// admitter ticking meanwhile sees every held slot before it sees the line.
// A user's pointer is set for entries of their own (not aliases), to the
// latest sequence. An entry given twice is written as it was given first
// (the second finds it and counts as kept).
//
// The script calls go out in order, a round of them at a time on one
// connection, so Redis applies them in the order given; the next round's
// arguments are made while Redis runs the one before.
func (p *Projection) Restore(ctx context.Context, q string, recs []waitqueue.Record) (waitqueue.RestoreResult, error) {
	res := waitqueue.RestoreResult{Created: map[waitqueue.Status]int{}}
	recs, res.Kept = firstOfEach(recs)
	if err := restoreScript.Load(ctx, p.rdb); err != nil {
		return res, fmt.Errorf("load restore script: %w", err)
	}
	k := keyspace.Of(q)
	keys := linescript.Keys(k)
	rounds := make(chan restoreRound, 1)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() { // owned by this call: it ends when the records do or the call returns
		defer close(done)
		defer close(rounds)
		for len(recs) > 0 {
			var r restoreRound
			for len(r.calls) < restorePipelined && len(recs) > 0 {
				n := min(restoreBatch, len(recs))
				r.calls = append(r.calls, recs[:n])
				r.args = append(r.args, restoreArgs{Records: recs[:n]}.argv(k, p.client.TombstoneTTL()))
				recs = recs[n:]
			}
			select {
			case rounds <- r:
			case <-stop:
				return
			}
		}
	}()
	defer func() { close(stop); <-done }()
	for r := range rounds {
		cmds := make([]*redis.Cmd, len(r.calls))
		_, err := p.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, args := range r.args {
				cmds[i] = restoreScript.EvalSha(ctx, p, keys, args...)
			}
			return nil
		})
		if err != nil {
			return res, fmt.Errorf("restore %s: %w", q, err)
		}
		for i, batch := range r.calls {
			created, err := decodeRestored(cmds[i])
			if err != nil {
				return res, fmt.Errorf("restore %s: %w", q, err)
			}
			for j, rec := range batch {
				switch {
				case j >= len(created) || created[j] == 0:
					res.Kept++
				case rec.Alias != 0:
					res.Created[waitqueue.Alias]++
				default:
					res.Created[rec.Status]++
				}
			}
		}
	}
	return res, nil
}

// firstOfEach is recs without the records of an entry given before, and
// how many it left out: the script trusts each call's seqs to be distinct.
// recs itself when they are, as a rebuild's are.
func firstOfEach(recs []waitqueue.Record) ([]waitqueue.Record, int) {
	seen := make(map[uint64]struct{}, len(recs))
	var out []waitqueue.Record // nil until the first repeat
	for i, r := range recs {
		if _, dup := seen[r.Seq]; dup {
			if out == nil {
				out = append(make([]waitqueue.Record, 0, len(recs)), recs[:i]...)
			}
			continue
		}
		seen[r.Seq] = struct{}{}
		if out != nil {
			out = append(out, r)
		}
	}
	if out == nil {
		return recs, 0
	}
	return out, len(recs) - len(out)
}

// restorePipelined is how many script calls go in one round trip.
const restorePipelined = 16

// restoreRound is one round trip of script calls: their records and
// arguments.
type restoreRound struct {
	calls [][]waitqueue.Record
	args  [][]any
}

// RestoreDraw records q's draw (from its usher.lottery.drawn.v1 event)
// unless Redis has one recorded, and says whether it did. A rebuild calls
// it before restoring the drawn, so that no admitter draws the pre-queue
// again meanwhile and a pre-queue join restored after it queues FIFO.
func (p *Projection) RestoreDraw(ctx context.Context, q string, d waitqueue.Drawing) (bool, error) {
	args := restoreDrawArgs{Drawing: d}
	n, err := restoreDrawScript.Run(ctx, p.rdb, []string{keyspace.Of(q).Stats()}, args.argv()...).Int()
	if err != nil {
		return false, fmt.Errorf("restore the draw of %s: %w", q, err)
	}
	return n == 1, nil
}

// Existing counts how many of the given entries Redis has a record of. A
// rebuild uses it to tell a queue that lost its state from an intact one.
func (p *Projection) Existing(ctx context.Context, q string, seqs []uint64) (int, error) {
	if len(seqs) == 0 {
		return 0, nil
	}
	k := keyspace.Of(q)
	keys := make([]string, len(seqs))
	for i, sq := range seqs {
		keys[i] = k.Entry(sq)
	}
	// One EXISTS per key: a multi-key EXISTS would cross slots on a cluster
	// only if the hash tag were missing, but one per key keeps it obvious.
	cmds := make([]*redis.IntCmd, len(keys))
	_, err := p.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, key := range keys {
			cmds[i] = p.Exists(ctx, key)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("existing %s: %w", q, err)
	}
	n := 0
	for _, c := range cmds {
		n += int(c.Val())
	}
	return n, nil
}
