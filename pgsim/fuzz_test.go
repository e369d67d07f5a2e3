package main

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
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
		h := newHandler(gw, NewMetrics(), instantClock{}, testToken, logger)
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
