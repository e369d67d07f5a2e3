package waitqueue

import "time"

// Order is what an order claims of its token's entry.
type Order struct {
	ID       string
	TokenID  string
	User     string
	SKU      string
	Quantity int
	// MaxPerUser is the queue's limit of units per user (0: none).
	MaxPerUser int
}

// Claim is what Claim found.
type Claim struct {
	Outcome Redemption // Redeemed (claimed now or before by this order), or why not
	// At is when the token was claimed (Redis time): the order's request
	// time, from which its deadline counts.
	At time.Time
}

// Redemption is what a claim or a redemption found.
type Redemption string

// Claim and Redeem outcomes.
const (
	Redeemed       Redemption = "redeemed" // the token is (now) this order's
	RedeemConflict Redemption = "conflict" // the token is another order's
	RedeemEarly    Redemption = "early"    // the token is not valid yet (readyAt)
	RedeemExpired  Redemption = "expired"  // the token expired unused
	RedeemLeft     Redemption = "left"     // the shopper gave the slot up
	RedeemLimit    Redemption = "limit"    // the user bought the queue's maxPerUser units
	RedeemUnknown  Redemption = "unknown"  // Redis holds no admission for this token
	// RedeemLapsed: the token is this order's, but its slot is gone — its
	// hold ran out and the line gave the slot to the next shopper, or the
	// order finished and released it. See claims/redeem.lua's hold rule.
	RedeemLapsed Redemption = "lapsed"
)

// Request is an order request as the orders stream holds it.
type Request struct {
	Order
	// RequestedAt is when the gateway claimed the token (Redis time; the
	// request's requestedAt).
	RequestedAt time.Time
	// Stored is when the stream stored the request (zero: unknown): the
	// time no publisher can write, by which a replay judges it.
	Stored time.Time
}

// StockLevel is a SKU's units as the store reports them, with the
// version that orders the reports.
type StockLevel struct {
	SKU       string
	Available int64
	Version   int64
}

// Share names what a stock-aware queue shares its units with.
type Share struct {
	// SKUs are the SKUs the queue sells. Without them the line counts its
	// own holdings alone, and reports nothing to the ledger.
	SKUs []string
	// Peers are the other stock-aware queues that sell any of the SKUs,
	// as the catalog says (see catalog.StockPeers). The ledger also counts
	// any queue that reported one of the SKUs in the last two of its ticks
	// and a second, so a queue this caller's catalog has not seen yet
	// counts all the same.
	Peers []string
}
