package main

import (
	"testing"
	"time"
)

// A shopper whose answer was lost submits the token again, maybe after it
// expired: the same token is the same order (202 while pending, 200 once
// final), however late. An expired token that placed nothing orders
// nothing, nor does it answer for another user.
func TestAnExpiredTokenIsAnsweredWithTheOrderItPlaced(t *testing.T) {
	h := newOrderHarness(t)
	toks := h.ready("alice", "bob")
	alice, bob := toks[0], toks[1]
	body := `{"sku": "sku-1", "quantity": 1}`
	id := h.order("alice", alice, body).str("orderId")
	if id == "" {
		t.Fatal("alice's order was not taken")
	}
	late := time.Now().Add(time.Hour) // both tokens expired (tokenTtlSeconds 300)
	h.gw.now = func() time.Time { return late }
	h.rebuild()

	h.resubmits("alice", alice, body, id, "sku-1", 1)
	h.refuses([]orderRefusal{
		{"the expired token with another body", "alice", alice, `{"sku": "sku-1", "quantity": 2}`, 409, "order-conflict"},
		{"the expired token as another user", "bob", alice, body, 401, "token-expired"},
		{"an expired token that placed nothing", "bob", bob, body, 401, "token-expired"},
		{"an expired token never in the line", "carol", h.entryToken("carol", 99, late.Add(-time.Hour), late.Add(-time.Minute)), body, 401, "token-expired"},
	})
	h.onlyRequest(id)
}
