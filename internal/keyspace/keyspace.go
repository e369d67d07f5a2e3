// Package keyspace is the one map of every Redis key usher writes: its
// name, type, owner, lifetime and hash tag. No other package spells a key;
// the Lua scripts receive a queue's prefix and derive per-entry keys from it
// exactly as the functions below do.
//
// Every key of a queue carries the hash tag {q}, so one queue lives in one
// Redis Cluster slot and every script on it runs atomically on one node.
// Redis is a projection of the JetStream streams: every key below can be
// lost and is rebuilt from the streams (see waitqueue's followers), except
// the few marked "derived" (counters, caches) which simply start again.
//
//	key                          type    owner (writer)                 lifetime
//	usher:{q}:waiting            zset    waitqueue (ingest, admit)      while the queue exists; members leave when admitted or gone
//	usher:{q}:active             zset    waitqueue (admit, claim)       while the queue exists; members leave at expiry / release, or once their shopper's leave is recorded
//	usher:{q}:held               hash    waitqueue (admit, claim, orders) members as active's: what each holds of the stock (derived: rebuilt from the records when its size and active's differ)
//	usher:{q}:outbox             zset    waitqueue (admit, announce)    members leave once their event is stored
//	usher:{q}:e:<seq>            hash    waitqueue (every script)       no TTL while waiting or admitted; TombstoneTTL once finished
//	usher:{q}:u:<user>           string  waitqueue (ingest)             no TTL while the user's entry is live; TombstoneTTL after
//	usher:{q}:cursor             hash    waitqueue (followers)          while the queue exists: how far each stream is applied
//	usher:{q}:stats              hash    waitqueue (admit)              while the queue exists (derived: counts, rate, next tick, last readyAt)
//	usher:{q}:admits             zset    waitqueue (admit)              one minute of admissions, trimmed every tick (derived)
//	usher:{q}:pre                zset    waitqueue (ingest, draw)       a scheduled drop's pre-queue until its draw is settled (then empty)
//	usher:{q}:draw               zset    waitqueue (admitter)           the lottery's order, staged; the draw renames it into the waiting line
//	usher:{q}:seen               zset    waitqueue (join, poll, notifier) while the queue exists: when each waiting shopper was last present; members leave when admitted, left or abandoned
//	usher:{q}:leaves             zset    waitqueue (admit, announce)    the abandoned until their leave is stored on the entries stream
//	usher:{q}:leaving            zset    waitqueue (leave, admitter)    a shopper's leave the line took, "<seq>:<user>" scored by seq, until its event is stored on the entries stream (its entry keeps its slot in active until then)
//	usher:{q}:passes             zset    waitqueue (gateway's gate)     while the queue exists: each gate pass's entry scored by its last use (Unix ms); members leave when swept idle or found no longer holding their slot
//	usher:{q}:invitecodes        zset    waitqueue (gateway)            single-use invite codes scored by their expiry (Unix ms); until the longest-lived one expires
//	usher:{q}:stock              hash    waitqueue (worker, admitter)   while the queue exists: each SKU's units as the store last reported them, with their version
//	usher:{q}:b:<user>           string  waitqueue (worker, follower)   BoughtTTL after the user's last paid order: units bought, for maxPerUser (once per order: the entry's counted)
//	usher:{q}:orders             hash    orders (CountOutcome)          while the queue exists (derived: outcome counts)
//	usher:{q}:counted:<order>    string  orders (CountOutcome)          RecordTTL
//	usher:{q}:rl:<kind>:<id>     string  ratelimit                      until the limit's bucket is full again (PEXPIRE)
//	usher:{q}:pow:<id>           string  gateway (proof of work)        until the spent challenge's expiry (PX): a proof is single-use
//	usher:{q}:limit              hash    adaptive (admitter)            LimitTTL after its last decision (derived: the adaptive limit, its reason, the controller's state)
//	usher:{q}:ow:<window>        hash    adaptive (orderworker)         OrderWindowTTL (derived: one decision window of the order path's figures)
//	usher:order:{<order>}        hash    orders (gateway, orderworker)  RecordTTL after its last change
//	usher:order:{kept}           string  orders (orderworker)           no TTL: set once the order records of the last RecordTTL are in Redis; missing after a loss, until the workers put them back from PostgreSQL
//	usher:breaker:payment        string  paybreaker (orderworker)       the breaker's open period
//	usher:{:stock}:avail         hash    waitqueue (every stock report) StockShareTTL after the last report: each SKU's units in the store, the latest version any queue's line reported (derived)
//	usher:{:stock}:q:<q>         hash    waitqueue (admitter, gateway)  StockShareTTL after the queue's last report: what its line holds of each SKU, and the units reserved for its admissions on the way (derived: every tick reports it anew)
//	usher:{:stock}:sku:<sku>     hash    waitqueue (admitter, gateway)  StockShareTTL after the last report naming it: the queues whose lines hold the SKU (derived)
//	usher:{q}:moving (…{t}:moving) none    nobody, ever                  a slot's guard: every script declares it beside its own keys, so Redis refuses the script whole while the slot moves (script.Guard)
//
// The stock ledger (usher:{:stock}:…) is what stock-aware queues share:
// queues that sell the same SKU count each other's holdings before they
// admit (see waitqueue.Share). It has one hash tag of its own — a queue
// name cannot hold the colon — so that one script reads every queue that
// shares a SKU in one atomic step, on one Redis Cluster node.
//
// A closed queue's keys are removed by the admitter ClosedGrace after it
// closed, or once the last token it issued has expired if that is later
// (projection.Projection.Remove), entry records and user pointers
// included; its cursor stays while the queue does. A deleted queue's keys,
// its cursor last, go when each admitter stops working on it and at each
// admitter's start (projection.Projection.Forget).
package keyspace

import (
	"strconv"
	"time"
)

// TombstoneTTL is how long a finished entry (expired, used, left) and its
// user pointer stay: long enough for a shopper's page to read how their
// turn ended, short enough that a drop of a million shoppers leaves Redis at
// its baseline within the hour.
const TombstoneTTL = time.Hour

// RecordTTL is how long an order's Redis record and its counted marker live
// after their last change.
const RecordTTL = 24 * time.Hour

// BoughtTTL is how long a user's bought units are remembered (the streams'
// retention: a replay restores them as far back).
const BoughtTTL = 7 * 24 * time.Hour

// ClosedGrace is how long a closed queue's line stays in Redis at least:
// shoppers who were in it can still read CLOSED and their place meanwhile.
// It stays longer while a slot is taken (usher:{q}:active): a shopper
// admitted before the closing orders until their token expires.
const ClosedGrace = time.Hour

// LimitTTL is how long an adaptive queue's controller state outlives its
// last decision: a queue whose adaptive admission was turned off, or whose
// admitters all stopped, forgets it within the hour and starts again at
// its configured targetActive.
const LimitTTL = time.Hour

// OrderWindowTTL is how long one decision window of the order path's
// figures lives: three windows, at least ten seconds — the controller
// reads the last finished one.
func OrderWindowTTL(window time.Duration) time.Duration { return max(3*window, 10*time.Second) }

// Queue names the keys of one queue.
type Queue struct{ prefix string }

// Of returns the keys of queue q (a name catalog.ValidName accepts).
func Of(q string) Queue { return Queue{prefix: "usher:{" + q + "}:"} }

// Prefix is what every key of the queue starts with; scripts derive entry
// and user keys from it.
func (k Queue) Prefix() string { return k.prefix }

// Pattern matches every key of the queue (for SCAN).
func (k Queue) Pattern() string { return k.prefix + "*" }

func (k Queue) Waiting() string  { return k.prefix + "waiting" }
func (k Queue) Active() string   { return k.prefix + "active" }
func (k Queue) Held() string     { return k.prefix + "held" }
func (k Queue) Outbox() string   { return k.prefix + "outbox" }
func (k Queue) Cursor() string   { return k.prefix + "cursor" }
func (k Queue) Stats() string    { return k.prefix + "stats" }
func (k Queue) Admits() string   { return k.prefix + "admits" }
func (k Queue) Stock() string    { return k.prefix + "stock" }
func (k Queue) PreQueue() string { return k.prefix + "pre" }
func (k Queue) Draw() string     { return k.prefix + "draw" }
func (k Queue) Seen() string     { return k.prefix + "seen" }
func (k Queue) Leaves() string   { return k.prefix + "leaves" }
func (k Queue) Leaving() string  { return k.prefix + "leaving" }
func (k Queue) Invites() string  { return k.prefix + "invitecodes" }
func (k Queue) Passes() string   { return k.prefix + "passes" }
func (k Queue) Outcomes() string {
	return k.prefix + "orders"
}

// Limit is the adaptive admission's state: the current limit, why, and
// the controller's memory.
func (k Queue) Limit() string { return k.prefix + "limit" }

// OrderWindow holds the order path's figures of decision window w (Redis
// time in ms ÷ the window's length); scripts derive it from the prefix.
func (k Queue) OrderWindow(w int64) string { return k.prefix + "ow:" + strconv.FormatInt(w, 10) }

// Entry is the record of the entry that joined with stream sequence seq.
func (k Queue) Entry(seq uint64) string { return k.prefix + "e:" + strconv.FormatUint(seq, 10) }

// User points at the user's current entry.
func (k Queue) User(user string) string { return k.prefix + "u:" + user }

// Bought counts the units user bought in the queue.
func (k Queue) Bought(user string) string { return k.prefix + "b:" + user }

// Counted marks an order whose outcome was counted.
func (k Queue) Counted(orderID string) string { return k.prefix + "counted:" + orderID }

// Proof marks the challenge id (pow.Proof.ID: 16 base64url characters)
// as spent.
func (k Queue) Proof(id string) string { return k.prefix + "pow:" + id }

// RateLimit is the GCRA state of one limit (kind: ip, user, orders…) for id.
func (k Queue) RateLimit(kind, id string) string { return k.prefix + "rl:" + kind + ":" + id }

// OrderRecord is the Redis copy of an order (its own hash tag: the order
// id, so records spread over the cluster).
func OrderRecord(orderID string) string { return "usher:order:{" + orderID + "}" }

// OrderRecordsKept is "1" while Redis holds every order record of the last
// RecordTTL: order records are PostgreSQL's copies, not the streams', so
// after a loss the order workers put them back and set it again; a
// put-back in progress holds its own mark ("kept" is no order id: those
// are ord_…).
const OrderRecordsKept = "usher:order:{kept}"

// Breaker is present while the shared payment breaker is open.
const Breaker = "usher:breaker:payment"

// StockLedger is the prefix of the stock ledger's keys; its scripts derive
// each key from it as the functions below spell them.
const StockLedger = "usher:{:stock}:"

// StockShare is the ledger's record of queue q: what its line holds of
// each SKU, as its last report said, and its reservations.
func StockShare(q string) string { return StockLedger + "q:" + q }

// StockShareTTL is how long the ledger keeps what a queue's line reported
// after its last report: every admission tick of a stock-aware queue
// reports, so only a queue no admitter works on any more (deleted while
// none ran, or whose Redis shard is gone) is forgotten — and while a queue
// names it as a peer, that queue admits nobody (see waitqueue.Share).
const StockShareTTL = time.Hour
