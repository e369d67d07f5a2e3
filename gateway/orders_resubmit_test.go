package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"usher/internal/orders"
	"usher/internal/testenv"
)

// A resubmitted token is the order it placed, whatever the queue sells
// now: an operator who lowers maxQuantity or changes the SKU mid-sale
// turns away new orders that break the new rule, not the answer a shopper
// asks for again about the order already taken.
func TestAResubmitIsTheOrderPlacedWhateverTheQueueSellsNow(t *testing.T) {
	h := newOrderHarness(t) // sku-1, maxQuantity 2
	toks := h.ready("alice", "bob")
	alice, bob := toks[0], toks[1]
	body := `{"sku": "sku-1", "quantity": 2}`
	id := h.order("alice", alice, body).str("orderId")
	if id == "" {
		t.Fatal("alice's order was not taken")
	}
	h.putQueue(h.queue, `{"targetActive": 5, "sku": "sku-2", "maxQuantity": 1, "rateLimit": `+limitsOff+`}`, 200)
	testenv.Eventually(t, 5*time.Second, func() error {
		if cfg, _ := h.gw.queues.Get(h.queue); cfg.OrderLimit() != 1 || !cfg.Sells("sku-2") {
			return errors.New("the gateway has not seen the change")
		}
		return nil
	}, "the new configuration in the gateway's catalog")

	h.resubmits("alice", alice, body, id, "sku-1", 2)
	h.refuses([]orderRefusal{
		{"the placed order's token with another body", "alice", alice, `{"sku": "sku-2", "quantity": 1}`, 409, "order-conflict"},
		{"a new order of the SKU no longer sold", "bob", bob, `{"sku": "sku-1", "quantity": 1}`, 422, "wrong-sku"},
		{"a new order above the new maxQuantity", "bob", bob, `{"sku": "sku-2", "quantity": 2}`, 422, "too-many"},
	})
	h.onlyRequest(id)
}

// resubmits checks that user's token, resubmitted with body, is answered
// with the order id it placed: 202 PENDING while it is pending, 200 PAID
// once its record says PAID (written here, as the order worker would).
func (h *harness) resubmits(user, tok, body, id, sku string, quantity int) {
	h.t.Helper()
	if r := h.order(user, tok, body); r.status != 202 || r.str("orderId") != id || r.str("status") != "PENDING" {
		h.t.Errorf("resubmit while pending = %d %s, want 202 PENDING %s", r.status, r.raw, id)
	}
	h.gw.orders.(*orders.Records).Put(context.Background(), orders.Record{ID: id, Owner: user,
		Fingerprint: orders.Fingerprint(sku, quantity), Queue: h.queue, SKU: sku, Quantity: quantity, Status: orders.Paid, PaymentID: "pay_1"})
	if r := h.order(user, tok, body); r.status != 200 || r.str("orderId") != id || r.str("status") != "PAID" {
		h.t.Errorf("resubmit once paid = %d %s, want 200 PAID %s", r.status, r.raw, id)
	}
}

// An orderRefusal is an order and the problem it is answered with.
type orderRefusal struct {
	name       string
	user, tok  string
	body       string
	wantStatus int
	wantType   string
}

// refuses sends each order and checks its problem.
func (h *harness) refuses(cases []orderRefusal) {
	h.t.Helper()
	for _, tt := range cases {
		r := h.order(tt.user, tt.tok, tt.body)
		if r.status != tt.wantStatus || !isProblem(r) || r.str("type") != "https://usher.dev/problems/"+tt.wantType {
			h.t.Errorf("%s: POST /v1/orders = %d %s, want %d %s", tt.name, r.status, r.raw, tt.wantStatus, tt.wantType)
		}
	}
}

// onlyRequest checks that the stream holds one order request, id's.
func (h *harness) onlyRequest(id string) {
	h.t.Helper()
	if got := h.requests(); len(got) != 1 || got[0].OrderID != id {
		h.t.Errorf("requests in the stream = %+v, want %s alone", got, id)
	}
}
