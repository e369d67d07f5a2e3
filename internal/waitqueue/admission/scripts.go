package admission

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

// The admission's scripts: each a .lua file beside this one that opens
// with the invariant it keeps; the tick and the admission at once count
// stock as one (linescript.Stocked).
var (
	admitScript       = script.New(linescript.Stocked(admitLua))
	admitNowScript    = script.New(linescript.Stocked(admitNowLua))
	closedSinceScript = script.New(closedSinceLua)
	closingScript     = script.New(closingLua)
)

var (
	//go:embed admit.lua
	admitLua string
	//go:embed admit_now.lua
	admitNowLua string
	//go:embed closed_since.lua
	closedSinceLua string
	//go:embed closing.lua
	closingLua string
)

// tickArgs are admit.lua's arguments (after lib.lua's two): queue q's
// tick, and the stock ledger's figures for it.
type tickArgs struct {
	Queue string
	Tick  waitqueue.Tick
	// Ledger is the ledger's share for this tick (JSON, see
	// ledger.Reservation); "" when the queue counts its own holdings alone.
	Ledger string
}

// argv is admit.lua's ARGV, in the order it reads them.
func (a tickArgs) argv(k keyspace.Queue, ttl time.Duration) []any {
	t := a.Tick
	return linescript.Args(k, ttl, a.Queue, t.Epoch, t.TargetActive, t.MaxAdmitPerTick, t.TickLength.Milliseconds(),
		t.TokenTTL.Milliseconds(), linescript.Flag(t.Paused), t.Offset, t.Admissions.Seq, t.Admissions.StreamID,
		t.Orders.Seq, t.Orders.StreamID, linescript.Flag(t.StockAware), linescript.Flag(t.AwaitDraw),
		t.AbandonAfter.Milliseconds(), linescript.Flag(t.NoJitter), a.Ledger)
}

// tickReply is admit.lua's reply.
type tickReply struct {
	waitqueue.TickResult
	// Snapshot is what the line holds of its stock after the tick, for the
	// ledger (JSON; "" when it is not stock-aware); Unshared: the tick
	// found the line no longer stock-aware, and dropped its figures.
	Snapshot string
	Unshared bool
}

// decodeTick reads admit.lua's reply: {'early', msUntilDue}, or {'ok',
// expired, admitted, active, waiting, rate per 1000 s, behind, msUntilNext,
// stock state, sellable, abandoned, snapshot, unshared}.
func decodeTick(cmd *redis.Cmd) (tickReply, error) {
	res, err := cmd.Slice()
	if err != nil {
		return tickReply{}, err
	}
	if len(res) == 2 && res[0] == "early" {
		return tickReply{TickResult: waitqueue.TickResult{Early: true, Next: linescript.Millis(res[1])}}, nil
	}
	if len(res) != 13 || res[0] != "ok" {
		return tickReply{}, fmt.Errorf("reply of %d fields", len(res))
	}
	r := tickReply{TickResult: waitqueue.TickResult{
		Expired: int(linescript.Int(res[1])), Admitted: int(linescript.Int(res[2])),
		Active: linescript.Int(res[3]), Waiting: linescript.Int(res[4]),
		AdmitRatePerSec: float64(linescript.Int(res[5])) / 1000, Behind: linescript.Int(res[6]) == 1,
		Next: linescript.Millis(res[7]), Stock: linescript.Str(res[8]), Sellable: linescript.Int(res[9]),
		Abandoned: int(linescript.Int(res[10])),
	}}
	r.Snapshot, r.Unshared = linescript.Str(res[11]), linescript.Int(res[12]) == 1
	return r, nil
}

// atOnceArgs are admit_now.lua's arguments (after lib.lua's two).
type atOnceArgs struct {
	Queue, Epoch string
	Limits       waitqueue.AtOnce
	// Only is the entry to admit alone if it waits (a passthrough join);
	// 0: the head of the line.
	Only uint64
	// Ledger is the ledger's share for this step (JSON); "" when the
	// queue counts its own holdings alone.
	Ledger string
}

// argv is admit_now.lua's ARGV, in the order it reads them.
func (a atOnceArgs) argv(k keyspace.Queue, ttl time.Duration) []any {
	return linescript.Args(k, ttl, a.Queue, a.Epoch, a.Limits.TokenTTL.Milliseconds(), a.Limits.TickLength.Milliseconds(),
		linescript.Flag(a.Limits.StockAware), a.Only, a.Ledger)
}

// atOnceReply is admit_now.lua's reply.
type atOnceReply struct {
	// Later: a guard only a tick lifts refused (ErrNotCurrent).
	Later bool
	// Snapshot is what the line holds of its stock after the step, for
	// the ledger (JSON; "" when the step counted no stock).
	Snapshot string
	Admitted []uint64
}

// decodeAtOnce reads admit_now.lua's reply: {'ok' | 'later', snapshot,
// the sequences admitted...}.
func decodeAtOnce(cmd *redis.Cmd) (atOnceReply, error) {
	res, err := cmd.StringSlice()
	if err != nil {
		return atOnceReply{}, err
	}
	if len(res) < 2 {
		return atOnceReply{}, fmt.Errorf("reply of %d fields", len(res))
	}
	r := atOnceReply{Later: res[0] == "later", Snapshot: res[1], Admitted: make([]uint64, len(res)-2)}
	for i, s := range res[2:] {
		r.Admitted[i], _ = strconv.ParseUint(s, 10, 64)
	}
	return r, nil
}

// closedSinceArgs are closed_since.lua's arguments.
type closedSinceArgs struct{ Closed bool }

// argv is closed_since.lua's ARGV.
func (a closedSinceArgs) argv() []any { return []any{linescript.Flag(a.Closed)} }

// decodeClosedSince reads closed_since.lua's reply: the closing time in
// ms, 0 while open (zero).
func decodeClosedSince(cmd *redis.Cmd) (time.Time, error) {
	ms, err := cmd.Int64()
	if err != nil || ms == 0 {
		return time.Time{}, err
	}
	return time.UnixMilli(ms), nil
}

// decodeClosing reads closing.lua's reply (it takes no arguments):
// {closedAt ms or 0, now ms, held, the last slot's expiry ms or 0}.
func decodeClosing(cmd *redis.Cmd) (waitqueue.Closing, error) {
	r, err := cmd.Int64Slice()
	if err == nil && len(r) != 4 {
		err = fmt.Errorf("%d fields, want 4", len(r))
	}
	if err != nil {
		return waitqueue.Closing{}, err
	}
	at := func(ms int64) time.Time {
		if ms == 0 {
			return time.Time{}
		}
		return time.UnixMilli(ms)
	}
	return waitqueue.Closing{ClosedAt: at(r[0]), Now: at(r[1]), Held: r[2], FreeAt: at(r[3])}, nil
}
