// Package ledger is the stock ledger: the record, on one Redis node, of
// what every stock-aware queue holds of the SKUs it shares with others,
// so that queues selling one SKU never admit more shoppers than its units
// between them (see Ledger).
package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"usher/internal/keyspace"
	"usher/internal/script"
	"usher/internal/waitqueue"
)

// Ledger is the stock ledger: queues that sell the same SKU share its
// units. A stock-aware line never admits an unordered shopper beyond the
// units that could still be sold, and "could still be sold" counts every
// queue that sells the SKU: the shoppers each one admitted who have not
// ordered (one unit each, of any SKU of their queue) and the orders each
// one claimed that the store has not placed yet.
//
// Each queue's keys share the hash tag {q}, so on a Redis Cluster two
// queues' lines may live on different nodes, and no one script can read
// both. What they share lives in the stock ledger instead (keys under
// keyspace.StockLedger: one hash tag, one node), and every stock-aware
// admission step takes three calls:
//
//  1. Reserve, on the ledger: what every other queue sharing the SKUs
//     holds — as its last report said, plus the units reserved for its
//     admission steps on the way — and a grant of units for this step,
//     reserved at once so that no other queue counts them as free;
//  2. the step itself, on the queue's node (admit.lua, admit_now.lua):
//     its own holdings read there and then (a claim made a moment ago
//     counts), the others' from the ledger, capped by the grant; it
//     records that it used the reservation and returns a snapshot of what
//     the line holds after it;
//  3. Report, on the ledger: the snapshot replaces the queue's record, and
//     every reservation the line had used by then is released (the
//     snapshot counts its admissions).
//
// A crash between the calls leaves a reservation the ledger still counts:
// fewer units for a moment, never more; the queue's next report (its next
// tick) releases it. A reservation older than one the line has used is
// refused by the line (the ledger may have released its units with that
// newer step's report), so no admission ever rests on a released grant.
// A queue named as a peer that has never reported blocks the grant — what
// it holds is unknown — until it does (its first tick).
//
// A claim of several units counts on the queue's own node at once; for
// the other queues it counts from that queue's next report: the claim's
// own, made right after it (see Claims.Claim). The store's figures reach
// the ledger with every report and every SetStock (the admitter's refresh,
// a restock, the order worker's report).
//
// The ledger's node is one for every stock-aware queue: while it cannot be
// reached, their ticks fail and they admit nobody, as while their own node
// cannot be. Figures travel between the scripts as JSON numbers (Redis's
// cjson: exact below 10^14; units are at most 10^12, versions and ids
// count from 1).
//
// The line's roles use the Ledger for their stock-aware steps; it is safe
// for concurrent use.
type Ledger struct {
	client *waitqueue.Client
}

// New returns the stock ledger on c.
func New(c *waitqueue.Client) *Ledger { return &Ledger{client: c} }

// Reservation is the ledger's answer to Reserve, for the one admission
// step it was made for.
type Reservation struct {
	// ID counts up per queue; Grant is the units reserved for the step: it
	// admits no more.
	ID, Grant int64
	// Share is the ledger's figures of the queues the line shares its
	// SKUs with, as JSON: the line's step takes them as they are.
	Share string
}

// reservation is the JSON of reserve.lua's answer (see Reservation), handed to
// the line's admission step as it is.
type reservation struct {
	// Res is the reservation's id (counting up per queue) and Grant the
	// units reserved for the step: it admits no more.
	Res   int64 `json:"res"`
	Grant int64 `json:"grant"`
	// Admitted is what the other queues' unordered shoppers hold (one unit
	// each), their reservations on the way included; Busy everything they
	// hold or have pending of the SKUs (units that may come back).
	Admitted int64 `json:"admitted"`
	Busy     int64 `json:"busy"`
	// SKUs: each SKU's units in the store as the ledger knows them (the
	// latest version any queue reported) and what the other queues'
	// claims hold of it.
	SKUs map[string]ledgerSKU `json:"skus"`
}

type ledgerSKU struct {
	Avail   *int64 `json:"avail,omitempty"` // nil: no queue reported a figure yet
	Ver     int64  `json:"ver"`
	Claimed int64  `json:"claimed"`
}

// snapshot is what a line holds of its stock after an admission step,
// reported to the ledger (report.lua).
type snapshot struct {
	// Ver counts the line's snapshots, Res is the last reservation the
	// line used: together they order snapshots (a later one has the
	// higher Res, or the same and the higher Ver).
	Ver      int64              `json:"ver"`
	Res      int64              `json:"res"`
	Admitted int64              `json:"admitted"` // unordered shoppers, one unit each
	Waiting  int64              `json:"waiting"`
	SKUs     map[string]lineSKU `json:"skus"`
}

type lineSKU struct {
	Avail   *int64 `json:"avail,omitempty"`
	Ver     int64  `json:"ver"`
	Claimed int64  `json:"claimed"` // ordered, not placed by the store yet
	Placed  int64  `json:"placed"`  // placed, not final yet
}

// ledgerRequest is the argument of every ledger script (ARGV[2], as
// JSON); each reads the fields it needs (see each script's comment).
type ledgerRequest struct {
	Queue string `json:"queue"`
	TTL   int    `json:"ttl"` // seconds the keys it writes are kept (keyspace.StockShareTTL)
	// reserve.lua: the queue's SKUs, its peers and the most to grant.
	SKUs  []string `json:"skus"`
	Peers []string `json:"peers"`
	Want  int      `json:"want"`
	// report.lua: the line's snapshot and its tick length in ms (0:
	// unknown, keep the recorded one).
	Snap *snapshot `json:"snap,omitempty"`
	Tick int64     `json:"tick"`
	// cancel.lua: the reservation to release.
	Res int64 `json:"res"`
	// ledger_stock.lua: the store's figures.
	Levels []stockFigure `json:"levels"`
}

type stockFigure struct {
	SKU   string `json:"sku"`
	Avail int64  `json:"avail"`
	Ver   int64  `json:"ver"`
}

// run runs one of the ledger's scripts with req.
func (lg *Ledger) run(ctx context.Context, sc *script.Script, req ledgerRequest) *redis.Cmd {
	req.TTL = ledgerTTL
	// Lua reads a JSON null as a value, not as nothing: lists go as [].
	for _, l := range []*[]string{&req.SKUs, &req.Peers} {
		if *l == nil {
			*l = []string{}
		}
	}
	if req.Levels == nil {
		req.Levels = []stockFigure{}
	}
	b, err := json.Marshal(req)
	if err != nil {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(err)
		return cmd
	}
	return lg.client.RunScript(ctx, sc, []string{keyspace.StockShare(req.Queue)}, keyspace.StockLedger, string(b))
}

// Reserve asks the ledger for up to want units for an admission step of
// q (see reserve.lua).
func (lg *Ledger) Reserve(ctx context.Context, q string, sh waitqueue.Share, want int) (Reservation, error) {
	out, err := lg.run(ctx, reserveScript, ledgerRequest{Queue: q, SKUs: sh.SKUs, Peers: sh.Peers, Want: max(want, 0)}).Text()
	if err != nil {
		return Reservation{}, fmt.Errorf("reserve stock for %s: %w", q, err)
	}
	var r reservation
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		return Reservation{}, fmt.Errorf("reserve stock for %s: %w", q, err)
	}
	return Reservation{ID: r.Res, Grant: r.Grant, Share: out}, nil
}

// Report records the line's snapshot (as the admission step returned it)
// in the ledger (see report.lua); tick is q's tick length (0: unknown).
func (lg *Ledger) Report(ctx context.Context, q string, tick time.Duration, snap string) error {
	var sn snapshot
	err := json.Unmarshal([]byte(snap), &sn)
	if err == nil {
		err = lg.run(ctx, reportScript, ledgerRequest{Queue: q, Tick: tick.Milliseconds(), Snap: &sn}).Err()
	}
	if err != nil {
		return fmt.Errorf("report the stock of %s: %w", q, err)
	}
	return nil
}

// Cancel releases reservation id of q, which the line refused unused.
func (lg *Ledger) Cancel(ctx context.Context, q string, id int64) error {
	if err := lg.run(ctx, cancelScript, ledgerRequest{Queue: q, Res: id}).Err(); err != nil {
		return fmt.Errorf("release the stock reserved for %s: %w", q, err)
	}
	return nil
}

// Withdraw takes q out of the stock ledger: its line no longer counts for
// the queues it shared SKUs with (it was deleted, or no longer follows
// stock; see Projection.Forget and Admission.Admit).
func (lg *Ledger) Withdraw(ctx context.Context, q string) error {
	if err := lg.run(ctx, withdrawScript, ledgerRequest{Queue: q}).Err(); err != nil {
		return fmt.Errorf("withdraw %s from the stock ledger: %w", q, err)
	}
	return nil
}

// SetLevels records the store's figures of SKUs as q reported them,
// unless the ledger has a later version (see ledger_stock.lua).
func (lg *Ledger) SetLevels(ctx context.Context, q string, levels []waitqueue.StockLevel) error {
	figures := make([]stockFigure, len(levels))
	for i, l := range levels {
		figures[i] = stockFigure{l.SKU, l.Available, l.Version}
	}
	if err := lg.run(ctx, ledgerStockScript, ledgerRequest{Queue: q, Levels: figures}).Err(); err != nil {
		return fmt.Errorf("set stock of %s in the stock ledger: %w", q, err)
	}
	return nil
}

// ledgerTTL is keyspace.StockShareTTL in seconds.
const ledgerTTL = int(keyspace.StockShareTTL / time.Second)
