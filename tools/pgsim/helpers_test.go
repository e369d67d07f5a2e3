package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

const testToken = "test-admin-token"

// instantClock never waits: every simulated latency is zero.
type instantClock struct{}

func (instantClock) Now() time.Time { return time.Now() }

func (instantClock) Sleep(ctx context.Context, _ time.Duration) error { return ctx.Err() }

// gateClock makes every simulated latency last until the test opens the
// gate (or the request's context ends), so tests control ordering without
// depending on timing.
type gateClock struct {
	gate chan struct{}
	once sync.Once
}

func newGateClock() *gateClock { return &gateClock{gate: make(chan struct{})} }

func (c *gateClock) Now() time.Time { return time.Now() }

func (c *gateClock) Sleep(ctx context.Context, _ time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case <-c.gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *gateClock) open() { c.once.Do(func() { close(c.gate) }) }

// testEnv is a gateway behind an httptest server.
type testEnv struct {
	gw      *Gateway
	metrics *Metrics
	srv     *httptest.Server
}

// newTestEnv starts a server. Unset options default to a 1 ms constant
// latency on the real clock and a fixed seed.
func newTestEnv(t *testing.T, opts GatewayOptions) *testEnv {
	t.Helper()
	if opts.Clock == nil {
		opts.Clock = realClock{}
		if opts.LatencyMean == 0 {
			opts.LatencyMean = time.Millisecond
		}
	}
	if opts.Rand == nil {
		opts.Rand = rand.New(rand.NewPCG(42, 42))
	}
	if opts.SlowLatency == 0 {
		opts.SlowLatency = 5 * time.Second
	}
	gw := NewGateway(opts)
	m := NewMetrics()
	logger := slog.New(slog.NewJSONHandler(io.Discard, nil))
	srv := httptest.NewServer(newHandler(gw, m, opts.Clock, testToken, logger, nil))
	t.Cleanup(srv.Close)
	return &testEnv{gw: gw, metrics: m, srv: srv}
}

// response is a fully read HTTP response.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) problem(t *testing.T) problem {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != problemContentType {
		t.Fatalf("Content-Type = %q, want %q (body %s)", ct, problemContentType, r.body)
	}
	var p problem
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("problem body %s: %v", r.body, err)
	}
	if p.Status != r.status || p.Type == "" || p.Title == "" {
		t.Fatalf("problem %+v does not describe status %d", p, r.status)
	}
	return p
}

func (r response) payment(t *testing.T) paymentResponse {
	t.Helper()
	var p paymentResponse
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("payment body %s: %v", r.body, err)
	}
	return p
}

// do sends a request with the given headers ("" values are sent as empty
// headers) and reads the whole response.
func (e *testEnv) do(t *testing.T, client *http.Client, method, path, body string, header map[string]string) (response, error) {
	t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	if client == nil {
		client = e.srv.Client()
	}
	resp, err := client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, err
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

func (e *testEnv) mustDo(t *testing.T, method, path, body string, header map[string]string) response {
	t.Helper()
	r, err := e.do(t, nil, method, path, body, header)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

func (e *testEnv) pay(t *testing.T, key, body string) response {
	t.Helper()
	return e.mustDo(t, http.MethodPost, "/v1/payments", body, map[string]string{"Idempotency-Key": key})
}

func (e *testEnv) admin(t *testing.T, method, path, body string) response {
	t.Helper()
	r := e.mustDo(t, method, path, body, map[string]string{"Authorization": "Bearer " + testToken})
	if r.status >= 300 {
		t.Fatalf("%s %s = %d %s", method, path, r.status, r.body)
	}
	return r
}

func (e *testEnv) setMode(t *testing.T, body string) {
	t.Helper()
	e.admin(t, http.MethodPut, "/v1/admin/mode", body)
}

func (e *testEnv) chargesFor(t *testing.T, key string) int {
	t.Helper()
	r := e.admin(t, http.MethodGet, "/v1/admin/charges?key="+key, "")
	var kc keyCharges
	if err := json.Unmarshal(r.body, &kc); err != nil {
		t.Fatal(err)
	}
	if kc.Key != key {
		t.Fatalf("charges answered for key %q, want %q", kc.Key, key)
	}
	return kc.Charges
}

func (e *testEnv) stats(t *testing.T) chargeStats {
	t.Helper()
	r := e.admin(t, http.MethodGet, "/v1/admin/charges", "")
	var cs chargeStats
	if err := json.Unmarshal(r.body, &cs); err != nil {
		t.Fatal(err)
	}
	return cs
}

// eventually polls cond until it holds, failing the test after a deadline.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

const validBody = `{"orderId":"ord-1","amount":15000,"currency":"KRW"}`

// lookup and void call the ledger endpoints for key (path-escaped).
func (e *testEnv) lookup(t *testing.T, key string) response {
	t.Helper()
	return e.mustDo(t, http.MethodGet, "/v1/payments/"+url.PathEscape(key), "", nil)
}

func (e *testEnv) void(t *testing.T, key string) response {
	t.Helper()
	return e.mustDo(t, http.MethodPost, "/v1/payments/"+url.PathEscape(key)+"/void", "", nil)
}

func (r response) record(t *testing.T) paymentRecord {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("status = %d %s, want 200", r.status, r.body)
	}
	var p paymentRecord
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("payment record %s: %v", r.body, err)
	}
	return p
}

// report is the whole of GET /v1/admin/charges.
func (e *testEnv) report(t *testing.T) chargeReport {
	t.Helper()
	r := e.admin(t, http.MethodGet, "/v1/admin/charges", "")
	var cr chargeReport
	if err := json.Unmarshal(r.body, &cr); err != nil {
		t.Fatal(err)
	}
	return cr
}
