package main

import (
	"context"
	"testing"
	"time"

	"usher/shared/orders"
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
	h.api.now = func() time.Time { return late }

	if r := h.order("alice", alice, body); r.status != 202 || r.str("orderId") != id || r.str("status") != "PENDING" {
		t.Errorf("resubmit of the expired token while pending = %d %s, want 202 PENDING %s", r.status, r.raw, id)
	}
	h.api.orders.(*orders.Records).Put(context.Background(), orders.Record{ID: id, Owner: "alice",
		Fingerprint: orders.Fingerprint("sku-1", 1), Queue: h.queue, SKU: "sku-1", Quantity: 1, Status: orders.Paid, PaymentID: "pay_1"})
	if r := h.order("alice", alice, body); r.status != 200 || r.str("orderId") != id || r.str("status") != "PAID" {
		t.Errorf("resubmit of the expired token once paid = %d %s, want 200 PAID %s", r.status, r.raw, id)
	}
	tests := []struct {
		name       string
		user, tok  string
		body       string
		wantStatus int
		wantType   string
	}{
		{"the expired token with another body", "alice", alice, `{"sku": "sku-1", "quantity": 2}`, 409, "order-conflict"},
		{"the expired token as another user", "bob", alice, body, 401, "token-expired"},
		{"an expired token that placed nothing", "bob", bob, body, 401, "token-expired"},
		{"an expired token never in the line", "carol", h.entryToken("carol", 99, late.Add(-time.Hour), late.Add(-time.Minute)), body, 401, "token-expired"},
	}
	for _, tt := range tests {
		r := h.order(tt.user, tt.tok, tt.body)
		if r.status != tt.wantStatus || !isProblem(r) || r.str("type") != "https://usher.dev/problems/"+tt.wantType {
			t.Errorf("%s: POST /v1/orders = %d %s, want %d %s", tt.name, r.status, r.raw, tt.wantStatus, tt.wantType)
		}
	}
	if got := h.requests(); len(got) != 1 || got[0].OrderID != id {
		t.Errorf("requests in the stream = %+v, want alice's alone", got)
	}
}
