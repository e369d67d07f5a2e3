package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"usher/gateway/admin"
	"usher/internal/event"
	"usher/internal/orders"
	"usher/internal/testenv"
	"usher/internal/token"
	"usher/internal/waitqueue"
)

// newOrderHarness is a gateway whose queue sells "sku-1", up to 2 per order.
func newOrderHarness(t testing.TB) *harness {
	t.Helper()
	h := newHarness(t)
	h.gw.orders = orders.NewRecords(testenv.Redis(t))
	h.rebuild()
	h.putQueue(h.queue, `{"targetActive": 5, "sku": "sku-1", "maxQuantity": 2, "rateLimit": `+limitsOff+`}`, 200)
	return h
}

// entryToken signs a token the way usher does, without any admission
// behind it: for the checks made before the line is asked.
func (h *harness) entryToken(user string, seq int, readyAt, expiresAt time.Time) string {
	h.t.Helper()
	tok, err := h.gw.keys.Sign(token.Claims{ID: waitqueue.TokenID(h.queue, h.gw.epoch(), uint64(seq)), Queue: h.queue,
		User: user, ReadyAt: readyAt, ExpiresAt: expiresAt})
	if err != nil {
		h.t.Fatal(err)
	}
	return tok
}

// ready joins users, admits them, and returns the entry token each poll
// hands out, as a shopper gets it: an admission the line holds.
func (h *harness) ready(users ...string) []string {
	h.t.Helper()
	tickets := make([]string, len(users))
	for i, u := range users {
		tickets[i] = h.join(u).str("ticket")
	}
	h.admit()
	toks := make([]string, len(users))
	for i, tk := range tickets {
		r := h.poll(tk)
		if toks[i] = r.str("token"); toks[i] == "" {
			h.t.Fatalf("poll of %s after admission = %s, want READY", users[i], r.raw)
		}
	}
	return toks
}

// tokenID is the token id an entry token carries.
func (h *harness) tokenID(tok string) string {
	h.t.Helper()
	c, err := h.gw.keys.Verify(tok, time.Now())
	if err != nil {
		h.t.Fatal(err)
	}
	return c.ID
}

func (h *harness) order(user, tok, body string) response {
	h.t.Helper()
	return h.do("POST", "/v1/orders", body, map[string]string{"X-User-Id": user, "Authorization": "Bearer " + tok, "Content-Type": "application/json"})
}

// requests reads every usher.order.requested message in the stream.
func (h *harness) requests() []event.OrderRequested {
	h.t.Helper()
	var out []event.OrderRequested
	h.each(event.StreamOrders, event.OrderRequestedSubject(h.queue), func(m jetstream.Msg) {
		var r event.OrderRequested
		if _, err := event.Unmarshal(m.Data(), event.TypeOrderRequested, &r); err != nil {
			h.t.Fatal(err)
		}
		out = append(out, r)
	})
	return out
}

// each hands fn every message stream holds on subject, in order.
func (h *harness) each(stream, subject string, fn func(jetstream.Msg)) {
	h.t.Helper()
	cons, err := h.js.OrderedConsumer(context.Background(), stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		h.t.Fatal(err)
	}
	for {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(200*time.Millisecond))
		if err != nil {
			h.t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			fn(m)
			n++
		}
		if n == 0 {
			return
		}
	}
}

func TestPlaceOrderStatuses(t *testing.T) {
	h := newOrderHarness(t)
	now := time.Now()
	valid := h.ready("alice")[0]
	other, _ := token.LoadKeyring(t.TempDir()+"/other.key", nil)
	forged, _ := other.Sign(token.Claims{ID: h.tokenID(valid), Queue: h.queue, User: "alice", ReadyAt: now, ExpiresAt: now.Add(time.Minute)})
	// A token signed with usher's own key but for an admission the line
	// does not hold (minted outside it, or lost and not yet healed).
	unbacked := h.entryToken("carol", 99, now.Add(-time.Second), now.Add(time.Minute))
	staleEpoch, _ := h.gw.keys.Sign(token.Claims{ID: waitqueue.TokenID(h.queue, "old", 1), Queue: h.queue, User: "alice",
		ReadyAt: now.Add(-time.Second), ExpiresAt: now.Add(time.Minute)})
	body := `{"sku": "sku-1", "quantity": 1}`

	tests := []struct {
		name       string
		user, tok  string
		body       string
		wantStatus int
	}{
		{"garbage token", "alice", "garbage", body, 401},
		{"forged token", "alice", forged, body, 401},
		{"expired token", "alice", h.entryToken("alice", 2, now.Add(-time.Hour), now.Add(-time.Minute)), body, 401},
		{"token of another queue usher does not know", "alice", func() string {
			s, _ := h.gw.keys.Sign(token.Claims{ID: "nope:1", Queue: "nope", User: "alice", ReadyAt: now, ExpiresAt: now.Add(time.Minute)})
			return s
		}(), body, 401},
		{"another user's token", "bob", valid, body, 403},
		{"token before its nbf", "alice", h.entryToken("alice", 3, now.Add(time.Hour), now.Add(2*time.Hour)), body, 425},
		{"a token of a line since reset", "alice", staleEpoch, body, 401},
		{"a token the line holds no admission for", "carol", unbacked, body, 503},
		{"malformed body", "alice", valid, `{"sku":`, 400},
		{"unknown field", "alice", valid, `{"sku": "sku-1", "qty": 1}`, 400},
		{"the wrong SKU", "alice", valid, `{"sku": "sku-2", "quantity": 1}`, 422},
		{"more than maxQuantity", "alice", valid, `{"sku": "sku-1", "quantity": 3}`, 422},
		{"a new order", "alice", valid, body, 202},
		{"the same order again while pending", "alice", valid, body, 202},
		{"the same token with another body", "alice", valid, `{"sku": "sku-1", "quantity": 2}`, 409},
	}
	for _, tt := range tests {
		r := h.order(tt.user, tt.tok, tt.body)
		if r.status != tt.wantStatus || (r.status >= 400 && !isProblem(r)) {
			t.Errorf("%s: POST /v1/orders = %d %s, want %d", tt.name, r.status, r.raw, tt.wantStatus)
		}
	}
	r := h.order("alice", valid, body)
	id := orders.ID(h.tokenID(valid))
	if r.str("orderId") != id || r.str("status") != "PENDING" || r.header.Get("Location") != "/v1/orders/"+id {
		t.Fatalf("answer = %s Location %q, want order %s PENDING", r.raw, r.header.Get("Location"), id)
	}
}

// A queue with neither sku nor skus sells nothing through usher: its
// entry token is for the shop's own checkout. An order with it, whatever
// SKU it names, is a 422 no-products that says so (not a wrong-sku naming
// an empty list), and takes nothing: the token is not redeemed, no order
// is recorded or requested, and the shopper is still READY with it.
func TestAnOrderInAQueueThatSellsNothing(t *testing.T) {
	h := newHarness(t) // its queue: {"targetActive": 5}, no SKU
	h.gw.orders = orders.NewRecords(testenv.Redis(t))
	h.rebuild()
	tk := h.join("alice").str("ticket")
	h.admit()
	tok := h.poll(tk).str("token")
	if tok == "" {
		t.Fatalf("alice is not READY in a queue without SKU: %s", h.poll(tk).raw)
	}
	for _, sku := range []string{h.queue, "sku-1", "anything"} {
		r := h.order("alice", tok, `{"sku": "`+sku+`", "quantity": 1}`)
		if r.status != 422 || !isProblem(r) || r.str("type") != "https://usher.dev/problems/no-products" ||
			!strings.Contains(r.str("detail"), "sells nothing") || !strings.Contains(r.str("detail"), "shop's own checkout") {
			t.Errorf("order of %q = %d %s, want 422 no-products sending the shopper to the shop's checkout", sku, r.status, r.raw)
		}
	}
	if r := h.order("alice", tok, `{"sku":`); r.status != 400 {
		t.Errorf("a malformed body = %d %s, want 400: the body is judged first", r.status, r.raw)
	}
	if _, found, err := h.gw.orders.Get(t.Context(), orders.ID(h.tokenID(tok))); err != nil || found {
		t.Errorf("an order was recorded (%v, %v)", found, err)
	}
	if reqs := h.requests(); len(reqs) != 0 {
		t.Errorf("orders requested: %+v, want none", reqs)
	}
	if r := h.poll(tk); r.str("status") != "READY" || r.str("token") != tok {
		t.Errorf("poll after the refused orders = %s, want READY with the same token", r.raw)
	}
}

// Fifty concurrent submits of one token are one order: the same id for
// all, one request in the stream.
func TestConcurrentSubmitsOfOneTokenAreOneOrder(t *testing.T) {
	h := newOrderHarness(t)
	tok := h.ready("alice")[0]
	var wg sync.WaitGroup
	ids := make([]string, 50)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := h.order("alice", tok, `{"sku": "sku-1"}`)
			if r.status != 202 {
				t.Errorf("submit %d = %d %s, want 202", i, r.status, r.raw)
			}
			ids[i] = r.str("orderId")
		}()
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("order ids differ: %q and %q", id, ids[0])
		}
	}
	if got := h.requests(); len(got) != 1 || got[0].OrderID != ids[0] || got[0].TokenID != h.tokenID(tok) {
		t.Fatalf("requests in the stream = %+v, want one for %s", got, ids[0])
	}
}

func TestRedeemedTokenIsAnsweredFromItsOrder(t *testing.T) {
	h := newOrderHarness(t)
	tok := h.ready("alice")[0]
	id := h.order("alice", tok, `{"sku": "sku-1"}`).str("orderId")
	// The worker finishes the order.
	h.gw.orders.(*orders.Records).Put(context.Background(), orders.Record{ID: id, Owner: "alice",
		Fingerprint: orders.Fingerprint("sku-1", 1), Queue: h.queue, SKU: "sku-1", Quantity: 1, Status: orders.Paid, PaymentID: "pay_1"})

	r := h.order("alice", tok, `{"sku": "sku-1"}`)
	if r.status != 200 || r.str("status") != "PAID" || r.str("paymentId") != "pay_1" {
		t.Fatalf("submit after the order was paid = %d %s, want 200 PAID", r.status, r.raw)
	}
	tests := []struct {
		name, user, id string
		wantStatus     int
	}{
		{"the owner sees it", "alice", id, 200},
		{"anyone else does not", "bob", id, 404},
		{"an unknown order", "alice", orders.ID("other"), 404},
		{"not an order id", "alice", "../x", 404},
	}
	for _, tt := range tests {
		r := h.do("GET", "/v1/orders/"+tt.id, "", map[string]string{"X-User-Id": tt.user})
		if r.status != tt.wantStatus || (r.status >= 400 && !isProblem(r)) {
			t.Errorf("%s: GET = %d %s, want %d", tt.name, r.status, r.raw, tt.wantStatus)
		}
	}
	if r := h.do("GET", "/v1/orders/"+id, "", map[string]string{"X-User-Id": "alice"}); r.str("status") != "PAID" || r.num("quantity") != 1 || r.str("sku") != "sku-1" {
		t.Errorf("GET = %s, want PAID sku-1 ×1", r.raw)
	}
}

func TestPutStock(t *testing.T) {
	h := newOrderHarness(t)
	db, err := orders.Open(testenv.PostgresURL(t), orders.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	h.gw.stock = admin.NewMigratedStock(db)
	h.rebuild()
	adminAuth := map[string]string{"Authorization": "Bearer secret-admin"}
	tests := []struct {
		name, sku, body string
		want            int
	}{
		{"sets the stock", "sku-1", `{"available": 100}`, 200},
		{"negative", "sku-1", `{"available": -1}`, 400},
		{"missing", "sku-1", `{}`, 400},
		{"trailing data", "sku-1", `{"available": 1} x`, 400},
		{"bad sku", "a%20b", `{"available": 1}`, 400},
		{"an encoded sku is the sku", "%73ku-1", `{"available": 100}`, 200},
	}
	for _, tt := range tests {
		r := h.do("PUT", "/v1/admin/stock/"+tt.sku, tt.body, adminAuth)
		if r.status != tt.want || (r.status >= 400 && !isProblem(r)) {
			t.Errorf("%s: PUT stock = %d %s, want %d", tt.name, r.status, r.raw, tt.want)
		}
	}
	if n, _, _ := db.Stock(context.Background(), "sku-1"); n != 100 {
		t.Fatalf("stock = %d, want 100", n)
	}
	if r := h.do("PUT", "/v1/admin/stock/sku-1", `{"available": 1}`, nil); r.status != 401 {
		t.Fatalf("PUT stock without the admin token = %d, want 401", r.status)
	}
}

// A queue closed because its SKU sold out tells waiting shoppers so.
func TestClosedQueueSaysWhy(t *testing.T) {
	h := newOrderHarness(t)
	tk := h.join("alice").str("ticket")
	h.putQueue(h.queue, `{"targetActive": 5, "sku": "sku-1", "state": "closed", "closedReason": "sold_out"}`, 200)
	if r := h.poll(tk); r.str("status") != "CLOSED" || r.str("reason") != "sold_out" {
		t.Fatalf("poll = %s, want CLOSED sold_out", r.raw)
	}
	if r := h.join("bob"); r.status != 410 {
		t.Fatalf("join = %d, want 410", r.status)
	}
}

// READY is decided on the line's clock elsewhere (a notifier, another
// gateway): an order that comes at once is not refused because this host's
// clock is a moment behind — up to the claim's half second — while one
// that is truly early still is.
func TestAnOrderAtReadyIsNotTooEarlyForAClockAMomentBehind(t *testing.T) {
	h := newOrderHarness(t)
	readyAt := time.Now().Truncate(time.Second).Add(2 * time.Second) // the token's nbf, to the second
	tok := h.entryToken("alice", 7, readyAt, readyAt.Add(time.Minute))
	body := `{"sku": "sku-1", "quantity": 1}`
	h.gw.now = func() time.Time { return readyAt.Add(-300 * time.Millisecond) }
	h.rebuild()
	if r := h.order("alice", tok, body); r.status == 425 {
		t.Fatalf("order 300 ms before nbf by this host's clock = 425 %s; want it past the token check", r.raw)
	}
	h.gw.now = func() time.Time { return readyAt.Add(-700 * time.Millisecond) }
	h.rebuild()
	if r := h.order("alice", tok, body); r.status != 425 {
		t.Fatalf("order 700 ms before nbf = %d %s; want 425", r.status, r.raw)
	}
}

// An order's body is read as JSON whatever its Content-Type says, as the
// API document says of every body: a client library that labels it
// multipart/form-data (with a boundary) was answered 400 bad-request,
// "the request could not be parsed", before the handler saw the order —
// the HTTP server parsed the body as a multipart form while reading the
// request. A body that is not the JSON the document wants (a real form)
// is a 400 invalid-body that says what it wants.
func TestAnOrderBodyIsReadAsJSONWhateverItsContentType(t *testing.T) {
	h := newOrderHarness(t)
	types := []string{
		"application/json",
		"multipart/form-data; boundary=usher-boundary",
		"multipart/form-data",
		"application/x-www-form-urlencoded", // curl -d's
		"",
	}
	users := make([]string, len(types))
	for i := range types {
		users[i] = fmt.Sprintf("buyer%d", i)
	}
	toks := h.ready(users...)
	for i, ct := range types {
		header := map[string]string{"X-User-Id": users[i], "Authorization": "Bearer " + toks[i]}
		if ct != "" {
			header["Content-Type"] = ct
		}
		r := h.do("POST", "/v1/orders", `{"sku": "sku-1", "quantity": 1}`, header)
		if r.status != 202 || r.str("status") != "PENDING" {
			t.Errorf("POST /v1/orders with a JSON body as Content-Type %q = %d %s, want 202 PENDING", ct, r.status, r.raw)
		}
	}

	form := "--usher-boundary\r\nContent-Disposition: form-data; name=\"sku\"\r\n\r\nsku-1\r\n--usher-boundary--\r\n"
	tok := h.entryToken("former", 99, time.Now().Add(-time.Second), time.Now().Add(time.Minute))
	r := h.do("POST", "/v1/orders", form, map[string]string{"X-User-Id": "former", "Authorization": "Bearer " + tok,
		"Content-Type": "multipart/form-data; boundary=usher-boundary"})
	if r.status != 400 || !isProblem(r) || !strings.HasSuffix(r.str("type"), "/invalid-body") || !strings.Contains(r.str("detail"), `{"sku"`) {
		t.Errorf("POST /v1/orders with a multipart form = %d %s, want 400 invalid-body naming the JSON it wants", r.status, r.raw)
	}
}
