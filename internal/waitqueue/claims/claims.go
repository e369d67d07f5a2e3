// Package claims is what an order does to the line: the gateway's claim of
// an admitted entry's token at the order's request, the order worker's
// redemption, its count of what the user bought and the release of the
// slot once the order is final, and the store's stock as it reports it.
package claims

import (
	"context"
	"fmt"
	"time"
	"usher/internal/keyspace"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/internal/linescript"
	"usher/internal/waitqueue/ledger"

	"github.com/redis/go-redis/v9"
)

// Claims is what an order does to the line: claim the token of an
// admitted entry at the order's request (the gateway), redeem it, count
// what the user bought and free the slot once the order is final (the
// order worker), and record the store's stock. It is safe for concurrent
// use.
type Claims struct {
	client *waitqueue.Client
	rdb    redis.UniversalClient
	ledger *ledger.Ledger
}

// New returns the Claims role on c. Its per-request scripts go
// through c's batcher.
func New(c *waitqueue.Client) *Claims {
	return &Claims{client: c, rdb: c.Redis(), ledger: ledger.New(c)}
}

// Claim takes the token of entry seq for order o at the moment the order is
// requested, judged on Redis time, and holds its slot for hold (the order's
// deadline and a margin). See claim.lua. A claim of several units of a
// stock-aware line is reported to the stock ledger at once (see
// Ledger).
func (c *Claims) Claim(ctx context.Context, q string, seq uint64, o waitqueue.Order, hold time.Duration) (waitqueue.Claim, error) {
	k := keyspace.Of(q)
	args := claimArgs{Seq: seq, Order: o, Hold: hold}
	r, err := decodeClaim(waitqueue.WaitOutMove(ctx, func() *redis.Cmd {
		return claimScript.Run(ctx, c.rdb, linescript.Keys(k), args.argv(k, c.client.TombstoneTTL())...)
	}))
	if err != nil {
		return waitqueue.Claim{}, fmt.Errorf("claim %s/%d: %w", q, seq, err)
	}
	if r.Snapshot != "" {
		if err := c.ledger.Report(ctx, q, 0, r.Snapshot); err != nil {
			return waitqueue.Claim{}, fmt.Errorf("claim %s/%d: %w", q, seq, err)
		}
	}
	return r.Claim, nil
}

// Redeem marks the token of entry seq as used by orderID (normally the
// gateway's Claim already did) and holds its slot at least until holdUntil,
// or answers RedeemLapsed when that order's slot is gone. See redeem.lua.
// It is RedeemRequest for a request of unknown times.
func (c *Claims) Redeem(ctx context.Context, q string, seq uint64, tokenID, orderID string, holdUntil time.Time) (waitqueue.Redemption, error) {
	r, _, err := c.RedeemRequest(ctx, q, seq, waitqueue.Request{Order: waitqueue.Order{ID: orderID, TokenID: tokenID}}, holdUntil)
	return r, err
}

// RedeemRequest is the order worker's Redeem of the token of entry seq for
// the order request r. A request the stream stored before the admission
// expired and before the shopper left is honoured however a replay after
// a Redis loss left the entry — expired, or left by the leave applied
// first — and holds the slot again while its hold lasts. See redeem.lua.
//
// It also says where USHER_ADMISSIONS holds the admission of the token —
// its stream sequence as the admissions follower recorded it, 0 while it
// has not — for the order worker to read it back from the record before it
// charges the order. Redis only says where to look: whoever can write
// Redis can write that too, so the reader checks what the stream holds
// there.
func (c *Claims) RedeemRequest(ctx context.Context, q string, seq uint64, r waitqueue.Request, holdUntil time.Time) (waitqueue.Redemption, uint64, error) {
	k := keyspace.Of(q)
	args := redeemArgs{Seq: seq, Request: r, HoldUntil: holdUntil}
	res, err := decodeRedeem(c.client.RunScript(ctx, redeemScript, linescript.Keys(k), args.argv(k, c.client.TombstoneTTL())...))
	if err != nil {
		return "", 0, fmt.Errorf("redeem %s/%d: %w", q, seq, err)
	}
	return res.Outcome, res.AdmissionSeq, nil
}

// Release frees the slot entry seq holds for orderID, once the order is
// final, so the admitter lets the next shopper in. It is idempotent.
func (c *Claims) Release(ctx context.Context, q string, seq uint64, orderID string) (bool, error) {
	k := keyspace.Of(q)
	args := releaseArgs{Seq: seq, OrderID: orderID}
	freed, err := decodeDone(c.client.RunScript(ctx, releaseScript, linescript.Keys(k), args.argv(k, c.client.TombstoneTTL())...))
	if err != nil {
		return false, fmt.Errorf("release %s/%d: %w", q, seq, err)
	}
	return freed, nil
}

// CountBought counts quantity units of entry seq's PAID order orderID
// against user's maxPerUser in queue q, unless they were counted already
// (see bought.lua), and reports whether it counted them. It is
// idempotent.
func (c *Claims) CountBought(ctx context.Context, q string, seq uint64, orderID, user string, quantity int) (bool, error) {
	k := keyspace.Of(q)
	args := boughtArgs{Seq: seq, OrderID: orderID, User: user, Quantity: quantity, Keep: keyspace.BoughtTTL}
	counted, err := decodeDone(c.client.RunScript(ctx, boughtScript, linescript.Keys(k), args.argv(k, c.client.TombstoneTTL())...))
	if err != nil {
		return false, fmt.Errorf("count bought %s/%d: %w", q, seq, err)
	}
	return counted, nil
}

// SetStock records the stock of SKUs of queue q as the store reported
// them, in q's line and in the stock ledger the queues selling them share;
// an older version than the one recorded changes nothing. With only,
// these are all of the queue's SKUs and any other the line recorded is
// dropped.
func (c *Claims) SetStock(ctx context.Context, q string, only bool, levels ...waitqueue.StockLevel) error {
	k := keyspace.Of(q)
	args := setStockArgs{Only: only, Levels: levels}
	if err := setStockScript.Run(ctx, c.rdb, linescript.Keys(k), args.argv(k, c.client.TombstoneTTL())...).Err(); err != nil {
		return fmt.Errorf("set stock of %s: %w", q, err)
	}
	if len(levels) == 0 {
		return nil
	}
	return c.ledger.SetLevels(ctx, q, levels)
}

// Placed records that the store placed the order of entry seq — its units
// are out of the store's stock now, no longer held by the line — together
// with the stock the store reported, in one step.
func (c *Claims) Placed(ctx context.Context, q string, seq uint64, orderID string, l waitqueue.StockLevel) error {
	k := keyspace.Of(q)
	args := placedArgs{Seq: seq, OrderID: orderID, Stock: l}
	if err := c.client.RunScript(ctx, placedScript, linescript.Keys(k), args.argv(k, c.client.TombstoneTTL())...).Err(); err != nil {
		return fmt.Errorf("placed %s/%d: %w", q, seq, err)
	}
	return nil
}
