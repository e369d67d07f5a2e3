// Package orders is the order domain: order ids and statuses, the
// PostgreSQL store that holds orders and stock (the truth), and the small
// order record in Redis the gateway answers from without touching the
// database.
//
// The order path keeps two promises. One token becomes at most one order:
// the order id derives from the token id, so every retry of a submit names
// the same order, and PostgreSQL's unique key on the token id is the last
// guard. And no database connection is held across anything slow: each
// transaction is one statement, the payment call happens between them.
package orders

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"strconv"
	"strings"
	"time"
)

// Status is where an order stands.
type Status string

// The order statuses. PENDING is the only one that changes.
const (
	Pending  Status = "PENDING"
	Paid     Status = "PAID"
	Failed   Status = "FAILED"
	Rejected Status = "REJECTED"
)

// Final reports whether the order will not change any more.
func (s Status) Final() bool { return s == Paid || s == Failed || s == Rejected }

// Reasons an order did not go through.
const (
	ReasonSoldOut = "sold_out"
	// ReasonInsufficientStock: fewer units remain than the order asked
	// for (but some do: the line stays open).
	ReasonInsufficientStock = "insufficient_stock"
	// ReasonMaxPerUser: the order would take the user past the queue's
	// maxPerUser units of the SKU.
	ReasonMaxPerUser   = "max_per_user"
	ReasonUnknownSKU   = "unknown_sku"
	ReasonDeadline     = "deadline"
	ReasonDeclined     = "payment_declined"
	ReasonTokenExpired = "token_expired"
	ReasonTokenLeft    = "token_left"
	ReasonTokenUsed    = "token_used"
	// ReasonTokenUnconfirmed: the line never confirmed the token's
	// admission before the order's deadline.
	ReasonTokenUnconfirmed = "token_unconfirmed"
	// ReasonHoldLapsed: the order's hold on its admission slot ran out
	// before a worker could take the order (the workers' backlog was
	// longer than the hold), and the line gave the slot to the next
	// shopper; the order is never charged.
	ReasonHoldLapsed = "hold_lapsed"
)

var idEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// ID is the order id of the order placed with the entry token tokenID:
// "ord_" and 26 base32 characters (130 bits) of its SHA-256.
func ID(tokenID string) string {
	sum := sha256.Sum256([]byte(tokenID))
	return "ord_" + strings.ToLower(idEncoding.EncodeToString(sum[:]))[:26]
}

// ValidID reports whether s has the shape of an order id.
func ValidID(s string) bool {
	if len(s) != 30 || !strings.HasPrefix(s, "ord_") {
		return false
	}
	for _, c := range s[4:] {
		if !(c >= 'a' && c <= 'z' || c >= '2' && c <= '7') {
			return false
		}
	}
	return true
}

// Fingerprint identifies an order's body, so that a second submit of the
// same token with another body is told apart from a retry.
func Fingerprint(sku string, quantity int) string {
	sum := sha256.Sum256([]byte(sku + "\x00" + strconv.Itoa(quantity)))
	return hex.EncodeToString(sum[:12])
}

// Order is one order as the store holds it.
type Order struct {
	ID        string
	TokenID   string
	Queue     string
	User      string
	SKU       string
	Quantity  int
	Amount    int64 // minor units: price × quantity, fixed when the order is placed
	Status    Status
	Reason    string
	PaymentID string
	Deadline  time.Time // after it a pending order fails and its stock goes back
	// Available is the SKU's stock right after this order took its share
	// or gave it back (set by Place and Fail; -1 when unknown), and
	// StockVersion that stock's version (see Stock).
	Available    int64
	StockVersion int64
	// MaxPerUser is what Place enforces: the most units of the SKU the
	// user may hold in PENDING and PAID orders (0: no limit).
	MaxPerUser int
}

// Stock is a SKU's units available in the store and the version of that
// figure: every change bumps it, so copies apply changes in order.
type Stock struct {
	SKU       string
	Available int64
	Version   int64
}
