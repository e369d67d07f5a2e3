package projection

import (
	_ "embed" // the scripts' Lua
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"usher/internal/keyspace"
	"usher/internal/script"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/internal/linescript"
)

// The projection's scripts: each a .lua file beside this one that opens
// with the invariant it keeps. The three that apply a stream share their
// start and end (apply.head.lua, apply.tail.lua: the cursor's check and
// its move).
var (
	applyEntriesScript    = script.New(linescript.Changing(applyHead, applyEntriesLua, applyTail))
	applyAdmissionsScript = script.New(linescript.Changing(applyHead, applyAdmissionsLua, applyTail))
	applyOrdersScript     = script.New(linescript.Changing(applyHead, applyOrdersLua, applyTail))
	restoreScript         = script.New(restoreLua)
	restoreDrawScript     = script.New(restoreDrawLua)
)

var (
	//go:embed apply.head.lua
	applyHead string
	//go:embed apply.tail.lua
	applyTail string
	//go:embed apply_entries.lua
	applyEntriesLua string
	//go:embed apply_admissions.lua
	applyAdmissionsLua string
	//go:embed apply_orders.lua
	applyOrdersLua string
	//go:embed restore.lua
	restoreLua string
	//go:embed restore_draw.lua
	restoreDrawLua string
)

// applyStart are the arguments every apply_*.lua script reads first,
// after lib.lua's two (apply.head.lua): where the follower stands.
type applyStart struct {
	Stream   string // the cursor's field: waitqueue.StreamEntries, …
	StreamID string // the stream's identity
	Prev     uint64 // the last stream sequence the follower applied
}

// argv is an apply script's ARGV: lib.lua's two, the start, then the
// script's own.
func (s applyStart) argv(k keyspace.Queue, ttl time.Duration, own ...any) []any {
	return append(linescript.Args(k, ttl, s.Stream, s.StreamID, s.Prev), own...)
}

// entriesArgs are apply_entries.lua's arguments: the start, then a group
// of six per event.
type entriesArgs struct {
	Start  applyStart
	Events []waitqueue.EntryEvent
}

// argv is apply_entries.lua's ARGV: per event its stream seq, kind (j | p
// | a: a join; l: a leave; x: nothing, an event that could not be read),
// a join's index in its message (-1: a usher.joined.v1 join) or the entry
// a leave leaves, user, the join's prev or the leave's reason, and when
// the stream stored it (ms; 0: unknown).
func (a entriesArgs) argv(k keyspace.Queue, ttl time.Duration) []any {
	args := a.Start.argv(k, ttl)
	for _, e := range a.Events {
		kind, entry := "j", any(-1)
		if e.Grouped {
			entry = e.Index
		}
		if e.Kind != waitqueue.InLine {
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
		args = append(args, e.StreamSeq, kind, entry, e.User, last, linescript.Ms(e.At))
	}
	return args
}

// admissionsArgs are apply_admissions.lua's arguments: the start, then a
// group of six per event.
type admissionsArgs struct {
	Start  applyStart
	Events []waitqueue.AdmissionEvent
}

// argv is apply_admissions.lua's ARGV: per event its stream seq, entry,
// user, token id, readyAt and expiresAt (ms).
func (a admissionsArgs) argv(k keyspace.Queue, ttl time.Duration) []any {
	args := a.Start.argv(k, ttl)
	for _, e := range a.Events {
		args = append(args, e.StreamSeq, e.Entry, e.User, e.TokenID, e.ReadyAt.UnixMilli(), e.ExpiresAt.UnixMilli())
	}
	return args
}

// ordersArgs are apply_orders.lua's arguments: the start, the hold and how
// long a user's bought units are remembered, then a group of ten per
// event.
type ordersArgs struct {
	Start  applyStart
	Hold   time.Duration // how long a requested order holds its slot (ms)
	Keep   time.Duration // how long a user's bought units are remembered (s)
	Events []waitqueue.OrderEvent
}

// argv is apply_orders.lua's ARGV: the hold, the keep, then per event its
// stream seq, kind (r: requested | f: final | p: final, paid), entry, token
// id, order id, user, requestedAt (ms), sku, quantity, and when the stream
// stored it (ms; 0: unknown).
func (a ordersArgs) argv(k keyspace.Queue, ttl time.Duration) []any {
	args := a.Start.argv(k, ttl, a.Hold.Milliseconds(), int(a.Keep.Seconds()))
	for _, e := range a.Events {
		kind := "r"
		switch {
		case e.Final && e.Paid:
			kind = "p"
		case e.Final:
			kind = "f"
		}
		args = append(args, e.StreamSeq, kind, e.Entry, e.TokenID, e.OrderID, e.User, e.RequestedAt.UnixMilli(), e.SKU,
			max(e.Quantity, 1), linescript.Ms(e.Stored))
	}
	return args
}

// decodeApplied reads an apply script's reply: {'ok', cursor, conflicts},
// {'rewound', cursor, 0} or {'stale', 0, 0} (ErrStale).
func decodeApplied(cmd *redis.Cmd) (waitqueue.Applied, error) {
	res, err := cmd.Slice()
	if err != nil {
		return waitqueue.Applied{}, err
	}
	if len(res) != 3 {
		return waitqueue.Applied{}, fmt.Errorf("reply of %d fields", len(res))
	}
	at := uint64(linescript.Int(res[1]))
	switch res[0] {
	case "stale":
		return waitqueue.Applied{}, waitqueue.ErrStale
	case "rewound":
		return waitqueue.Applied{Cursor: at, Rewound: true}, nil
	}
	return waitqueue.Applied{Cursor: at, Conflicts: int(linescript.Int(res[2]))}, nil
}

// restoreArgs are restore.lua's arguments: the records of one call, no
// two of one sequence.
type restoreArgs struct{ Records []waitqueue.Record }

// argv is restore.lua's ARGV: the queue's prefix, the tombstone TTL,
// whether no user has two records in the call, then a group per record:
// nine — seq, status, user, alias, tokenId, readyAt, expiresAt, orderId,
// score — or three for an entry waiting in its FIFO place: seq, 'w', user.
func (a restoreArgs) argv(k keyspace.Queue, ttl time.Duration) []any {
	batch := a.Records
	args := make([]any, 0, 3+9*len(batch))
	users := make(map[string]struct{}, len(batch))
	for _, r := range batch {
		users[r.User] = struct{}{}
	}
	unique := "0"
	if len(users) == len(batch) {
		unique = "1"
	}
	args = append(args, k.Prefix(), int(ttl/time.Second), unique)
	for _, r := range batch {
		alias, ready, exp, score := "", "", "", ""
		if r.Alias != 0 {
			alias = strconv.FormatUint(r.Alias, 10)
		}
		if r.TokenID != "" {
			ready = strconv.FormatInt(r.ReadyAt.UnixMilli(), 10)
			exp = strconv.FormatInt(r.ExpiresAt.UnixMilli(), 10)
		}
		if r.Score != 0 {
			score = strconv.FormatFloat(r.Score, 'g', -1, 64) // exactly the double the live scripts wrote
		}
		if r.Status == waitqueue.Waiting && alias == "" && r.TokenID == "" && r.OrderID == "" && score == "" {
			args = append(args, strconv.FormatUint(r.Seq, 10), "w", r.User)
			continue
		}
		args = append(args, strconv.FormatUint(r.Seq, 10), string(r.Status), r.User, alias, r.TokenID, ready, exp, r.OrderID, score)
	}
	return args
}

// decodeRestored reads restore.lua's reply: per record, 1 if it was
// created, 0 if it existed and was kept.
func decodeRestored(cmd *redis.Cmd) ([]int64, error) { return cmd.Int64Slice() }

// restoreDrawArgs are restore_draw.lua's arguments: the draw to record.
type restoreDrawArgs struct{ Drawing waitqueue.Drawing }

// argv is restore_draw.lua's ARGV: how many were drawn, the entries
// cursor the draw placed the pre-queue of, the order's digest.
func (a restoreDrawArgs) argv() []any {
	return []any{a.Drawing.Entries, a.Drawing.Cursor, a.Drawing.Digest}
}
