package main

import (
	"context"
	"testing"
	"time"

	"usher/internal/event"
	"usher/internal/orders"
	"usher/internal/waitqueue"

	"github.com/nats-io/nats.go/jetstream"
)

// A leave and an order of one token end as the line decided between them,
// and the streams say the same, so a replay after Redis lost everything
// decides alike: the stream records a leave only if it took effect, which
// is before any claim of the token (the order is then refused, 409
// token-left); a leave that comes after the order's claim changes nothing
// and is not recorded, so a replay, which applies the stream's leaves
// before its order requests, cannot put it ahead of the order's request.
func TestALeaveAndAnOrderOfOneTokenAreRecordedAsTheLineDecided(t *testing.T) {
	h := newOrderHarness(t)
	ctx := context.Background()
	tickets := map[string]string{"alice": h.join("alice").str("ticket"), "bob": h.join("bob").str("ticket")}
	h.admit()
	toks := map[string]string{}
	for u, tk := range tickets {
		if toks[u] = h.poll(tk).str("token"); toks[u] == "" {
			t.Fatalf("%s not READY after the tick", u)
		}
	}
	body := `{"sku": "sku-1", "quantity": 1}`

	// alice's order is claimed first, as when her POST lands between the
	// two steps of her leave.
	id := h.tokenID(toks["alice"])
	_, _, aliceSeq, _ := waitqueue.ParseTokenID(id)
	cl, err := h.line.Claim(ctx, h.queue, aliceSeq, waitqueue.Order{ID: orders.ID(id), TokenID: id, User: "alice", SKU: "sku-1", Quantity: 1}, time.Minute)
	if err != nil || cl.Outcome != waitqueue.Redeemed {
		t.Fatalf("claim of alice's token = %+v, %v", cl, err)
	}
	if r := h.do("DELETE", "/v1/queues/"+h.queue+"/tickets/"+tickets["alice"], "", nil); r.status != 204 {
		t.Fatalf("alice's DELETE = %d %s, want 204", r.status, r.raw)
	}
	if r := h.order("alice", toks["alice"], body); r.status != 202 {
		t.Fatalf("alice's order after her leave = %d %s, want 202: the claim came first", r.status, r.raw)
	}
	// bob leaves first: his order is refused.
	if r := h.do("DELETE", "/v1/queues/"+h.queue+"/tickets/"+tickets["bob"], "", nil); r.status != 204 {
		t.Fatalf("bob's DELETE = %d %s, want 204", r.status, r.raw)
	}
	if r := h.order("bob", toks["bob"], body); r.status != 409 || r.str("type") != "https://usher.dev/problems/token-left" {
		t.Fatalf("bob's order after his leave = %d %s, want 409 token-left", r.status, r.raw)
	}

	_, _, bobSeq, _ := waitqueue.ParseTokenID(h.tokenID(toks["bob"]))
	if left := h.leaves(); len(left) != 1 || left[0] != bobSeq {
		t.Errorf("leaves stored = %v, want bob's (%d) alone", left, bobSeq)
	}
	if reqs := h.requests(); len(reqs) != 1 || reqs[0].TokenID != id {
		t.Errorf("order requests stored = %+v, want alice's alone", reqs)
	}
}

// leaves reads the entries the queue's stored leaves name.
func (h *harness) leaves() []uint64 {
	h.t.Helper()
	var out []uint64
	h.each(event.StreamEntries, event.LeaveSubject(h.queue), func(m jetstream.Msg) {
		var l event.Left
		if _, err := event.Unmarshal(m.Data(), event.TypeLeft, &l); err != nil {
			h.t.Fatal(err)
		}
		out = append(out, l.Seq)
	})
	return out
}
