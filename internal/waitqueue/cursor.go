package waitqueue

import (
	"time"

	"usher/internal/event"
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
	// GroupsSince is, for the entries stream, the sequence of the queue's
	// first usher.joins.v2 message the line applied (0: none yet).
	GroupsSince uint64
}

// Bound is the highest entry id the line holds a join for once it applied
// the entries stream up to p (event.PlaceBound): what an entry id is
// compared with to say whether the line has applied it.
func (p Position) Bound() uint64 { return event.PlaceBound(p.Seq, p.GroupsSince) }

// Cursor says how far each stream is applied to a queue's line.
type Cursor map[string]Position

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

// EntryEvent is a join or a leave of USHER_ENTRIES. A usher.joins.v2
// message is one EntryEvent per join it lists, each with the message's
// StreamSeq and its own Index.
type EntryEvent struct {
	StreamSeq uint64 // the sequence of the event's message
	Leave     bool
	Entry     uint64 // the entry a leave leaves
	// Grouped says a join came in a usher.joins.v2 message, at Index in
	// its list (a usher.joined.v1 message holds one join: index 0). A
	// join's entry id is its place, event.Place(StreamSeq, Index,
	// groupsSince): which it is depends on the queue's first
	// usher.joins.v2 message, which the line keeps with its cursor, so the
	// projection gives it as it applies the join (see
	// projection/apply_entries.lua).
	Grouped bool
	Index   int
	User    string
	Prev    uint64 // a join's previous entry as the gateway saw it (0: none)
	Kind    JoinKind
	Reason  string // a leave's reason ("" or ReasonAbandoned)
	// At is when the stream stored the event (zero: unknown); a join
	// keeps it as its entry's JoinedAt, a leave as the time it left (an
	// order request stored before it stands: see projection/apply_orders.lua).
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
	// applied first (see projection/apply_orders.lua).
	Stored time.Time
}

// Record is one entry as a rebuild recreates it from the event streams: the
// same fields the live scripts would have written for it.
type Record struct {
	Seq    uint64
	Status Status // Waiting, PreQueued, Admitted, Expired, Used or Left; ignored for an alias
	User   string
	// Alias is the earlier entry this join duplicates (a second join of a
	// user already in line); 0 for an entry of its own.
	Alias     uint64
	TokenID   string // set for every entry that was admitted
	OrderID   string // the order that redeemed the token (status Used)
	ReadyAt   time.Time
	ExpiresAt time.Time
	// Score is a waiting entry's score in line when it is not its
	// sequence: a drawn place (place / (n + 1)) or a join allowed past the
	// line (seq - 2^52). 0: its sequence (FIFO).
	Score float64
}

// RestoreResult says what Restore wrote.
type RestoreResult struct {
	Created map[Status]int // new records by status; aliases count under "alias"
	Kept    int            // records that existed already and were left alone
}

// Alias is the key under which RestoreResult counts aliases: a record that
// names another entry rather than having a status of its own.
const Alias Status = "alias"
