// Package shopper is what a shopper is told of their turn, computed in one
// place for the gateway's polls and the notifier's event streams: the
// status, the place in line and its estimate, and — once READY — the entry
// token.
//
// The entry token is minted here and only here, from the admission record
// the line holds in Redis (token id, readyAt, expiresAt): never from an
// event, a request or anything a client or another service sent. Whoever
// can publish on the broker cannot make a token appear; at worst they wake
// a notifier, which then reads the line and finds nothing to hand out.
package shopper

import (
	"fmt"
	"time"

	"usher/internal/catalog"
	"usher/internal/token"
	"usher/internal/waitqueue"
)

// Status is what a shopper's client sees.
type Status string

// The statuses of the API (poll answers, the page, SSE).
const (
	PreQueue Status = "PRE_QUEUE" // joined before a scheduled drop opened: the lottery gives the place
	Waiting  Status = "WAITING"   // in line (or admitted, READY at ReadyAt)
	Ready    Status = "READY"     // admitted: the token orders
	Expired  Status = "EXPIRED"   // the token ran out unused
	Used     Status = "USED"      // the token became an order
	Left     Status = "LEFT"      // the shopper left
	Closed   Status = "CLOSED"    // the queue closed (Reason says why)
)

// View is one shopper's turn at one moment.
type View struct {
	Status   Status
	Position int64 // 1-based place while Waiting; 0 otherwise
	// Waiting is how many wait in the queue; a shopper told Waiting is
	// one of them, an admitted one before ReadyAt too (first in line).
	Waiting int64
	// ETA is the estimated wait in seconds, when ETAKnown (the queue has
	// admitted someone: see waitqueue.ETA).
	ETA      int64
	ETAKnown bool
	// Admitted: admitted and Waiting until ReadyAt (first in line).
	Admitted bool
	// Token, ReadyAt and ExpiresAt are set when Ready (ReadyAt also while
	// Admitted).
	Token              string
	ReadyAt, ExpiresAt time.Time
	Reason             string // Closed: why (closed, sold_out, …)
	// Stock is the queue's stock state for a shopper waiting, admitted or
	// READY: available, held (the last units are with shoppers ahead and
	// may come back) or sold_out; "" when the queue does not follow stock
	// or the store has reported none yet. SKUs lists the queue's SKUs that
	// have units left (not claimed by orders in flight): a READY shopper
	// can order those.
	Stock string
	SKUs  []string
	// OpensAt is when a PRE_QUEUE shopper's drop opens (and is drawn).
	OpensAt *time.Time
}

// Signer mints entry tokens.
type Signer interface {
	Sign(c token.Claims) (string, error)
}

// Of is the view of entry e (as the line holds it) of queue cfg, for user,
// at now. READY is only said once readyAt has passed: until then an
// admitted shopper is first in line.
func Of(e waitqueue.Entry, cfg catalog.Config, user string, now time.Time, keys Signer) (View, error) {
	v := View{Waiting: e.Waiting}
	closed, reason := ClosedAt(cfg, now)
	switch e.Status {
	case waitqueue.Gone:
		// Finished long enough ago that Redis forgot how.
		v.Status = Expired
		if closed {
			v.Status, v.Reason = Closed, reason
		}
	case waitqueue.PreQueued:
		if closed {
			v.Status, v.Reason = Closed, reason
			break
		}
		v.Status, v.OpensAt = PreQueue, cfg.OpensAt
	case waitqueue.Unknown, waitqueue.Waiting:
		if closed {
			v.Status, v.Reason = Closed, reason
			break
		}
		v.Status = Waiting
		v.Position, v.Waiting, v.ETA, v.ETAKnown = InLine(e)
		v.Stock, v.SKUs = stockOf(e)
	case waitqueue.Admitted:
		// The stock too: a READY shopper of a queue of variants chooses
		// one, and must see those that ran out while they waited.
		v.Stock, v.SKUs = stockOf(e)
		if now.Before(e.ReadyAt) {
			// First in line until readyAt, of a line that holds them: the
			// line's count no longer does (the admission took them out of
			// it), and alone they would be told 1 of 0.
			v.Status, v.Position, v.Waiting, v.ETA, v.ETAKnown = Waiting, 1, e.Waiting+1, 0, true
			v.Admitted, v.ReadyAt = true, e.ReadyAt
			break
		}
		tok, err := Token(e, cfg.Name, user, keys)
		if err != nil {
			return v, err
		}
		v.Status, v.Token, v.ReadyAt, v.ExpiresAt = Ready, tok, e.ReadyAt, e.ExpiresAt
	case waitqueue.Expired:
		v.Status = Expired
	case waitqueue.Used:
		v.Status = Used
	case waitqueue.Left:
		v.Status, v.Reason = Left, e.Reason
	default:
		return v, fmt.Errorf("unexpected entry status %q", e.Status)
	}
	return v, nil
}

// InLine is where an entry waiting (or joined, not yet applied to the
// line) stands, as the poll and the event stream tell it: its position,
// the line's length, and the wait's estimate. A join not yet applied is at
// the back, of the line with them in it.
func InLine(e waitqueue.Entry) (position, waiting, eta int64, etaKnown bool) {
	position, waiting = e.Position, e.Waiting
	if e.Status == waitqueue.Unknown {
		position = e.Waiting + 1
		waiting = position
	}
	eta, etaKnown = waitqueue.ETA(position, e.Rate)
	return position, waiting, eta, etaKnown
}

// stockOf is the stock a shopper in line or admitted is told: the line's
// figures, none while the store has reported nothing (StockUnknown).
func stockOf(e waitqueue.Entry) (string, []string) {
	if e.Stock == waitqueue.StockUnknown {
		return "", nil
	}
	return e.Stock, e.SKUs
}

// Token is the entry token of an admitted entry of queue q, for user:
// Ed25519 is deterministic, so every process and every read of the same
// admission hands out the same string, and nothing needs to store it.
func Token(e waitqueue.Entry, q, user string, keys Signer) (string, error) {
	if e.Status != waitqueue.Admitted || e.TokenID == "" {
		return "", fmt.Errorf("entry %d is %s: no token to mint", e.Seq, e.Status)
	}
	return keys.Sign(token.Claims{ID: e.TokenID, Queue: q, User: user, ReadyAt: e.ReadyAt, ExpiresAt: e.ExpiresAt})
}

// ClosedAt says whether the queue is closed to a shopper still in line at
// now, and why: closed by an operator or because it sold out, or ended
// (closesAt passed; the admitter closes it in the catalog a tick later, and
// admits nobody meanwhile).
func ClosedAt(cfg catalog.Config, now time.Time) (bool, string) {
	switch {
	case cfg.State == catalog.StateClosed:
		return true, ClosedReason(cfg)
	case cfg.Ended(now):
		return true, catalog.ReasonEnded
	}
	return false, ""
}

// ClosedReason is what a shopper in a closed queue is told: the catalog's
// reason (sold_out when the SKU ran out, ended after closesAt), or just
// closed.
func ClosedReason(cfg catalog.Config) string {
	if cfg.ClosedReason != "" {
		return cfg.ClosedReason
	}
	return "closed"
}
