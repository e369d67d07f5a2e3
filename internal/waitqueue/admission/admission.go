// Package admission is every way into a slot: the admission tick the
// admitter runs per queue, admission at once of a join (AtOnce, which the
// gateway calls with the join's entry), the outbox of admissions to
// announce and the leaves the line took to record, and what a closed
// queue's line says of its end. Both ways obey one set of rules, the
// tick's (admit.lua), recorded by the tick for admission at once to obey
// alike.
package admission

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"usher/internal/keyspace"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/internal/linescript"
	"usher/internal/waitqueue/ledger"
	"usher/internal/waitqueue/line"

	"github.com/redis/go-redis/v9"
)

// Admission admits: the admission tick the admitter runs per queue,
// admission at once of a join (the gateway's), the outbox of admissions
// to announce and the leaves the line took to record, and what a
// closed queue's line says of its end. A stock-aware step reserves in
// the stock ledger first (see Ledger). It is safe for concurrent use.
type Admission struct {
	client *waitqueue.Client
	rdb    redis.UniversalClient
	ledger *ledger.Ledger
	line   *line.Line // the shoppers' leaves it records (see line.Leave)
}

// New returns the Admission role on c.
func New(c *waitqueue.Client) *Admission {
	return &Admission{client: c, rdb: c.Redis(), ledger: ledger.New(c), line: line.New(c)}
}

// Admit runs the queue's admission tick if it is due: expires stale tokens,
// admits as many as fit, records them in the outbox. See admit.lua for
// the invariants. A stock-aware tick whose Share names SKUs reserves its
// units in the stock ledger first and reports what the line holds after
// (see package ledger); one that finds the line no longer stock-aware takes
// it out of the ledger.
func (a *Admission) Admit(ctx context.Context, q string, t waitqueue.Tick) (waitqueue.TickResult, error) {
	k := keyspace.Of(q)
	shared := t.StockAware && len(t.Share.SKUs) > 0
	var res ledger.Reservation
	if shared {
		want := 0
		if !t.Paused {
			want = t.TargetActive
			if t.MaxAdmitPerTick > 0 {
				want = min(want, t.MaxAdmitPerTick)
			}
		}
		var err error
		if res, err = a.ledger.Reserve(ctx, q, t.Share, want); err != nil {
			return waitqueue.TickResult{}, fmt.Errorf("admit %s: %w", q, err)
		}
	}
	args := tickArgs{Queue: q, Tick: t, Ledger: res.Share}
	r, err := decodeTick(admitScript.Run(ctx, a.rdb, linescript.Keys(k), args.argv(k, a.client.TombstoneTTL())...))
	if err != nil {
		return waitqueue.TickResult{}, fmt.Errorf("admit %s: %w", q, err)
	}
	switch {
	case r.Early:
		if shared && res.Grant > 0 {
			err = a.ledger.Cancel(ctx, q, res.ID) // not due: the reservation is unused
		}
	case shared && r.Snapshot != "":
		err = a.ledger.Report(ctx, q, t.TickLength, r.Snapshot)
	case r.Unshared:
		err = a.ledger.Withdraw(ctx, q)
	}
	if err != nil {
		return waitqueue.TickResult{}, fmt.Errorf("admit %s: %w", q, err)
	}
	return r.TickResult, nil
}

// AdmitNow admits the head of q's line at once, outside the ticks (see
// admit_now.lua), and returns the sequences admitted: within what the
// queue's last tick obeyed — its limit of slots held, what is left of its
// maxAdmitPerTick in the current tick, no admission while it was paused —
// and the units that could still be sold at this moment.
func (a *Admission) AdmitNow(ctx context.Context, q, epoch string, at waitqueue.AtOnce) ([]uint64, error) {
	return a.admitNow(ctx, q, epoch, at, 0)
}

// AdmitEntry admits entry seq of q at once if it waits, outside the ticks
// and whatever its place: a passthrough join (nobody waits there, so order
// does not matter). The guards of AdmitNow hold, but for maxAdmitPerTick.
func (a *Admission) AdmitEntry(ctx context.Context, q, epoch string, seq uint64, at waitqueue.AtOnce) ([]uint64, error) {
	return a.admitNow(ctx, q, epoch, at, seq)
}

func (a *Admission) admitNow(ctx context.Context, q, epoch string, at waitqueue.AtOnce, only uint64) ([]uint64, error) {
	var res ledger.Reservation
	if at.StockAware && len(at.Share.SKUs) > 0 {
		var err error
		if res, err = a.ledger.Reserve(ctx, q, at.Share, 1); err != nil {
			return nil, fmt.Errorf("admit now %s: %w", q, err)
		}
	}
	return a.admitNowOn(ctx, q, epoch, at, only, res)
}

// admitNowOn is admitNow on reservation res (none: Share is empty), then
// reports the line's snapshot or releases the reservation unused.
func (a *Admission) admitNowOn(ctx context.Context, q, epoch string, at waitqueue.AtOnce, only uint64, res ledger.Reservation) ([]uint64, error) {
	k := keyspace.Of(q)
	shared := res.Share != ""
	args := atOnceArgs{Queue: q, Epoch: epoch, Limits: at, Only: only, Ledger: res.Share}
	r, err := decodeAtOnce(admitNowScript.Run(ctx, a.rdb, linescript.Keys(k), args.argv(k, a.client.TombstoneTTL())...))
	if err != nil {
		return nil, fmt.Errorf("admit now %s: %w", q, err)
	}
	switch {
	case shared && r.Snapshot != "":
		err = a.ledger.Report(ctx, q, at.TickLength, r.Snapshot)
	case shared && res.Grant > 0:
		err = a.ledger.Cancel(ctx, q, res.ID) // refused before it counted the stock: the reservation is unused
	}
	if err != nil {
		return nil, fmt.Errorf("admit now %s: %w", q, err)
	}
	if r.Later {
		return nil, waitqueue.ErrNotCurrent
	}
	return r.Admitted, nil
}

// Outbox returns up to max admissions not yet announced, oldest first.
func (a *Admission) Outbox(ctx context.Context, q string, max int) ([]waitqueue.Admission, error) {
	k := keyspace.Of(q)
	seqs, err := a.rdb.ZRange(ctx, k.Outbox(), 0, int64(max)-1).Result()
	if err != nil || len(seqs) == 0 {
		return nil, err
	}
	cmds := make([]*redis.SliceCmd, len(seqs))
	_, err = a.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, sq := range seqs {
			seq, _ := strconv.ParseUint(sq, 10, 64)
			cmds[i] = p.HMGet(ctx, k.Entry(seq), "user", "tokenId", "readyAt", "expiresAt", "joined")
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read outbox %s: %w", q, err)
	}
	out := make([]waitqueue.Admission, 0, len(seqs))
	for i, sq := range seqs {
		v := cmds[i].Val()
		seq, _ := strconv.ParseUint(sq, 10, 64)
		adm := waitqueue.Admission{Queue: q, Seq: seq}
		adm.User, _ = v[0].(string)
		adm.TokenID, _ = v[1].(string)
		adm.ReadyAt, adm.ExpiresAt, adm.JoinedAt = linescript.MsTime(v[2]), linescript.MsTime(v[3]), linescript.MsTime(v[4])
		if adm.TokenID == "" {
			// Its record went (a leave freed it and expired meanwhile, or
			// a loss): nothing to announce, nothing anyone can order with.
			if err := a.Announced(ctx, q, []uint64{seq}); err != nil {
				return nil, err
			}
			continue
		}
		out = append(out, adm)
	}
	return out, nil
}

// Announced removes admissions from the outbox once their events are stored.
// Removing by sequence is idempotent, so two admitters draining the same
// outbox never drop an admission the other has not published.
func (a *Admission) Announced(ctx context.Context, q string, seqs []uint64) error {
	if len(seqs) == 0 {
		return nil
	}
	members := make([]any, len(seqs))
	for i, sq := range seqs {
		members[i] = strconv.FormatUint(sq, 10)
	}
	if err := a.rdb.ZRem(ctx, keyspace.Of(q).Outbox(), members...).Err(); err != nil {
		return fmt.Errorf("trim outbox %s: %w", q, err)
	}
	return nil
}

// LeavesToRecord returns up to max leaves of each kind the line took but
// the entries stream does not hold yet: the abandoned, and shoppers'
// leaves their gateway did not store.
func (a *Admission) LeavesToRecord(ctx context.Context, q string, max int) ([]waitqueue.UnrecordedLeave, error) {
	k := keyspace.Of(q)
	var gone, leaving *redis.StringSliceCmd
	_, err := a.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		gone = p.ZRange(ctx, k.Leaves(), 0, int64(max)-1)
		leaving = p.ZRange(ctx, k.Leaving(), 0, int64(max)-1)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read leaves to record %s: %w", q, err)
	}
	users := make([]*redis.StringCmd, len(gone.Val()))
	if len(users) > 0 {
		_, err = a.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, sq := range gone.Val() {
				seq, _ := strconv.ParseUint(sq, 10, 64)
				users[i] = p.HGet(ctx, k.Entry(seq), "user")
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("read abandoned %s: %w", q, err)
		}
	}
	out := make([]waitqueue.UnrecordedLeave, 0, len(users)+len(leaving.Val()))
	for i, sq := range gone.Val() {
		seq, _ := strconv.ParseUint(sq, 10, 64)
		out = append(out, waitqueue.UnrecordedLeave{Seq: seq, User: users[i].Val(), Reason: waitqueue.ReasonAbandoned})
	}
	for _, m := range leaving.Val() {
		sq, user, _ := strings.Cut(m, ":")
		seq, err := strconv.ParseUint(sq, 10, 64)
		if err != nil || user == "" {
			continue // not a member leave.lua writes
		}
		out = append(out, waitqueue.UnrecordedLeave{Seq: seq, User: user})
	}
	return out, nil
}

// LeavesRecorded takes the leaves the stream stored out of the line's
// leaves to record, and frees the slots the shoppers' leaves kept until
// now (line.LeaveRecorded).
func (a *Admission) LeavesRecorded(ctx context.Context, q string, done []waitqueue.UnrecordedLeave) error {
	var gone []any
	var left []waitqueue.UnrecordedLeave
	for _, l := range done {
		if l.Reason == "" {
			left = append(left, l)
		} else {
			gone = append(gone, strconv.FormatUint(l.Seq, 10))
		}
	}
	if len(gone) > 0 {
		if err := a.rdb.ZRem(ctx, keyspace.Of(q).Leaves(), gone...).Err(); err != nil {
			return fmt.Errorf("trim abandoned %s: %w", q, err)
		}
	}
	return a.line.LeaveRecorded(ctx, q, left...)
}

// ClosedSince records that q is closed (or forgets it when it is open again)
// and returns since when, on Redis time; zero while open.
func (a *Admission) ClosedSince(ctx context.Context, q string, closed bool) (time.Time, error) {
	args := closedSinceArgs{Closed: closed}
	at, err := decodeClosedSince(closedSinceScript.Run(ctx, a.rdb, []string{keyspace.Of(q).Stats()}, args.argv()...))
	if err != nil {
		return time.Time{}, fmt.Errorf("closed since %s: %w", q, err)
	}
	return at, nil
}

// Closing reads how far q's closing has gone (see the gateway's DELETE of
// a queue).
func (a *Admission) Closing(ctx context.Context, q string) (waitqueue.Closing, error) {
	k := keyspace.Of(q)
	c, err := decodeClosing(closingScript.Run(ctx, a.rdb, []string{k.Stats(), k.Active()}))
	if err != nil {
		return waitqueue.Closing{}, fmt.Errorf("closing of %s: %w", q, err)
	}
	return c, nil
}

// SlotsFreeAt is when the last slot of q's active set frees: its highest
// score, a token's expiresAt (readyAt plus the lifetime the queue had at
// the admission, jitter included) or an order's hold. Zero when no slot is
// taken. A closed queue's line is kept until then (see the admitter's
// dropIfClosedLong): a READY shopper orders until their token expires.
func (a *Admission) SlotsFreeAt(ctx context.Context, q string) (time.Time, error) {
	// ZRANGE … REV, not ZREVRANGE: the services' ACL allows zrange.
	last, err := a.rdb.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{Key: keyspace.Of(q).Active(), Start: 0, Stop: 0, Rev: true}).Result()
	if err != nil {
		return time.Time{}, fmt.Errorf("slots of %s: %w", q, err)
	}
	if len(last) == 0 {
		return time.Time{}, nil
	}
	return time.UnixMilli(int64(last[0].Score)), nil
}
