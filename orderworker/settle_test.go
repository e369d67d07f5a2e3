package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"usher/internal/orders"
	"usher/internal/paybreaker"
	"usher/internal/testenv"
)

// These tests hold the worker to one promise: a shopper the payment
// gateway charged never ends with a FAILED order while the gateway can say
// so, and a capture that cannot become a PAID order is given back.

// ledger is what pgsim holds under key: the payment id and its status
// (captured, voided; "" for none).
func (w *world) ledger(key string) (paymentID, status string) {
	w.t.Helper()
	var out struct{ PaymentID, Status string }
	w.pgsimDo("GET", w.pgsimURL+"/v1/admin/charges?key="+key, "", &out)
	return out.PaymentID, out.Status
}

// pgsimCounter reads one series of pgsim's /metrics, e.g.
// `usher_pgsim_ledger_requests_total{op="lookup",outcome="outage"}`.
func (w *world) pgsimCounter(series string) int {
	w.t.Helper()
	res, err := http.Get(w.pgsimURL + "/metrics")
	if err != nil {
		w.t.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				w.t.Fatalf("%s = %q", series, v)
			}
			return n
		}
	}
	w.t.Fatalf("pgsim exposes no %s", series)
	return 0
}

// crashAfterCharge runs a worker that stops right after the gateway
// captured the order's payment (PENDING in PostgreSQL, captured at the
// gateway, the answer lost with the process) and returns the order id.
func (w *world) crashAfterCharge(tok string, env ...string) string {
	w.t.Helper()
	crashed := w.start(hooks{afterPay: func(string) error { return errCrash }}, env...)
	id := w.request(tok, "")
	testenv.EndsWith(w.t, crashed, 30*time.Second, errCrash)
	if st := w.order(id).Status; st != orders.Pending {
		w.t.Fatalf("after the crash the order is %s, want PENDING", st)
	}
	if _, st := w.ledger(id); st != "captured" {
		w.t.Fatalf("after the crash the gateway holds %q, want captured", st)
	}
	return id
}

// waitPast waits until t has passed.
func waitPast(tb testing.TB, t time.Time) {
	tb.Helper()
	testenv.Eventually(tb, time.Minute, func() bool { return time.Now().After(t) }, "time past %v", t)
}

// An order whose payment the gateway captured ends PAID with that payment
// id, however the answer got lost and whenever it is decided, and the key
// is captured once.
func TestACapturedPaymentEndsPaidWithItsPaymentID(t *testing.T) {
	tests := []struct {
		name string
		run  func(w *world, tok string) string // returns the order id
	}{
		{"the gateway captures and never answers", func(w *world, tok string) string {
			w.setMode("capture-hang", 0)
			w.start(hooks{})
			return w.request(tok, "")
		}},
		{"the gateway captures and never answers, and the deadline passes meanwhile", func(w *world, tok string) string {
			w.setMode("capture-hang", 0)
			w.start(hooks{}, "USHER_ORDER_DEADLINE", "1s")
			return w.request(tok, "")
		}},
		{"a crash after the charge, redelivered before the deadline while answers hang", func(w *world, tok string) string {
			id := w.crashAfterCharge(tok)
			w.setMode("capture-hang", 0)
			w.start(hooks{})
			return id
		}},
		{"a crash after the charge, redelivered after the deadline with the breaker open", func(w *world, tok string) string {
			id := w.crashAfterCharge(tok, "USHER_ORDER_DEADLINE", "1s")
			if err := paybreaker.New(w.rdb).MarkOpen(context.Background(), time.Minute); err != nil {
				w.t.Fatal(err)
			}
			waitPast(w.t, w.order(id).Deadline)
			w.start(hooks{})
			return id
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, queueCfg(20), 10, 5)
			id := tt.run(w, w.admit(1)[0])
			w.waitFinal(60*time.Second, id)

			o := w.order(id)
			pid, st := w.ledger(id)
			if o.Status != orders.Paid || o.PaymentID != pid || st != "captured" {
				t.Fatalf("order %s (%s) with payment %q; gateway holds %q %s: want PAID with the captured payment",
					o.Status, o.Reason, o.PaymentID, pid, st)
			}
			if n, stock := w.charges(id), w.stock(); n != 1 || stock != 9 {
				t.Fatalf("charges %d, stock %d: want one capture and stock 9", n, stock)
			}
			if f := w.finished()[id]; f.Status != "PAID" || f.PaymentID != pid {
				t.Fatalf("completed event = %+v, want PAID with %s", f, pid)
			}
		})
	}
}

// A capture found for an order that is final already (another worker
// failed it and gave its stock back) is voided at the gateway: the shopper
// is not charged for an order they do not get.
func TestACaptureOfAnOrderFailedMeanwhileIsVoided(t *testing.T) {
	failIt := func(w *world) func(string) error {
		return func(id string) error {
			_, err := w.db.Fail(context.Background(), id, orders.ReasonDeadline)
			return err
		}
	}
	tests := []struct {
		name  string
		mode  string
		hooks func(w *world) hooks
	}{
		{"found by a lookup after the answer never came", "capture-hang", func(w *world) hooks { return hooks{afterPlace: failIt(w)} }},
		{"answered by the charge", "normal", func(w *world) hooks { return hooks{afterPay: failIt(w)} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, queueCfg(20), 10, 5)
			w.setMode(tt.mode, 0)
			tok := w.admit(1)[0]
			w.start(tt.hooks(w))
			id := w.request(tok, "")
			w.waitFinal(60*time.Second, id)
			testenv.Eventually(t, 10*time.Second, func() bool { _, st := w.ledger(id); return st == "voided" },
				"the capture of order %s voided", id)

			if o := w.order(id); o.Status != orders.Failed || o.Reason != orders.ReasonDeadline || o.PaymentID != "" {
				t.Fatalf("order = %s (%s) payment %q, want FAILED (deadline) as the other worker left it", o.Status, o.Reason, o.PaymentID)
			}
			if n, stock := w.charges(id), w.stock(); n != 1 || stock != 10 {
				t.Fatalf("charges %d, stock %d: want the one capture (voided) and the stock back once", n, stock)
			}
		})
	}
}

// While the gateway cannot answer a lookup, an order past its deadline is
// not failed: it waits, and the lookup's answer decides it once the gateway
// is back — PAID when it captured, FAILED (deadline, stock back) when not.
func TestAnUnreachableGatewayAtTheDeadlineDefersTheDecision(t *testing.T) {
	lookupsInOutage := `usher_pgsim_ledger_requests_total{op="lookup",outcome="outage"}`
	tests := []struct {
		name       string
		setup      func(w *world, tok string) string // leaves the order waiting in an outage
		wantStatus orders.Status
		wantStock  int64
	}{
		{"the gateway had captured", func(w *world, tok string) string {
			id := w.crashAfterCharge(tok, "USHER_ORDER_DEADLINE", "1s")
			w.setMode("outage", 0)
			w.start(hooks{})
			return id
		}, orders.Paid, 9},
		{"the gateway had captured nothing", func(w *world, tok string) string {
			w.setMode("outage", 0)
			w.start(hooks{}, "USHER_ORDER_DEADLINE", "1s")
			return w.request(tok, "")
		}, orders.Failed, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, queueCfg(20), 10, 5)
			id := tt.setup(w, w.admit(1)[0])
			testenv.Eventually(t, 30*time.Second, func() bool { _, ok, _ := w.db.Get(context.Background(), id); return ok }, "order placed")
			waitPast(t, w.order(id).Deadline)
			before := w.pgsimCounter(lookupsInOutage)
			testenv.Eventually(t, 30*time.Second, func() bool { return w.pgsimCounter(lookupsInOutage) >= before+2 },
				"two lookups after the deadline")
			if o := w.order(id); o.Status != orders.Pending {
				t.Fatalf("past its deadline with the gateway down the order is %s (%s), want PENDING", o.Status, o.Reason)
			}

			w.setMode("normal", 0)
			w.waitFinal(30*time.Second, id)
			o := w.order(id)
			pid, _ := w.ledger(id)
			if o.Status != tt.wantStatus || o.PaymentID != pid || w.stock() != tt.wantStock {
				t.Fatalf("order %s (%s) payment %q, stock %d; gateway holds %q: want %s, stock %d",
					o.Status, o.Reason, o.PaymentID, w.stock(), pid, tt.wantStatus, tt.wantStock)
			}
			if o.Status == orders.Failed && o.Reason != orders.ReasonDeadline {
				t.Fatalf("reason = %q, want %q", o.Reason, orders.ReasonDeadline)
			}
		})
	}
}

// When even the lookup grace past the deadline passes without an answer,
// the order fails as payment_unknown (stock back) for ops to reconcile.
func TestAPaymentStillUnknownAfterTheGraceFailsAsPaymentUnknown(t *testing.T) {
	w := newWorld(t, queueCfg(20), 10, 5)
	w.setMode("outage", 0)
	tok := w.admit(1)[0]
	w.start(hooks{}, "USHER_ORDER_DEADLINE", "1s", "USHER_PAYMENT_LOOKUP_GRACE", "2s")
	id := w.request(tok, "")
	w.waitFinal(30*time.Second, id)

	if o := w.order(id); o.Status != orders.Failed || o.Reason != reasonPaymentUnknown || w.stock() != 10 {
		t.Fatalf("order %s (%s), stock %d: want FAILED payment_unknown, stock 10", o.Status, o.Reason, w.stock())
	}
	if f := w.finished()[id]; f.Status != "FAILED" || f.Reason != reasonPaymentUnknown {
		t.Fatalf("failed event = %+v, want payment_unknown", f)
	}
	// Failed no earlier than its deadline and the grace. The deadline is
	// the worker's clock (Redis's time, synced) and the failure
	// PostgreSQL's: on one machine they differ by the sync's error only.
	conn, err := pgx.Connect(context.Background(), w.env["USHER_DATABASE_URL"])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var failedAt time.Time
	if err := conn.QueryRow(context.Background(), `SELECT updated_at FROM orders WHERE id = $1`, id).Scan(&failedAt); err != nil {
		t.Fatal(err)
	}
	if early := w.order(id).Deadline.Add(2 * time.Second).Sub(failedAt); early > 100*time.Millisecond {
		t.Fatalf("failed %v before its deadline (1 s after it was placed) and the grace (2 s) had passed", early)
	}
}

// A crash between a FAILED order's capture being found and its void leaves
// no capture behind: the next delivery finds the order FAILED, asks the
// gateway, and voids what it holds.
func TestAStrayCaptureOfAFailedOrderIsVoidedOnItsNextDelivery(t *testing.T) {
	w := newWorld(t, queueCfg(20), 10, 5)
	tok := w.admit(1)[0]
	id := w.crashAfterCharge(tok)
	// Another worker failed it meanwhile and died before voiding.
	if _, err := w.db.Fail(context.Background(), id, orders.ReasonDeadline); err != nil {
		t.Fatal(err)
	}
	w.start(hooks{})
	w.waitFinal(30*time.Second, id)
	testenv.Eventually(t, 10*time.Second, func() bool { _, st := w.ledger(id); return st == "voided" }, "the stray capture of %s voided", id)
	if o, n, stock := w.order(id), w.charges(id), w.stock(); o.Status != orders.Failed || n != 1 || stock != 10 {
		t.Fatalf("order %s, charges %d, stock %d: want FAILED, the one capture voided, stock back", o.Status, n, stock)
	}
}

// front is a reverse proxy in front of pgsim, as a shop's egress proxy or a
// WAF would be: it forwards every request, except that from the
// (after+1)-th payment on it answers refuse itself, with its own page
// rather than pgsim's problem. It returns its URL and how many payments it
// refused so far.
func (w *world) front(after int, refuse int) (string, func() int64) {
	w.t.Helper()
	target, err := url.Parse(w.pgsimURL)
	if err != nil {
		w.t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ErrorLog = log.New(io.Discard, "", 0) // a charge the worker gave up on
	var payments, refused atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/payments" && payments.Add(1) > int64(after) {
			refused.Add(1)
			rw.Header().Set("Content-Type", "text/html")
			rw.WriteHeader(refuse)
			fmt.Fprintf(rw, "<html><body><h1>%d %s</h1><hr>proxy</body></html>\n", refuse, http.StatusText(refuse))
			return
		}
		proxy.ServeHTTP(rw, r)
	}))
	w.t.Cleanup(srv.Close)
	return srv.URL, refused.Load
}

// Only a decline the payment gateway states itself (its payment-declined
// problem) fails an order. Any other refusal — a retry told 409 because
// the charge it repeats is still in flight (as Stripe answers), a 401, 403
// or 404 from a proxy in front of the gateway — says nothing about the
// money, so the order is decided by what the gateway holds under its key:
// the first charge, still running when the retry was refused, captures,
// and the order ends PAID with it. No capture is left on an order that did
// not end PAID.
func TestOnlyADeclineTheGatewayStatesFailsAnOrder(t *testing.T) {
	tests := []struct {
		name   string
		keys   string // PGSIM_KEY_IN_USE
		mode   string
		refuse int // the front's answer to every charge after the first; 0: no front
		want   orders.Status
	}{
		{"the gateway declines", "wait", "decline", 0, orders.Failed},
		{"a retry is told the key is in use", "conflict", "slow", 0, orders.Paid},
		{"a proxy answers the retries 401", "conflict", "slow", http.StatusUnauthorized, orders.Paid},
		{"a proxy answers the retries 403", "conflict", "slow", http.StatusForbidden, orders.Paid},
		{"a proxy answers the retries 404", "conflict", "slow", http.StatusNotFound, orders.Paid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, queueCfg(20), 10, 5, "PGSIM_KEY_IN_USE", tt.keys)
			// Slow: a charge takes 2 s at the gateway and the worker
			// gives up on it after 0.5 s; with "conflict" the charge
			// runs on and captures while the worker retries.
			w.setMode(tt.mode, 2000)
			refused := func() int64 { return 0 }
			if tt.refuse != 0 {
				w.env["USHER_PAYMENT_URL"], refused = w.front(1, tt.refuse)
			}
			tok := w.admit(1)[0]
			w.start(hooks{})
			id := w.request(tok, "")
			w.waitFinal(60*time.Second, id)

			o := w.order(id)
			pid, st := w.ledger(id)
			wantStock := int64(9)
			if tt.want != orders.Paid {
				wantStock = 10
			}
			if o.Status != tt.want || w.stock() != wantStock {
				t.Fatalf("order %s (%s), stock %d; the gateway holds %q %s: want %s, stock %d",
					o.Status, o.Reason, w.stock(), pid, st, tt.want, wantStock)
			}
			if o.Status == orders.Failed && o.Reason != orders.ReasonDeclined {
				t.Fatalf("reason = %q, want %q", o.Reason, orders.ReasonDeclined)
			}
			// Let a charge still in flight land, then: a capture is the
			// PAID order's, or voided.
			testenv.Eventually(t, 10*time.Second, func() bool {
				_, st := w.ledger(id)
				return o.Status == orders.Paid || st != "captured"
			}, "no capture left on order %s, %s", id, o.Status)
			if o.Status == orders.Paid && (st != "captured" || o.PaymentID != pid || w.charges(id) != 1) {
				t.Fatalf("PAID with %q; the gateway holds %q %s, %d charge(s): want the one capture", o.PaymentID, pid, st, w.charges(id))
			}
			// The refusal under test was met.
			inUse := w.pgsimCounter(`usher_pgsim_requests_total{outcome="conflict"}`)
			switch {
			case tt.refuse != 0 && refused() == 0:
				t.Fatal("the proxy refused no retry")
			case tt.keys == "conflict" && tt.refuse == 0 && inUse == 0:
				t.Fatal("no retry was told the key is in use")
			}
		})
	}
}
