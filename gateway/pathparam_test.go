package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
)

// encoded spells every byte of s percent-encoded: %64%65%6D%6F for demo.
func encoded(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&b, "%%%02X", s[i])
	}
	return b.String()
}

// doTarget is do with the request target sent as written, even one Go's
// URL parser refuses (a stray %), as curl sends it. The API contract is
// not checked: the document speaks of paths that parse.
func (h *harness) doTarget(method, target string, header map[string]string) response {
	h.t.Helper()
	req := httptest.NewRequest(method, "/", nil)
	req.RequestURI = target
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := h.app.Test(req, 10_000)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, target, err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	r := response{status: res.StatusCode, header: res.Header, raw: raw}
	_ = json.Unmarshal(raw, &r.body)
	return r
}

// A name in a path is the same name however it is spelled: RFC 3986 makes
// a percent-encoded unreserved character equivalent to the character
// (§2.3, §6.2.2.2), and a browser or an HTTP library may encode one. Every
// route that names a queue, a ticket, a SKU or an order finds it by its
// encoded spelling too: /v1/queues/%64emo/tickets is the queue demo's,
// never a 404 unknown-queue while /v1/queues/demo/tickets is there.
func TestAnEncodedNameInAPathIsTheName(t *testing.T) {
	h := newOrderHarness(t)
	user := map[string]string{"X-User-Id": "ann"}
	first := "/v1/queues/" + fmt.Sprintf("%%%02x", h.queue[0]) + h.queue[1:] // %74estan… as %64emo
	whole := "/v1/queues/" + encoded(h.queue)

	join := h.do("POST", first+"/tickets", "", user)
	tkt := join.str("ticket")
	if join.status != 202 || tkt == "" {
		t.Fatalf("POST %s/tickets = %d %s, want 202 with a ticket", first, join.status, join.raw)
	}
	if again := h.join("ann"); again.status != 200 || again.str("ticket") != tkt {
		t.Fatalf("join by the plain name after the encoded one = %d %s, want 200 with the same ticket", again.status, again.raw)
	}
	if r := h.do("GET", whole+"/tickets/"+encoded(tkt), "", nil); r.status != 200 || r.str("ticket") != tkt || r.str("status") != "WAITING" {
		t.Errorf("poll with the queue and the ticket encoded = %d %s, want 200 WAITING with the ticket", r.status, r.raw)
	}
	if r := h.do("GET", whole, "", nil); r.status != 200 || r.str("name") != h.queue {
		t.Errorf("GET %s = %d %s, want 200 naming %s", whole, r.status, r.raw, h.queue)
	}
	if r := h.do("GET", whole+"/challenge", "", nil); r.status != 200 || r.str("challenge") == "" {
		t.Errorf("GET %s/challenge = %d %s, want 200 with a challenge", whole, r.status, r.raw)
	}
	page := "/q/" + encoded(h.queue)
	if r := h.do("GET", page, "", nil); r.status != 200 || !strings.Contains(string(r.raw), `action="/q/`+h.queue+`"`) {
		t.Errorf("GET %s = %d, want 200, its forms posting to /q/%s:\n%s", page, r.status, h.queue, r.raw)
	}
	if r := h.postForm(page, map[string]string{"action": "check", "ticket": tkt, "user": "ann"}, nil); r.status != 200 || match(statusRE, r.raw) != "WAITING" {
		t.Errorf("check form posted to %s = %d status %q, want 200 WAITING:\n%s", page, r.status, match(statusRE, r.raw), r.raw)
	}

	admin := "/v1/admin/queues/" + encoded(h.queue)
	if r := h.do("GET", admin, "", adminAuth); r.status != 200 || r.str("name") != h.queue {
		t.Errorf("GET %s = %d %s, want 200 naming %s", admin, r.status, r.raw, h.queue)
	}
	// The queue that exists is replaced (200), not another one created (201).
	h.putQueue(encoded(h.queue), `{"targetActive": 5, "sku": "sku-1", "maxQuantity": 2, "rateLimit": `+limitsOff+`}`, 200)
	if r := h.do("PUT", admin+"/notice", `{"message": "hi", "level": "info"}`, adminAuth); r.status != 200 {
		t.Errorf("PUT %s/notice = %d %s, want 200", admin, r.status, r.raw)
	}
	if r := h.do("DELETE", admin+"/notice", "", adminAuth); r.status >= 300 {
		t.Errorf("DELETE %s/notice = %d %s, want 2xx", admin, r.status, r.raw)
	}
	if r := h.do("POST", admin+"/invites", `{"count": 1}`, adminAuth); r.status != 201 {
		t.Errorf("POST %s/invites = %d %s, want 201", admin, r.status, r.raw)
	}

	if r := h.do("DELETE", whole+"/tickets/"+encoded(tkt), "", nil); r.status != 204 {
		t.Errorf("DELETE of the ticket, encoded = %d %s, want 204", r.status, r.raw)
	}
	tok := h.ready("bea")[0]
	id := h.order("bea", tok, `{"sku": "sku-1", "quantity": 1}`).str("orderId")
	if r := h.do("GET", "/v1/orders/"+encoded(id), "", map[string]string{"X-User-Id": "bea"}); r.status != 200 || r.str("orderId") != id {
		t.Errorf("GET /v1/orders/%s = %d %s, want 200 with the order", encoded(id), r.status, r.raw)
	}
}

// A segment that decodes to no valid name — a stray %, a slash, a NUL, a
// dot-dot — is a clear client error, a problem, never a 500 nor another
// resource.
func TestAnEncodedPathSegmentThatNamesNothingIsAProblem(t *testing.T) {
	h := newHarness(t)
	user := map[string]string{"X-User-Id": "ann"}
	tkt := h.join("ann").str("ticket")
	tests := []struct {
		method, target string
		header         map[string]string
		want           int
	}{
		{"POST", "/v1/queues/%zz/tickets", user, 404},
		{"POST", "/v1/queues/%/tickets", user, 404},
		{"POST", "/v1/queues/" + h.queue + "%/tickets", user, 404},
		{"POST", "/v1/queues/a%2Fb/tickets", user, 404},
		{"POST", "/v1/queues/%2E%2E/tickets", user, 404},
		{"POST", "/v1/queues/%00/tickets", user, 404},
		{"POST", "/v1/queues/%2564emo/tickets", user, 404}, // decoded once: "%64emo", no name
		{"GET", "/v1/queues/" + h.queue + "/tickets/%zz", nil, 401},
		{"GET", "/v1/queues/" + h.queue + "/tickets/" + tkt + "%2F", nil, 401},
		{"GET", "/v1/queues/" + h.queue + "/tickets/%2E%2E", nil, 401},
		{"DELETE", "/v1/queues/" + h.queue + "/tickets/%zz", nil, 401},
		{"GET", "/v1/queues/%zz", nil, 404},
		{"GET", "/v1/queues/%zz/challenge", nil, 404},
		{"GET", "/q/%zz", nil, 404},
		{"GET", "/q/a%2Fb", nil, 404},
		{"PUT", "/v1/admin/queues/%zz", adminAuth, 400},
		{"PUT", "/v1/admin/queues/a%2Fb", adminAuth, 400},
		{"PUT", "/v1/admin/queues/%2E%2E", adminAuth, 400},
		{"GET", "/v1/admin/queues/%zz", adminAuth, 404},
		{"GET", "/v1/orders/%zz", user, 404},
		{"GET", "/v1/orders/ord_%2F", user, 404},
	}
	for _, tt := range tests {
		r := h.doTarget(tt.method, tt.target, tt.header)
		if r.status != tt.want || !isProblem(r) {
			t.Errorf("%s %s = %d %s, want a %d problem", tt.method, tt.target, r.status, r.raw, tt.want)
		}
	}
	if r := h.poll(tkt); r.status != 200 || r.str("status") != "WAITING" {
		t.Errorf("poll after the refused requests = %d %s, want ann still WAITING", r.status, r.raw)
	}
}
