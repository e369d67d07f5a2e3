package waitqueue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"usher/internal/keyspace"
)

// The streams a line follows, as the cursor names them.
const (
	StreamEntries    = "entries"
	StreamAdmissions = "admissions"
	StreamOrders     = "orders"
)

// Position is how far one stream is applied to a queue's line: the last
// stream sequence applied, in the stream whose identity is StreamID.
type Position struct {
	Seq      uint64
	StreamID string
}

// Cursor says how far each stream is applied to a queue's line.
type Cursor map[string]Position

// Cursor reads how far each stream is applied to q's line. A stream the
// line has never applied is absent.
func (s *Store) Cursor(ctx context.Context, q string) (Cursor, error) {
	v, err := s.rdb.HGetAll(ctx, keyspace.Of(q).Cursor()).Result()
	if err != nil {
		return nil, fmt.Errorf("cursor %s: %w", q, err)
	}
	out := Cursor{}
	for _, st := range []string{StreamEntries, StreamAdmissions, StreamOrders} {
		id, ok := v[st+".id"]
		if !ok {
			continue
		}
		seq, _ := strconv.ParseUint(v[st], 10, 64)
		out[st] = Position{Seq: seq, StreamID: id}
	}
	return out, nil
}

// Applied is what one Apply call did.
type Applied struct {
	// Cursor is how far the stream is applied now. After Rewound it is
	// where the follower must start again.
	Cursor uint64
	// Rewound: the line is behind prev — Redis lost writes since the
	// follower applied it — and nothing was applied.
	Rewound bool
	// Conflicts counts events whose entry's record names another user.
	Conflicts int
}

// EntryEvent is a join or a leave of USHER_ENTRIES.
type EntryEvent struct {
	StreamSeq uint64 // the event's sequence; for a join, the entry's too
	Leave     bool
	Entry     uint64 // the entry a leave leaves (a join's is StreamSeq)
	User      string
	Prev      uint64 // a join's previous entry as the gateway saw it (0: none)
	Kind      JoinKind
	Reason    string // a leave's reason ("" or ReasonAbandoned)
	// At is when the stream stored the event (zero: unknown); a join
	// keeps it as its entry's JoinedAt, a leave as the time it left (an
	// order request stored before it stands: see applyOrdersScript).
	At time.Time
}

// AdmissionEvent is an admission of USHER_ADMISSIONS.
type AdmissionEvent struct {
	StreamSeq uint64
	Entry     uint64
	User      string
	TokenID   string
	ReadyAt   time.Time
	ExpiresAt time.Time
}

// OrderEvent is an order request or a final order of USHER_ORDERS.
type OrderEvent struct {
	StreamSeq   uint64
	Final       bool
	Paid        bool // a final order that is PAID
	Entry       uint64
	TokenID     string
	OrderID     string
	User        string
	RequestedAt time.Time
	SKU         string
	Quantity    int
	// Stored is when the stream stored the event (zero: unknown): a
	// request is judged by it against an expiry or a leave a replay
	// applied first (see applyOrdersScript).
	Stored time.Time
}

// ApplyEntries applies joins and leaves in stream order. prev is the last
// stream sequence this follower applied (or where it started); epoch is the
// entries stream's identity. It returns ErrStale when the line belongs to
// another incarnation of the stream (Drop it and start again).
func (s *Store) ApplyEntries(ctx context.Context, q, epoch string, prev uint64, evs []EntryEvent) (Applied, error) {
	k := keyspace.Of(q)
	args := s.args(k, StreamEntries, epoch, prev)
	for _, e := range evs {
		kind, entry := "j", e.StreamSeq
		if e.Kind != InLine {
			kind = string(e.Kind)
		}
		switch {
		case e.Leave && e.Entry == 0, !e.Leave && e.User == "":
			kind, entry = "x", 0
		case e.Leave:
			kind, entry = "l", e.Entry
		}
		var last any = e.Prev
		if e.Leave {
			last = e.Reason
		}
		var at int64
		if !e.At.IsZero() {
			at = e.At.UnixMilli()
		}
		args = append(args, e.StreamSeq, kind, entry, e.User, last, at)
	}
	return s.apply(ctx, q, applyEntriesScript, stdKeys(k), args)
}

// ApplyAdmissions applies admissions in stream order (see
// applyAdmissionsScript).
func (s *Store) ApplyAdmissions(ctx context.Context, q, streamID string, prev uint64, evs []AdmissionEvent) (Applied, error) {
	k := keyspace.Of(q)
	args := s.args(k, StreamAdmissions, streamID, prev)
	for _, e := range evs {
		args = append(args, e.StreamSeq, e.Entry, e.User, e.TokenID, e.ReadyAt.UnixMilli(), e.ExpiresAt.UnixMilli())
	}
	return s.apply(ctx, q, applyAdmissionsScript, stdKeys(k), args)
}

// ApplyOrders applies order events in stream order; a requested order
// holds its slot until its request time plus hold (see applyOrdersScript).
func (s *Store) ApplyOrders(ctx context.Context, q, streamID string, prev uint64, hold time.Duration, evs []OrderEvent) (Applied, error) {
	k := keyspace.Of(q)
	args := s.args(k, StreamOrders, streamID, prev, hold.Milliseconds(), int(keyspace.BoughtTTL.Seconds()))
	for _, e := range evs {
		kind := "r"
		switch {
		case e.Final && e.Paid:
			kind = "p"
		case e.Final:
			kind = "f"
		}
		args = append(args, e.StreamSeq, kind, e.Entry, e.TokenID, e.OrderID, e.User, e.RequestedAt.UnixMilli(), e.SKU, max(e.Quantity, 1),
			unixMilli(e.Stored))
	}
	return s.apply(ctx, q, applyOrdersScript, stdKeys(k), args)
}

func (s *Store) apply(ctx context.Context, q string, sc *redis.Script, keys []string, args []any) (Applied, error) {
	res, err := sc.Run(ctx, s.rdb, keys, args...).Slice()
	if err != nil {
		return Applied{}, fmt.Errorf("apply %s to %s: %w", args[2], q, err)
	}
	if len(res) != 3 {
		return Applied{}, fmt.Errorf("apply %s to %s: reply of %d fields", args[2], q, len(res))
	}
	at, _ := res[1].(int64)
	conflicts, _ := res[2].(int64)
	switch res[0] {
	case "stale":
		return Applied{}, fmt.Errorf("apply entries to %s: %w", q, ErrStale)
	case "rewound":
		return Applied{Cursor: uint64(at), Rewound: true}, nil
	}
	return Applied{Cursor: uint64(at), Conflicts: int(conflicts)}, nil
}

// Forget removes a deleted queue's line from Redis, its cursor last: a
// removal cut short leaves the cursor, and Holds says there is more to do.
// The queue leaves the stock ledger first: its shoppers no longer hold
// units the queues it shared SKUs with would count.
func (s *Store) Forget(ctx context.Context, q string) (int, error) {
	if err := s.Withdraw(ctx, q); err != nil {
		return 0, err
	}
	n, err := s.Drop(ctx, q, true)
	if err != nil {
		return n, err
	}
	if err := s.rdb.Unlink(ctx, keyspace.Of(q).Cursor()).Err(); err != nil {
		return n, fmt.Errorf("forget %s: %w", q, err)
	}
	return n + 1, nil
}

// Holds reports whether Redis holds a line for q: its cursor (any join
// applied) or its figures (any tick).
func (s *Store) Holds(ctx context.Context, q string) (bool, error) {
	k := keyspace.Of(q)
	n, err := s.rdb.Exists(ctx, k.Cursor(), k.Stats()).Result()
	if err != nil {
		return false, fmt.Errorf("line of %s: %w", q, err)
	}
	return n > 0, nil
}

// Drop removes a queue's line from Redis: every entry, user pointer,
// counter and set. With keepCursor the cursor stays, so the followers do not
// replay what was dropped (a closed queue past its grace period); without
// it the line starts afresh (it belonged to an older incarnation of the
// entries stream).
func (s *Store) Drop(ctx context.Context, q string, keepCursor bool) (int, error) {
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
	switch c := s.rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, scan)
	case *redis.Client:
		err = scan(ctx, c)
	default:
		err = errors.New("unsupported Redis client")
	}
	if err != nil {
		return int(n.Load()), fmt.Errorf("drop %s: %w", q, err)
	}
	return int(n.Load()), nil
}
