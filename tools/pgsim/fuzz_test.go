package main

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// FuzzPaymentRequest feeds arbitrary idempotency keys and bodies to the
// body parser and to the payment handler: nothing panics, every rejection
// is a 4xx problem, and every accepted request is a valid charge.
func FuzzPaymentRequest(f *testing.F) {
	for _, seed := range []struct{ key, body string }{
		{"k", validBody},
		{"k", `{"orderId":"o","amount":1,"currency":"KRW","x":1}`},
		{"k", `{"orderId":"o","amount":-1,"currency":"KRW"}`},
		{"k", `{"orderId":"o","amount":1e3,"currency":"KRW"}`},
		{"k", `{"orderId":"o","amount":99999999999999999999,"currency":"KRW"}`},
		{"k", `{"orderId":"\ud800","amount":1,"currency":"KRW"}`},
		{"k", `{"ORDERID":"o","Amount":1,"currency":"KRW"}`},
		{"k", `{"orderId":"o","amount":1,"currency":"KRW"} trailing`},
		{"k", `null`},
		{"k", `[]`},
		{"k", `"str"`},
		{"k", ``},
		{"", validBody},
		{"a\x00b", validBody},
		{"\xff", validBody},
	} {
		f.Add(seed.key, []byte(seed.body))
	}
	logger := slog.New(slog.NewJSONHandler(io.Discard, nil))

	f.Fuzz(func(t *testing.T, key string, body []byte) {
		if req, err := parsePaymentRequest(body); err == nil {
			if req.OrderID == "" || len(req.OrderID) > maxOrderIDLen || req.Amount <= 0 || !validCurrency(req.Currency) {
				t.Fatalf("accepted an invalid request %+v", req)
			}
			// An accepted request survives a round trip unchanged.
			again, err := json.Marshal(paymentRequest(req))
			if err != nil {
				t.Fatal(err)
			}
			if back, err := parsePaymentRequest(again); err != nil || back != req {
				t.Fatalf("round trip of %+v gave %+v, %v", req, back, err)
			}
		}

		gw := NewGateway(GatewayOptions{Clock: instantClock{}})
		h := newHandler(gw, NewMetrics(), instantClock{}, testToken, logger, nil)
		for range 2 { // the second request exercises the replay path
			r := httptest.NewRequest(http.MethodPost, "/v1/payments", bytes.NewReader(body))
			r.Header.Set("Idempotency-Key", key)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)

			switch status := w.Code; {
			case status == http.StatusCreated || status == http.StatusOK:
				var p paymentResponse
				if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.PaymentID == "" || p.IdempotencyKey != key || p.Amount <= 0 {
					t.Fatalf("success body %s (%v)", w.Body.Bytes(), err)
				}
			case status >= 400 && status < 500:
				if ct := w.Header().Get("Content-Type"); ct != problemContentType {
					t.Fatalf("%d with Content-Type %q", status, ct)
				}
				var p problem
				if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Status != status {
					t.Fatalf("problem body %s (%v)", w.Body.Bytes(), err)
				}
			default:
				t.Fatalf("status %d for key %q body %q: %s", status, key, body, w.Body.Bytes())
			}
		}
		if n := gw.Stats().MaxPerKey; n > 1 {
			t.Fatalf("key charged %d times", n)
		}
	})
}

// FuzzLedgerKey feeds arbitrary idempotency keys to the lookup and void
// endpoints, before and after a charge under the key: nothing panics,
// nothing answers 5xx, every rejection is a problem, a valid key's lookup
// answers its capture (200) or 404, and only a void voids.
func FuzzLedgerKey(f *testing.F) {
	for _, seed := range []string{"", ".", "k", "ord_abc", "a/b", "a b", "%2F", "?x=1", "#", "é", "\x00", "void", strings.Repeat("k", 201)} {
		f.Add(seed)
	}
	logger := slog.New(slog.NewJSONHandler(io.Discard, nil))

	f.Fuzz(func(t *testing.T, key string) {
		gw := NewGateway(GatewayOptions{Clock: instantClock{}})
		h := newHandler(gw, NewMetrics(), instantClock{}, testToken, logger, nil)
		path := "/v1/payments/" + url.PathEscape(key)
		if key == "" || key == "." || key == ".." {
			return // not one path segment: the mux routes (or redirects) it elsewhere
		}
		serve := func(method, path string) *httptest.ResponseRecorder {
			r := httptest.NewRequest(method, "http://pgsim"+path, nil)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code >= 500 {
				t.Fatalf("%s %s = %d %s", method, path, w.Code, w.Body.Bytes())
			}
			if w.Code >= 400 {
				var p problem
				if ct := w.Header().Get("Content-Type"); ct != problemContentType || json.Unmarshal(w.Body.Bytes(), &p) != nil || p.Status != w.Code {
					t.Fatalf("%s %s = %d %q %s, want a problem", method, path, w.Code, ct, w.Body.Bytes())
				}
			}
			return w
		}
		want := http.StatusNotFound
		if !validKey(key) {
			want = http.StatusBadRequest
		}
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			p := path
			if method == http.MethodPost {
				p += "/void"
			}
			if w := serve(method, p); w.Code != want {
				t.Fatalf("%s %s before a charge = %d %s, want %d", method, p, w.Code, w.Body.Bytes(), want)
			}
		}
		if !validKey(key) {
			return
		}
		if _, err := gw.Charge(t.Context(), key, testCharge()); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct{ method, path, status string }{
			{http.MethodGet, path, "captured"},
			{http.MethodPost, path + "/void", "voided"},
			{http.MethodGet, path, "voided"},
		} {
			w := serve(tc.method, tc.path)
			var rec paymentRecord
			if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &rec) != nil || rec.IdempotencyKey != key || rec.Status != tc.status {
				t.Fatalf("%s %s = %d %s, want 200 %s", tc.method, tc.path, w.Code, w.Body.Bytes(), tc.status)
			}
		}
	})
}
