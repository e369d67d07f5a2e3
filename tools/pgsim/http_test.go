package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestPaymentIsCapturedThenReplayed(t *testing.T) {
	e := newTestEnv(t, GatewayOptions{})

	first := e.pay(t, "key-1", validBody)
	if first.status != http.StatusCreated {
		t.Fatalf("first payment = %d %s, want 201", first.status, first.body)
	}
	p := first.payment(t)
	if !strings.HasPrefix(p.PaymentID, "pay_") || p.Status != "captured" || p.IdempotencyKey != "key-1" || p.Amount != 15000 {
		t.Fatalf("first payment body = %+v", p)
	}

	retry := e.pay(t, "key-1", validBody)
	if retry.status != http.StatusOK {
		t.Fatalf("retry = %d %s, want 200", retry.status, retry.body)
	}
	if got := retry.payment(t); got != p {
		t.Fatalf("retry body = %+v, want the first answer %+v", got, p)
	}
	if n := e.chargesFor(t, "key-1"); n != 1 {
		t.Fatalf("charges for key-1 = %d, want 1", n)
	}

	other := e.pay(t, "key-2", validBody)
	if other.status != http.StatusCreated || other.payment(t).PaymentID == p.PaymentID {
		t.Fatalf("another key = %d %s, want 201 with a new payment id", other.status, other.body)
	}
	if got, want := e.stats(t), (chargeStats{Total: 2, Keys: 2, MaxPerKey: 1}); got != want {
		t.Fatalf("stats = %+v, want %+v", got, want)
	}
}

func TestConcurrentSameKeyChargesOnce(t *testing.T) {
	clock := newGateClock()
	e := newTestEnv(t, GatewayOptions{Clock: clock})
	const n = 50

	results := make([]response, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			results[i], errs[i] = e.do(t, nil, http.MethodPost, "/v1/payments", validBody,
				map[string]string{"Idempotency-Key": "same-key"})
		})
	}
	// Every request is inside the gateway (the leader held at the gate, the
	// others waiting for it) before any of them can finish.
	eventually(t, "all requests are in flight", func() bool { return e.gw.InFlight() == n })
	clock.open()
	wg.Wait()

	created, replayed := 0, 0
	ids := map[string]bool{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		switch results[i].status {
		case http.StatusCreated:
			created++
		case http.StatusOK:
			replayed++
		default:
			t.Fatalf("request %d = %d %s", i, results[i].status, results[i].body)
		}
		ids[results[i].payment(t).PaymentID] = true
	}
	if created != 1 || replayed != n-1 {
		t.Fatalf("created=%d replayed=%d, want 1 and %d", created, replayed, n-1)
	}
	if len(ids) != 1 {
		t.Fatalf("payment ids = %v, want one", ids)
	}
	if c := e.chargesFor(t, "same-key"); c != 1 {
		t.Fatalf("charges = %d, want 1", c)
	}
	if s := e.stats(t); s.MaxPerKey != 1 || s.Total != 1 {
		t.Fatalf("stats = %+v, want one charge", s)
	}
}

func TestSameKeyDifferentBodyConflicts(t *testing.T) {
	e := newTestEnv(t, GatewayOptions{})
	if r := e.pay(t, "k", validBody); r.status != http.StatusCreated {
		t.Fatalf("first = %d %s", r.status, r.body)
	}
	for _, body := range []string{
		`{"orderId":"ord-1","amount":15001,"currency":"KRW"}`,
		`{"orderId":"ord-2","amount":15000,"currency":"KRW"}`,
		`{"orderId":"ord-1","amount":15000,"currency":"USD"}`,
	} {
		r := e.pay(t, "k", body)
		if r.status != http.StatusConflict {
			t.Fatalf("body %s = %d %s, want 409", body, r.status, r.body)
		}
		r.problem(t)
	}
	if c := e.chargesFor(t, "k"); c != 1 {
		t.Fatalf("charges = %d, want 1", c)
	}
}

func TestInvalidPaymentRequestsAre400(t *testing.T) {
	e := newTestEnv(t, GatewayOptions{})
	key := map[string]string{"Idempotency-Key": "k"}
	tests := []struct {
		name   string
		header map[string]string
		body   string
	}{
		{"missing key", nil, validBody},
		{"empty key", map[string]string{"Idempotency-Key": ""}, validBody},
		{"key too long", map[string]string{"Idempotency-Key": strings.Repeat("k", 201)}, validBody},
		{"key not ASCII", map[string]string{"Idempotency-Key": "clé"}, validBody},
		{"bad JSON", key, `{"orderId":`},
		{"not an object", key, `[1,2]`},
		{"null", key, `null`},
		{"empty body", key, ``},
		{"unknown field", key, `{"orderId":"o","amount":1,"currency":"KRW","tip":5}`},
		{"trailing data", key, validBody + `{}`},
		{"negative amount", key, `{"orderId":"o","amount":-5,"currency":"KRW"}`},
		{"zero amount", key, `{"orderId":"o","amount":0,"currency":"KRW"}`},
		{"fractional amount", key, `{"orderId":"o","amount":1.5,"currency":"KRW"}`},
		{"amount overflows int64", key, `{"orderId":"o","amount":9223372036854775808,"currency":"KRW"}`},
		{"amount as string", key, `{"orderId":"o","amount":"100","currency":"KRW"}`},
		{"missing orderId", key, `{"amount":1,"currency":"KRW"}`},
		{"orderId too long", key, `{"orderId":"` + strings.Repeat("o", 201) + `","amount":1,"currency":"KRW"}`},
		{"orderId control char", key, `{"orderId":"a\u0000b","amount":1,"currency":"KRW"}`},
		{"missing currency", key, `{"orderId":"o","amount":1}`},
		{"lower-case currency", key, `{"orderId":"o","amount":1,"currency":"krw"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.mustDo(t, http.MethodPost, "/v1/payments", tt.body, tt.header)
			if r.status != http.StatusBadRequest {
				t.Fatalf("status = %d %s, want 400", r.status, r.body)
			}
			if p := r.problem(t); p.Detail == "" {
				t.Fatalf("problem %+v has no detail", p)
			}
		})
	}
	if s := e.stats(t); s.Total != 0 {
		t.Fatalf("stats = %+v, want no charges", s)
	}
	if got := e.metrics.requestsFor(outcomeBadRequest); got != uint64(len(tests)) {
		t.Fatalf("bad_request outcomes = %d, want %d", got, len(tests))
	}
}

func TestOversizedBodyIs413(t *testing.T) {
	e := newTestEnv(t, GatewayOptions{})
	body := `{"orderId":"` + strings.Repeat("o", maxBodyBytes) + `","amount":1,"currency":"KRW"}`
	r := e.pay(t, "big", body)
	if r.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("status = %d %s, want 413", r.status, r.body)
	}
	r.problem(t)
}

func TestOutageAnswers503ImmediatelyThenRecovers(t *testing.T) {
	// The gate stays closed while in outage: an outage answer that waited
	// for simulated latency would hang here.
	clock := newGateClock()
	e := newTestEnv(t, GatewayOptions{Clock: clock})
	e.setMode(t, `{"mode":"outage"}`)

	r := e.pay(t, "k", validBody)
	if r.status != http.StatusServiceUnavailable {
		t.Fatalf("outage payment = %d %s, want 503", r.status, r.body)
	}
	r.problem(t)
	if r.header.Get("Retry-After") == "" {
		t.Fatal("503 without Retry-After")
	}
	if c := e.chargesFor(t, "k"); c != 0 {
		t.Fatalf("charges after outage = %d, want 0", c)
	}

	e.setMode(t, `{"mode":"normal"}`)
	clock.open()
	if r := e.pay(t, "k", validBody); r.status != http.StatusCreated {
		t.Fatalf("after outage = %d %s, want 201", r.status, r.body)
	}
	if c := e.chargesFor(t, "k"); c != 1 {
		t.Fatalf("charges = %d, want 1", c)
	}
}

func TestSlowModeClientTimeoutRecordsNoCharge(t *testing.T) {
	e := newTestEnv(t, GatewayOptions{})
	e.setMode(t, `{"mode":"slow","slowMs":5000}`)

	client := &http.Client{Timeout: 200 * time.Millisecond}
	_, err := e.do(t, client, http.MethodPost, "/v1/payments", validBody, map[string]string{"Idempotency-Key": "slow-key"})
	if err == nil {
		t.Fatal("slow payment answered within the client timeout")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		var ne interface{ Timeout() bool }
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("client error = %v, want a timeout", err)
		}
	}
	// The server notices the client left and abandons the charge.
	eventually(t, "the server records the timeout", func() bool {
		return e.metrics.requestsFor(outcomeTimeout) == 1 && e.gw.InFlight() == 0
	})
	if c := e.chargesFor(t, "slow-key"); c != 0 {
		t.Fatalf("charges after client timeout = %d, want 0", c)
	}

	e.setMode(t, `{"mode":"normal"}`)
	r := e.pay(t, "slow-key", validBody)
	if r.status != http.StatusCreated {
		t.Fatalf("retry in normal mode = %d %s, want 201", r.status, r.body)
	}
	if r := e.pay(t, "slow-key", validBody); r.status != http.StatusOK {
		t.Fatalf("second retry = %d %s, want 200", r.status, r.body)
	}
	if c := e.chargesFor(t, "slow-key"); c != 1 {
		t.Fatalf("charges = %d, want exactly 1", c)
	}
}

func TestFailureRateOneAnswers502AndChargesNothing(t *testing.T) {
	e := newTestEnv(t, GatewayOptions{FailureRate: 1})
	for i := range 3 {
		r := e.pay(t, "fail-key", validBody)
		if r.status != http.StatusBadGateway {
			t.Fatalf("attempt %d = %d %s, want 502", i, r.status, r.body)
		}
		r.problem(t)
	}
	if c := e.chargesFor(t, "fail-key"); c != 0 {
		t.Fatalf("charges = %d, want 0", c)
	}
	if s := e.stats(t); s != (chargeStats{}) {
		t.Fatalf("stats = %+v, want zero", s)
	}
	if got := e.metrics.requestsFor(outcomeFailed); got != 3 {
		t.Fatalf("failed outcomes = %d, want 3", got)
	}
}

func TestRetriesAfterFailuresCaptureOnce(t *testing.T) {
	e := newTestEnv(t, GatewayOptions{FailureRate: 0.5, Rand: rand.New(rand.NewPCG(7, 7))})
	failures := 0
	for {
		r := e.pay(t, "flaky", validBody)
		if r.status == http.StatusCreated {
			break
		}
		if r.status != http.StatusBadGateway {
			t.Fatalf("status = %d %s, want 201 or 502", r.status, r.body)
		}
		if c := e.chargesFor(t, "flaky"); c != 0 {
			t.Fatalf("charges after a 502 = %d, want 0", c)
		}
		if failures++; failures > 100 {
			t.Fatal("no success in 100 tries at failure rate 0.5")
		}
	}
	// A captured key is replayed, never failed or charged again.
	for range 10 {
		if r := e.pay(t, "flaky", validBody); r.status != http.StatusOK {
			t.Fatalf("replay = %d %s, want 200", r.status, r.body)
		}
	}
	if c := e.chargesFor(t, "flaky"); c != 1 {
		t.Fatalf("charges = %d, want 1", c)
	}
}

func TestAdminRequiresToken(t *testing.T) {
	e := newTestEnv(t, GatewayOptions{})
	routes := []struct{ method, path, body string }{
		{http.MethodGet, "/v1/admin/mode", ""},
		{http.MethodPut, "/v1/admin/mode", `{"mode":"outage"}`},
		{http.MethodGet, "/v1/admin/charges", ""},
		{http.MethodGet, "/v1/admin/charges?key=k", ""},
		{http.MethodPost, "/v1/admin/reset", ""},
	}
	auths := map[string]map[string]string{
		"no header":      nil,
		"wrong token":    {"Authorization": "Bearer nope"},
		"token prefix":   {"Authorization": "Bearer " + testToken[:4]},
		"token suffixed": {"Authorization": "Bearer " + testToken + "x"},
		"basic scheme":   {"Authorization": "Basic " + testToken},
		"bare token":     {"Authorization": testToken},
	}
	for _, rt := range routes {
		for name, h := range auths {
			t.Run(rt.method+" "+rt.path+"/"+name, func(t *testing.T) {
				r := e.mustDo(t, rt.method, rt.path, rt.body, h)
				if r.status != http.StatusUnauthorized {
					t.Fatalf("status = %d %s, want 401", r.status, r.body)
				}
				r.problem(t)
				if r.header.Get("WWW-Authenticate") == "" {
					t.Fatal("401 without WWW-Authenticate")
				}
			})
		}
	}
	if m := e.gw.Mode(); m.Mode != ModeNormal {
		t.Fatalf("mode changed without a token: %v", m.Mode)
	}
	// The right token works, and the scheme is case-insensitive.
	r := e.mustDo(t, http.MethodGet, "/v1/admin/mode", "", map[string]string{"Authorization": "bearer " + testToken})
	if r.status != http.StatusOK {
		t.Fatalf("with token = %d %s, want 200", r.status, r.body)
	}
}

func TestAdminMode(t *testing.T) {
	e := newTestEnv(t, GatewayOptions{SlowLatency: 5 * time.Second})
	if r := e.admin(t, http.MethodGet, "/v1/admin/mode", ""); strings.TrimSpace(string(r.body)) != `{"mode":"normal","slowMs":5000}` {
		t.Fatalf("GET mode = %s", r.body)
	}
	r := e.admin(t, http.MethodPut, "/v1/admin/mode", `{"mode":"slow","slowMs":2500}`)
	if strings.TrimSpace(string(r.body)) != `{"mode":"slow","slowMs":2500}` {
		t.Fatalf("PUT mode = %s", r.body)
	}
	if r := e.admin(t, http.MethodGet, "/v1/admin/mode", ""); strings.TrimSpace(string(r.body)) != `{"mode":"slow","slowMs":2500}` {
		t.Fatalf("GET mode after PUT = %s", r.body)
	}
	auth := map[string]string{"Authorization": "Bearer " + testToken}
	if r := e.admin(t, http.MethodPut, "/v1/admin/mode", `{"mode":"capture-hang"}`); !strings.Contains(string(r.body), `"mode":"capture-hang"`) {
		t.Fatalf("PUT capture-hang = %s", r.body)
	}
	for _, body := range []string{`{"mode":"fast"}`, `{}`, `{"mode":"slow","slowMs":-1}`, `{"mode":"slow","slowMs":600001}`, `{"mode":"normal","x":1}`, `nope`} {
		r := e.mustDo(t, http.MethodPut, "/v1/admin/mode", body, auth)
		if r.status != http.StatusBadRequest {
			t.Fatalf("PUT %s = %d %s, want 400", body, r.status, r.body)
		}
		r.problem(t)
	}
}

func TestAdminResetClearsEverything(t *testing.T) {
	e := newTestEnv(t, GatewayOptions{})
	e.pay(t, "a", validBody)
	e.pay(t, "b", validBody)
	e.setMode(t, `{"mode":"outage","slowMs":10}`)
	r := e.admin(t, http.MethodPost, "/v1/admin/reset", "")
	if r.status != http.StatusNoContent {
		t.Fatalf("reset = %d, want 204", r.status)
	}
	if s := e.stats(t); s != (chargeStats{}) {
		t.Fatalf("stats after reset = %+v", s)
	}
	if m := e.gw.Mode(); m.Mode != ModeNormal || m.Slow != 5*time.Second {
		t.Fatalf("mode after reset = %+v, want normal with the configured slow latency", m)
	}
	// The key is free again and the same body is a new charge.
	if r := e.pay(t, "a", validBody); r.status != http.StatusCreated {
		t.Fatalf("after reset = %d %s, want 201", r.status, r.body)
	}
}

func TestAdminChargesRejectsInvalidKey(t *testing.T) {
	e := newTestEnv(t, GatewayOptions{})
	r := e.mustDo(t, http.MethodGet, "/v1/admin/charges?key=", "", map[string]string{"Authorization": "Bearer " + testToken})
	if r.status != http.StatusBadRequest {
		t.Fatalf("status = %d, want 400", r.status)
	}
	r.problem(t)
}

func TestRoutingErrorsAreProblems(t *testing.T) {
	e := newTestEnv(t, GatewayOptions{})
	r := e.mustDo(t, http.MethodGet, "/v1/payments", "", nil)
	if r.status != http.StatusMethodNotAllowed || r.header.Get("Allow") != "POST" {
		t.Fatalf("GET /v1/payments = %d Allow=%q", r.status, r.header.Get("Allow"))
	}
	r.problem(t)
	r = e.mustDo(t, http.MethodGet, "/nope", "", nil)
	if r.status != http.StatusNotFound {
		t.Fatalf("GET /nope = %d", r.status)
	}
	r.problem(t)
}

// /healthz and /readyz, as on every usher service (pgsim depends on
// nothing: ready as soon as it runs).
func TestHealthzAndReadyz(t *testing.T) {
	e := newTestEnv(t, GatewayOptions{})
	for _, path := range []string{"/healthz", "/readyz"} {
		r := e.mustDo(t, http.MethodGet, path, "", nil)
		if r.status != http.StatusOK || string(r.body) != "ok" {
			t.Fatalf("%s = %d %q", path, r.status, r.body)
		}
	}
}

func TestMetricsExposeOutcomesAndLatency(t *testing.T) {
	e := newTestEnv(t, GatewayOptions{})
	e.pay(t, "m", validBody)
	e.pay(t, "m", validBody)
	e.pay(t, "m", `{"orderId":"other","amount":1,"currency":"KRW"}`)
	e.pay(t, "", validBody)

	r := e.mustDo(t, http.MethodGet, "/metrics", "", nil)
	if r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") {
		t.Fatalf("metrics = %d %q", r.status, r.header.Get("Content-Type"))
	}
	text := string(r.body)
	for _, want := range []string{
		`usher_pgsim_requests_total{outcome="captured"} 1`,
		`usher_pgsim_requests_total{outcome="replayed"} 1`,
		`usher_pgsim_requests_total{outcome="conflict"} 1`,
		`usher_pgsim_requests_total{outcome="bad_request"} 1`,
		`usher_pgsim_requests_total{outcome="failed"} 0`,
		`usher_pgsim_requests_total{outcome="outage"} 0`,
		`usher_pgsim_requests_total{outcome="timeout"} 0`,
		`# TYPE usher_pgsim_request_duration_seconds histogram`,
		`usher_pgsim_request_duration_seconds_bucket{le="+Inf"} 4`,
		`usher_pgsim_request_duration_seconds_count 4`,
		`usher_pgsim_captured_charges 1`,
		`usher_pgsim_mode{mode="normal"} 1`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("metrics lack %q", want)
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		if !strings.HasPrefix(line, "# ") && !strings.HasPrefix(line, "usher_pgsim_") {
			t.Errorf("metric %q lacks the usher_pgsim_ prefix", line)
		}
	}
}

// Each key is charged at most once even when many keys race.
func TestManyKeysConcurrently(t *testing.T) {
	e := newTestEnv(t, GatewayOptions{Clock: instantClock{}})
	const keys, perKey = 20, 5
	var wg sync.WaitGroup
	for k := range keys {
		for range perKey {
			wg.Go(func() {
				r, err := e.do(t, nil, http.MethodPost, "/v1/payments", validBody,
					map[string]string{"Idempotency-Key": fmt.Sprintf("key-%d", k)})
				if err != nil || (r.status != http.StatusCreated && r.status != http.StatusOK) {
					t.Errorf("key-%d: %v %d %s", k, err, r.status, r.body)
				}
			})
		}
	}
	wg.Wait()
	if got, want := e.stats(t), (chargeStats{Total: keys, Keys: keys, MaxPerKey: 1}); got != want {
		t.Fatalf("stats = %+v, want %+v", got, want)
	}
}

// A lookup answers what the ledger holds under the key, in the shape the
// order worker reads; an unknown key is a 404 problem.
func TestLookupAnswersWhatWasCaptured(t *testing.T) {
	e := newTestEnv(t, GatewayOptions{})
	paid := e.pay(t, "key-1", validBody).payment(t)
	e.pay(t, "key/2", validBody)
	e.pay(t, "key-3", validBody)
	e.void(t, "key-3")

	tests := []struct {
		name, key  string
		wantStatus int
		want       string // the status field of a 200
	}{
		{"captured", "key-1", http.StatusOK, "captured"},
		{"a key with a slash, escaped", "key/2", http.StatusOK, "captured"},
		{"voided", "key-3", http.StatusOK, "voided"},
		{"unknown", "key-4", http.StatusNotFound, ""},
		{"key too long", strings.Repeat("k", maxKeyLen+1), http.StatusBadRequest, ""},
		{"key not printable ASCII", "clé", http.StatusBadRequest, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.lookup(t, tt.key)
			if r.status != tt.wantStatus {
				t.Fatalf("GET /v1/payments/%s = %d %s, want %d", tt.key, r.status, r.body, tt.wantStatus)
			}
			if tt.wantStatus != http.StatusOK {
				r.problem(t)
				return
			}
			p := r.record(t)
			if p.IdempotencyKey != tt.key || p.OrderID != "ord-1" || p.Amount != 15000 || p.Currency != "KRW" ||
				p.Status != tt.want || !strings.HasPrefix(p.PaymentID, "pay_") {
				t.Fatalf("record = %+v, want key %q, ord-1, 15000 KRW, %s", p, tt.key, tt.want)
			}
		})
	}
	if p := e.lookup(t, "key-1").record(t); p.PaymentID != paid.PaymentID {
		t.Fatalf("lookup paymentId = %s, want the charge's %s", p.PaymentID, paid.PaymentID)
	}
	// Lookups are reads: they capture nothing.
	if s := e.stats(t); s.Total != 3 {
		t.Fatalf("stats = %+v, want the 3 charges only", s)
	}
}

// Over HTTP, a lookup of a key whose charge is in flight waits for it and
// answers the capture, not 404.
func TestLookupOverHTTPWaitsForTheChargeInFlight(t *testing.T) {
	clock := newGateClock()
	e := newTestEnv(t, GatewayOptions{Clock: clock})
	charged := make(chan response, 1)
	go func() {
		r, _ := e.do(t, nil, http.MethodPost, "/v1/payments", validBody, map[string]string{"Idempotency-Key": "k"})
		charged <- r
	}()
	eventually(t, "the charge is in flight", func() bool { return e.gw.InFlight() == 1 })
	looked := make(chan response, 1)
	go func() { looked <- e.lookup(t, "k") }()
	select {
	case r := <-looked:
		t.Fatalf("lookup answered %d %s while the charge was in flight", r.status, r.body)
	case <-time.After(50 * time.Millisecond):
	}
	clock.open()
	if got, want := (<-looked).record(t).PaymentID, (<-charged).payment(t).PaymentID; got != want {
		t.Fatalf("lookup paymentId = %s, want %s", got, want)
	}
}

// Voiding gives the money back exactly once: a second void answers the same
// body, the key can never be charged again (409), and the ledger says so.
func TestVoidIsIdempotentAndAVoidedKeyNeverCapturesAgain(t *testing.T) {
	e := newTestEnv(t, GatewayOptions{})
	if r := e.void(t, "k"); r.status != http.StatusNotFound {
		t.Fatalf("void of an unknown key = %d %s, want 404", r.status, r.body)
	} else {
		r.problem(t)
	}
	paid := e.pay(t, "k", validBody).payment(t)

	first := e.void(t, "k")
	p := first.record(t)
	if p.PaymentID != paid.PaymentID || p.Status != "voided" || p.IdempotencyKey != "k" {
		t.Fatalf("void = %+v, want payment %s voided", p, paid.PaymentID)
	}
	if again := e.void(t, "k"); again.status != http.StatusOK || string(again.body) != string(first.body) {
		t.Fatalf("second void = %d %s, want 200 %s", again.status, again.body, first.body)
	}
	r := e.pay(t, "k", validBody)
	if r.status != http.StatusConflict {
		t.Fatalf("charge after void = %d %s, want 409", r.status, r.body)
	}
	if pr := r.problem(t); !strings.HasSuffix(pr.Type, "/payment-voided") {
		t.Fatalf("problem type = %s, want payment-voided", pr.Type)
	}
	if got := e.lookup(t, "k").record(t); got.Status != "voided" {
		t.Fatalf("lookup after void = %+v, want voided", got)
	}
	if c := e.chargesFor(t, "k"); c != 1 {
		t.Fatalf("charges = %d, want the one capture", c)
	}
	if got, want := e.stats(t), (chargeStats{Total: 1, Keys: 1, MaxPerKey: 1, Voided: 1}); got != want {
		t.Fatalf("stats = %+v, want %+v", got, want)
	}
}

// Capture-hang: the payment is captured and recorded, the answer never
// comes (the client times out), a retry with the same key captures nothing
// new and hangs too, and a lookup answers the capture.
func TestCaptureHangCapturesButNeverAnswers(t *testing.T) {
	e := newTestEnv(t, GatewayOptions{})
	e.setMode(t, `{"mode":"capture-hang"}`)
	client := &http.Client{Timeout: 200 * time.Millisecond}
	for try := range 2 {
		r, err := e.do(t, client, http.MethodPost, "/v1/payments", validBody, map[string]string{"Idempotency-Key": "hang"})
		if err == nil {
			t.Fatalf("try %d answered %d %s, want no answer", try, r.status, r.body)
		}
	}
	// A client gives up after 200 ms whether or not the server has taken
	// its request yet (under a loaded machine's -race it may not have):
	// both requests are judged once the server has handled them.
	eventually(t, "both requests counted unanswered", func() bool { return e.metrics.requestsFor(outcomeUnanswered) >= 2 })
	if got := e.metrics.requestsFor(outcomeUnanswered); got != 2 {
		t.Fatalf("unanswered outcomes = %d, want 2", got)
	}
	if c := e.chargesFor(t, "hang"); c != 1 {
		t.Fatalf("charges = %d, want 1", c)
	}
	p := e.lookup(t, "hang").record(t)
	if p.Status != "captured" || !strings.HasPrefix(p.PaymentID, "pay_") {
		t.Fatalf("lookup = %+v, want the capture", p)
	}
	eventually(t, "the held requests end with their clients", func() bool { return e.gw.InFlight() == 0 })

	e.setMode(t, `{"mode":"normal"}`)
	r := e.pay(t, "hang", validBody)
	if r.status != http.StatusOK || r.payment(t).PaymentID != p.PaymentID {
		t.Fatalf("replay in normal mode = %d %s, want 200 with %s", r.status, r.body, p.PaymentID)
	}
}

// In an outage the whole gateway is down: lookups and voids answer 503 too.
func TestOutageAnswersLookupsAndVoidsWith503(t *testing.T) {
	e := newTestEnv(t, GatewayOptions{})
	e.pay(t, "k", validBody)
	e.setMode(t, `{"mode":"outage"}`)
	for _, r := range []response{e.lookup(t, "k"), e.void(t, "k")} {
		if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
			t.Fatalf("= %d %s (Retry-After %q), want 503 with Retry-After", r.status, r.body, r.header.Get("Retry-After"))
		}
		r.problem(t)
	}
	e.setMode(t, `{"mode":"normal"}`)
	if got := e.lookup(t, "k").record(t).Status; got != "captured" {
		t.Fatalf("after the outage the payment is %q, want captured (the void did not happen)", got)
	}
}

// The admin ledger lists every charge with its status, so an auditor can
// match captures to PAID orders; the per-key view names the payment too.
func TestAdminChargesShowEachChargesStatus(t *testing.T) {
	e := newTestEnv(t, GatewayOptions{})
	b := e.pay(t, "b", validBody).payment(t)
	a := e.pay(t, "a", validBody).payment(t)
	e.void(t, "b")

	cr := e.report(t)
	if want := (chargeStats{Total: 2, Keys: 2, MaxPerKey: 1, Voided: 1}); cr.chargeStats != want {
		t.Fatalf("totals = %+v, want %+v", cr.chargeStats, want)
	}
	if len(cr.Payments) != 2 {
		t.Fatalf("payments = %+v, want 2", cr.Payments)
	}
	got0, got1 := cr.Payments[0], cr.Payments[1]
	if got0.IdempotencyKey != "a" || got0.PaymentID != a.PaymentID || got0.Status != "captured" || got0.VoidedAt != nil || got0.CapturedAt.IsZero() {
		t.Errorf("payments[0] = %+v, want a captured", got0)
	}
	if got1.IdempotencyKey != "b" || got1.PaymentID != b.PaymentID || got1.Status != "voided" || got1.VoidedAt == nil {
		t.Errorf("payments[1] = %+v, want b voided", got1)
	}

	r := e.admin(t, http.MethodGet, "/v1/admin/charges?key=b", "")
	if got, want := strings.TrimSpace(string(r.body)), `{"key":"b","charges":1,"paymentId":"`+b.PaymentID+`","status":"voided"}`; got != want {
		t.Errorf("per key = %s, want %s", got, want)
	}
	r = e.admin(t, http.MethodGet, "/v1/admin/charges?key=none", "")
	if got, want := strings.TrimSpace(string(r.body)), `{"key":"none","charges":0}`; got != want {
		t.Errorf("per key, unknown = %s, want %s", got, want)
	}
	// An empty ledger is an empty list, not null.
	e.admin(t, http.MethodPost, "/v1/admin/reset", "")
	r = e.admin(t, http.MethodGet, "/v1/admin/charges", "")
	if !strings.Contains(string(r.body), `"payments":[]`) {
		t.Errorf("empty ledger = %s, want payments []", r.body)
	}
}

func TestLedgerRoutesAnswerWrongMethodsWithProblems(t *testing.T) {
	e := newTestEnv(t, GatewayOptions{})
	for _, tt := range []struct{ method, path, allow string }{
		{http.MethodPost, "/v1/payments/k", "GET"},
		{http.MethodDelete, "/v1/payments/k", "GET"},
		{http.MethodGet, "/v1/payments/k/void", "POST"},
	} {
		r := e.mustDo(t, tt.method, tt.path, "", nil)
		if r.status != http.StatusMethodNotAllowed || r.header.Get("Allow") != tt.allow {
			t.Errorf("%s %s = %d Allow=%q, want 405 Allow=%q", tt.method, tt.path, r.status, r.header.Get("Allow"), tt.allow)
			continue
		}
		r.problem(t)
	}
}

func TestMetricsExposeLookupsVoidsAndCaptureHang(t *testing.T) {
	e := newTestEnv(t, GatewayOptions{})
	e.pay(t, "k", validBody)
	e.lookup(t, "k")
	e.lookup(t, "unknown")
	e.void(t, "k")
	e.setMode(t, `{"mode":"capture-hang"}`)
	text := string(e.mustDo(t, http.MethodGet, "/metrics", "", nil).body)
	for _, want := range []string{
		`usher_pgsim_ledger_requests_total{op="lookup",outcome="ok"} 1`,
		`usher_pgsim_ledger_requests_total{op="lookup",outcome="not_found"} 1`,
		`usher_pgsim_ledger_requests_total{op="void",outcome="ok"} 1`,
		`usher_pgsim_requests_total{outcome="unanswered"} 0`,
		`usher_pgsim_voided_charges 1`,
		`usher_pgsim_mode{mode="capture-hang"} 1`,
		`usher_pgsim_mode{mode="normal"} 0`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// Over HTTP a declined charge is the gateway's own 402 problem
// (payment-declined), and a key in use its own 409 (idempotency-key-in-use):
// answers a client can tell from a proxy's.
func TestDeclinesAndKeysInUseAreTheGatewaysOwnProblems(t *testing.T) {
	e := newTestEnv(t, GatewayOptions{})
	e.setMode(t, `{"mode":"decline"}`)
	r := e.pay(t, "k", validBody)
	if p := r.problem(t); r.status != http.StatusPaymentRequired || !strings.HasSuffix(p.Type, "/payment-declined") {
		t.Fatalf("declined = %d %s, want 402 payment-declined", r.status, r.body)
	}
	if n := e.chargesFor(t, "k"); n != 0 {
		t.Fatalf("charges = %d, want 0", n)
	}
	if got := e.metrics.requestsFor(outcomeDeclined); got != 1 {
		t.Fatalf("declined outcomes = %d, want 1", got)
	}

	clock := newGateClock()
	c := newTestEnv(t, GatewayOptions{Clock: clock, KeyInUse: KeyInUseConflict})
	first := make(chan response, 1)
	go func() { first <- c.pay(t, "k", validBody) }()
	eventually(t, "the first charge is in flight", func() bool { return c.gw.InFlight() == 1 })
	r = c.pay(t, "k", validBody)
	if p := r.problem(t); r.status != http.StatusConflict || !strings.HasSuffix(p.Type, "/idempotency-key-in-use") {
		t.Fatalf("key in use = %d %s, want 409 idempotency-key-in-use", r.status, r.body)
	}
	clock.open()
	if r := <-first; r.status != http.StatusCreated {
		t.Fatalf("first = %d %s, want 201", r.status, r.body)
	}
}
