// Package waitqueue is the live waiting line in Redis: who is waiting, in
// what order, who holds an admission slot, and what the admitter still has
// to announce. This package holds the line's vocabulary — statuses,
// entries, ticks, orders, the streams' events — and the Client every role
// shares: the connection to Redis, the batcher that pipelines script
// calls, the tombstone TTL. The roles that read and change the line are
// packages of their own, each the part one kind of caller needs and its
// Redis ACL user may do (see package redisacl):
//
//   - line: a shopper's requests — join, lookup, poll, leave — and the
//     ranks and presence the notifier reads (the gateway, the notifier);
//   - admission: the tick, admission at once, the outboxes, a queue's
//     closing (the admitter; the gateway's admission at once);
//   - claims: an order's token, slot and units, the store's stock (the
//     order worker; the gateway's claim and restock; the admitter's
//     stock refresh);
//   - drop: a scheduled drop's pre-queue, draw and invites (the admitter;
//     the gateway's invites);
//   - projection: the streams applied to the line, a rebuild's restore, a
//     queue's removal (the admitter's followers; usherctl rebuild);
//   - ledger: the stock the queues selling one SKU share (used by the
//     roles above).
//
// Redis is a projection here, not the record: every join, leave, admission
// and order is an event in JetStream. The admitter's followers apply each
// stream to the line in order, and the line keeps, per queue, a cursor of
// how far each stream is applied, moved in the same atomic step as the
// events' effects. Whatever Redis loses — its last second, a failover to a
// lagging replica, everything — it loses the cursor's advance with it, and
// the followers replay exactly the gap: the line heals itself, no operator
// needed. Each state change is one Lua script (a .lua file that opens with
// the invariant it keeps), so the line's invariants hold however many
// gateways and admitters touch it; every time decision in them reads Redis
// TIME. The keys are mapped in package keyspace.
package waitqueue

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"time"
)

// Status is where an entry stands.
type Status string

// The statuses of an entry. Unknown means Redis has no record of it (yet):
// its join is not applied. Gone means its record was a tombstone that
// expired: the entry finished long ago.
const (
	Unknown  Status = "unknown"
	Waiting  Status = "waiting"
	Admitted Status = "admitted"
	Expired  Status = "expired"
	Used     Status = "used"
	Left     Status = "left"
	Gone     Status = "gone"
	// PreQueued: joined before a scheduled drop opened; the draw gives
	// the place.
	PreQueued Status = "pre"
)

// Live reports whether the entry still holds a place or a slot.
func (s Status) Live() bool { return s == Waiting || s == Admitted || s == PreQueued }

// JoinKind is how a join enters the line.
type JoinKind string

// The kinds of join.
const (
	InLine   JoinKind = ""  // FIFO, at the back
	PreQueue JoinKind = "p" // a scheduled drop's pre-queue, placed by the draw
	Priority JoinKind = "a" // allowed past the line: into the next free slot
)

// ListedJoin is one join of a usher.joins.v2 message, as the gateway puts
// the joins of a message it stored in line (line.IngestJoins): its place is
// the message's sequence and the join's index in the list.
type ListedJoin struct {
	User string
	Prev uint64 // the entry the gateway saw finished when it took the join (0: none)
	Kind JoinKind
}

// Ingested is what the line did with one join it was given: the entry the
// join resolved to (the user's live one, when they had one) and the join's
// own place, or why it could not (ErrStale, ErrConflict, Redis's error).
type Ingested struct {
	Entry Entry
	Place uint64
	Err   error
}

// Errors the line returns for states callers branch on.
var (
	// ErrStale: the line belongs to another incarnation of the entries
	// stream (it was recreated); the caller's epoch is out of date.
	ErrStale = errors.New("waitqueue: the line belongs to another incarnation of the entries stream")
	// ErrConflict: the sequence's record names another user.
	ErrConflict = errors.New("waitqueue: the sequence belongs to another user")
)

// Entry is one shopper's place as Redis sees it.
type Entry struct {
	Seq       uint64 // the live entry's sequence (a duplicate join resolves to the first)
	Status    Status
	Position  int64 // 1-based place in line while Waiting, else 0
	Waiting   int64 // how many are waiting in the queue
	User      string
	TokenID   string
	ReadyAt   time.Time
	ExpiresAt time.Time
	Rate      float64 // admissions per second over the last minute
	// Stock is the queue's stock state (StockAvailable, StockHeld,
	// StockSoldOut; "" for a queue that does not follow stock) and SKUs
	// the queue's SKUs with units left, as the last tick saw them.
	Stock string
	SKUs  []string
	// Reason says why a Left entry left: "" (the shopper did) or
	// ReasonAbandoned.
	Reason string
}

// ReasonAbandoned: the shopper was not present for the queue's
// abandonAfterSeconds and left the line.
const ReasonAbandoned = "abandoned"

// The stock states of a stock-aware queue (see admission/admit.lua).
const (
	StockAvailable = "available" // units left for the next in line
	StockHeld      = "held"      // none left, but some held by shoppers ahead or pending: they may come back
	StockSoldOut   = "sold_out"  // nothing left, held or pending
	StockUnknown   = "unknown"   // the store has reported nothing yet: nobody is admitted
)

// Current is a user's current entry in a queue, as Lookup finds it.
type Current struct {
	Found  bool // false: no entry (or it finished long enough ago to be forgotten)
	Seq    uint64
	Status Status
	Bought int // units the user bought in the queue (for maxPerUser)
}

// Stats is a queue's live figures.
type Stats struct {
	Waiting, Active, AdmittedTotal int64
	AdmitRatePerSec                float64
	// Stock is the stock state of a stock-aware queue ("" otherwise),
	// Sellable the units that could go to the next in line (every queue
	// sharing the SKUs counted, see Share), HeldAdmitted
	// the units held by admitted shoppers who have not ordered (one each),
	// SKUs each SKU's figures and SKUsAvailable the SKUs with units left
	// (what a poll answers as skusAvailable) — as the last tick saw them.
	Stock         string
	Sellable      int64
	HeldAdmitted  int64
	SKUs          []SKUStock
	SKUsAvailable []string
	// PreQueue is how many wait in a scheduled drop's pre-queue; Drawn
	// whether it has been drawn.
	PreQueue int64
	Drawn    bool
	// LastTick is when an admitter last ticked the queue, on Redis time
	// (zero: never). A queue whose last tick is old has no live admitter.
	LastTick time.Time
}

// SKUStock is one SKU's stock as the line sees it.
type SKUStock struct {
	SKU       string `json:"sku"`
	Available int64  `json:"available"` // in the store, as last reported
	Claimed   int64  `json:"claimed"`   // ordered, not placed by the store yet (held)
	Pending   int64  `json:"pending"`   // placed, not final yet
}

// Ranks is one consistent view of a queue for many waiting entries at once.
type Ranks struct {
	Waiting       int64   // how many are waiting in the queue
	AdmittedTotal int64   // how many the queue has ever admitted
	Rate          float64 // admissions per second over the last minute
	// Stock and SKUs are the queue's stock state and its SKUs with units
	// left, as the last tick saw them (see Entry).
	Stock string
	SKUs  []string
	// Rank holds, for each sequence asked about, its 0-based place in line,
	// or -1 when it is not waiting (admitted, gone, or not ingested yet).
	Rank []int64
}

// ETA estimates how long the shopper at position waits, from the admission
// rate measured over the last minute (Entry.Rate, Stats.AdmitRatePerSec).
// It is unknown (ok false) until the queue has admitted anyone: a configured
// rate would be a promise, not an estimate.
func ETA(position int64, ratePerSec float64) (seconds int64, ok bool) {
	if position <= 0 {
		return 0, true
	}
	if ratePerSec <= 0 {
		return 0, false
	}
	return int64(math.Ceil(float64(position) / ratePerSec)), true
}

// TokenID is the id of the entry token of entry seq of queue q in the
// entries stream whose identity is epoch: "q:epoch:seq". The epoch keeps the
// tokens (and the orders derived from them) of a recreated stream apart from
// the old one's.
func TokenID(q, epoch string, seq uint64) string {
	return q + ":" + epoch + ":" + strconv.FormatUint(seq, 10)
}

// ParseTokenID splits an entry token id into its queue, epoch and sequence.
func ParseTokenID(id string) (q, epoch string, seq uint64, ok bool) {
	q, rest, ok1 := strings.Cut(id, ":")
	epoch, num, ok2 := strings.Cut(rest, ":")
	if !ok1 || !ok2 || q == "" || epoch == "" || strings.IndexByte(num, ':') >= 0 {
		return "", "", 0, false
	}
	seq, err := strconv.ParseUint(num, 10, 64)
	if err != nil || seq == 0 {
		return "", "", 0, false
	}
	return q, epoch, seq, true
}
