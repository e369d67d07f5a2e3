package claims

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

// The claims' scripts: each a .lua file beside this one that opens with
// the invariant it keeps, behind linescript's library. The order worker's
// per-order ones are script.Scripts: the batcher sends a batch's calls of
// one as one command.
var (
	claimScript    = script.New(linescript.Stocked(claimLua))
	redeemScript   = script.New(linescript.Changing(redeemLua))
	releaseScript  = script.New(linescript.Changing(releaseLua))
	boughtScript   = script.New(linescript.Changing(boughtLua))
	placedScript   = script.New(linescript.Changing(placedLua))
	setStockScript = script.New(linescript.Changing(setStockLua))
)

var (
	//go:embed claim.lua
	claimLua string
	//go:embed redeem.lua
	redeemLua string
	//go:embed release.lua
	releaseLua string
	//go:embed bought.lua
	boughtLua string
	//go:embed placed.lua
	placedLua string
	//go:embed set_stock.lua
	setStockLua string
)

// claimArgs are claim.lua's arguments (after lib.lua's two).
type claimArgs struct {
	Seq   uint64
	Order waitqueue.Order
	Hold  time.Duration // how long the claim holds the slot (ms)
}

// argv is claim.lua's ARGV, in the order it reads them.
func (a claimArgs) argv(k keyspace.Queue, ttl time.Duration) []any {
	o := a.Order
	return linescript.Args(k, ttl, a.Seq, o.TokenID, o.ID, a.Hold.Milliseconds(), o.SKU, max(o.Quantity, 1), o.User, o.MaxPerUser)
}

// claimReply is claim.lua's reply.
type claimReply struct {
	Claim waitqueue.Claim
	// Snapshot is the line's stock snapshot for the ledger after a claim
	// of several units of a stock-aware line ("" otherwise).
	Snapshot string
}

// decodeClaim reads claim.lua's reply: {outcome, claimedAt ms} and, for a
// claim of several units of a stock-aware line, the snapshot.
func decodeClaim(cmd *redis.Cmd) (claimReply, error) {
	res, err := cmd.Slice()
	if err != nil {
		return claimReply{}, err
	}
	if len(res) != 2 && len(res) != 3 {
		return claimReply{}, fmt.Errorf("reply of %d fields", len(res))
	}
	r := claimReply{Claim: waitqueue.Claim{Outcome: redemptionOf(linescript.Str(res[0])), At: time.UnixMilli(linescript.Int(res[1]))}}
	if len(res) == 3 {
		r.Snapshot = linescript.Str(res[2])
	}
	return r, nil
}

// redeemArgs are redeem.lua's arguments (after lib.lua's two).
type redeemArgs struct {
	Seq       uint64
	Request   waitqueue.Request
	HoldUntil time.Time
}

// argv is redeem.lua's ARGV, in the order it reads them.
func (a redeemArgs) argv(k keyspace.Queue, ttl time.Duration) []any {
	r := a.Request
	return linescript.Args(k, ttl, a.Seq, r.TokenID, r.ID, a.HoldUntil.UnixMilli(), linescript.Ms(r.Stored),
		linescript.Ms(r.RequestedAt), r.SKU, max(r.Quantity, 1))
}

// redeemReply is redeem.lua's reply.
type redeemReply struct {
	Outcome waitqueue.Redemption
	// AdmissionSeq is where USHER_ADMISSIONS holds the token's admission,
	// as its follower recorded it (0: not applied yet).
	AdmissionSeq uint64
}

// decodeRedeem reads redeem.lua's reply: {outcome, orderId, aseq}.
func decodeRedeem(cmd *redis.Cmd) (redeemReply, error) {
	res, err := cmd.StringSlice()
	if err != nil {
		return redeemReply{}, err
	}
	if len(res) != 3 {
		return redeemReply{}, fmt.Errorf("reply of %d fields", len(res))
	}
	aseq, _ := strconv.ParseUint(res[2], 10, 64)
	return redeemReply{Outcome: redemptionOf(res[0]), AdmissionSeq: aseq}, nil
}

// redemptionOf reads a claim's or a redemption's outcome.
func redemptionOf(s string) waitqueue.Redemption {
	switch r := waitqueue.Redemption(s); r {
	case waitqueue.Redeemed, waitqueue.RedeemConflict, waitqueue.RedeemEarly, waitqueue.RedeemExpired,
		waitqueue.RedeemLeft, waitqueue.RedeemLimit, waitqueue.RedeemLapsed:
		return r
	case "claimed":
		return waitqueue.Redeemed
	}
	return waitqueue.RedeemUnknown // unknown, waiting: no admission for this token
}

// releaseArgs are release.lua's arguments (after lib.lua's two).
type releaseArgs struct {
	Seq     uint64
	OrderID string
}

// argv is release.lua's ARGV, in the order it reads them.
func (a releaseArgs) argv(k keyspace.Queue, ttl time.Duration) []any {
	return linescript.Args(k, ttl, a.Seq, a.OrderID)
}

// boughtArgs are bought.lua's arguments (after lib.lua's two).
type boughtArgs struct {
	Seq      uint64
	OrderID  string
	User     string
	Quantity int
	Keep     time.Duration // how long the user's count is kept (s)
}

// argv is bought.lua's ARGV, in the order it reads them.
func (a boughtArgs) argv(k keyspace.Queue, ttl time.Duration) []any {
	return linescript.Args(k, ttl, a.Seq, a.OrderID, a.User, a.Quantity, int(a.Keep.Seconds()))
}

// placedArgs are placed.lua's arguments (after lib.lua's two).
type placedArgs struct {
	Seq     uint64
	OrderID string
	Stock   waitqueue.StockLevel
}

// argv is placed.lua's ARGV, in the order it reads them.
func (a placedArgs) argv(k keyspace.Queue, ttl time.Duration) []any {
	return linescript.Args(k, ttl, a.Seq, a.OrderID, a.Stock.SKU, a.Stock.Available, a.Stock.Version)
}

// setStockArgs are set_stock.lua's arguments (after lib.lua's two).
type setStockArgs struct {
	// Only: these are all of the queue's SKUs; any other is dropped.
	Only   bool
	Levels []waitqueue.StockLevel
}

// argv is set_stock.lua's ARGV: only, then a group of three per SKU.
func (a setStockArgs) argv(k keyspace.Queue, ttl time.Duration) []any {
	args := linescript.Args(k, ttl, linescript.Flag(a.Only))
	for _, l := range a.Levels {
		args = append(args, l.SKU, l.Available, l.Version)
	}
	return args
}

// decodeDone reads the reply of release.lua and bought.lua: 1 when the
// script did its work (freed the slot, counted the units), 0 when it had
// been done or was not this order's.
func decodeDone(cmd *redis.Cmd) (bool, error) {
	n, err := cmd.Int()
	return n == 1, err
}
