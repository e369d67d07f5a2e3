package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/nats-io/nats.go/jetstream"

	"usher/gateway/httpapi"
	"usher/internal/bus"
	"usher/internal/catalog"
	"usher/internal/event"
	"usher/internal/ratelimit"
	"usher/internal/testenv"
	"usher/internal/ticket"
	"usher/internal/token"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/roles"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Stop()
	os.Exit(code)
}

// harness is a gateway on a real JetStream server and a real Redis.
type harness struct {
	t     testing.TB
	gw    *gateway
	app   *fiber.App
	js    jetstream.JetStream
	line  *roles.All
	queue string
}

func newHarness(t testing.TB) *harness {
	t.Helper()
	return newHarnessOn(t, testenv.NATS(t))
}

// newHarnessOn is a harness on the NATS server at url, for a test that
// stops it.
func newHarnessOn(t testing.TB, url string) *harness {
	t.Helper()
	ctx := context.Background()
	nc, js, err := bus.Open(ctx, bus.Settings{URLs: []string{url}, Replicas: 1}, "gateway-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	queues, err := catalog.Open(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	go queues.Run(wctx)
	dir := t.TempDir()
	keys, err := token.LoadKeyring(filepath.Join(dir, "signing.key"), nil)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ticket.LoadOrCreateSigner(filepath.Join(dir, "ticket.secret"))
	if err != nil {
		t.Fatal(err)
	}
	line := roles.New(testenv.Redis(t))
	line.EnableBatching()
	go line.RunBatches(wctx, 4)
	epoch, err := bus.StreamID(ctx, js, event.StreamEntries)
	if err != nil {
		t.Fatal(err)
	}
	g := &gateway{
		log:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		queues:     queues,
		line:       line.Client,
		events:     js,
		tickets:    signer,
		keys:       keys,
		adminToken: []byte("secret-admin"),
		limiter:    ratelimit.New(line),
		now:        time.Now,
		epoch:      func() string { return epoch },
		orderHold:  90 * time.Second,
		jitter:     lockedJitter(rand.New(rand.NewPCG(1, 2))),
		ready:      func(context.Context) error { return nil },
	}
	// A test's clock has no sync error: READY at the clock a test sets.
	g.earliest = func() time.Time { return g.now() }
	h := &harness{t: t, gw: g, app: g.app(), js: js, line: line, queue: testenv.Name(t)}
	// Every request of an in-memory test comes from one address: the
	// harness queue has its rate limits off, and the tests of the limits
	// turn them on.
	h.putQueue(h.queue, `{"targetActive": 5, "rateLimit": `+limitsOff+`}`, 201)
	return h
}

// rebuild builds the gateway's rooms anew from h.gw, as a test has
// changed it.
func (h *harness) rebuild() {
	h.t.Helper()
	h.app = h.gw.app()
}

// limitsOff is a queue's rateLimit with every limit off.
const limitsOff = `{"perIpPerSecond": 0, "perUserPerSecond": 0, "ordersPerSecond": 0}`

// response is a decoded answer.
type response struct {
	status int
	header http.Header
	body   map[string]any
	raw    []byte
}

func (r response) str(k string) string { s, _ := r.body[k].(string); return s }
func (r response) num(k string) int64  { f, _ := r.body[k].(float64); return int64(f) }

func (h *harness) do(method, path, body string, header map[string]string) response {
	h.t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := h.app.Test(req, 10_000)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	h.checkExchange(h.app, req, body, res, raw) // against the API contract (contract_test.go)
	r := response{status: res.StatusCode, header: res.Header, raw: raw}
	_ = json.Unmarshal(raw, &r.body)
	return r
}

func (h *harness) join(user string) response {
	h.t.Helper()
	return h.do("POST", "/v1/queues/"+h.queue+"/tickets", "", map[string]string{"X-User-Id": user})
}

func (h *harness) poll(tkt string) response {
	h.t.Helper()
	return h.do("GET", "/v1/queues/"+h.queue+"/tickets/"+tkt, "", nil)
}

func (h *harness) putQueue(q, body string, want int) response {
	h.t.Helper()
	r := h.do("PUT", "/v1/admin/queues/"+q, body, map[string]string{"Authorization": "Bearer secret-admin"})
	if r.status != want {
		h.t.Fatalf("PUT queue %s = %d %s, want %d", q, r.status, r.raw, want)
	}
	return r
}

// recordDraw records a draw of the harness's queue in the catalog, as the
// admitter does (draw sets what it drew), and waits until the gateway's
// catalog has it.
func (h *harness) recordDraw(draw func(*catalog.Lottery)) {
	h.t.Helper()
	if _, _, err := h.gw.queues.Update(context.Background(), h.queue, func(c *catalog.Config) bool {
		l := *c.Lottery
		l.Drawn = true
		draw(&l)
		c.Lottery = &l
		return true
	}); err != nil {
		h.t.Fatal(err)
	}
	testenv.Eventually(h.t, 5*time.Second, func() error {
		if cfg, _ := h.gw.queues.Get(h.queue); !cfg.Drawn() {
			return errors.New("the gateway has not seen the draw")
		}
		return nil
	}, "the draw in the gateway's catalog")
}

// admit runs one admission tick as the admitter would, once its follower
// has applied every join (the gateway put them in line already), and waits
// until every shopper it admitted is READY (readyAt spreads over one tick).
func (h *harness) admit() waitqueue.TickResult {
	h.t.Helper()
	cfg, _ := h.gw.queues.Get(h.queue)
	testenv.Applied(h.t, h.line, h.queue, h.gw.epoch(), 1<<40)
	tickLen := time.Duration(cfg.TickMs) * time.Millisecond
	target := cfg.TargetActive
	if cfg.QueueMode() == catalog.ModePassthrough {
		target = 1 << 30 // the admitter's passthroughTarget: no cap
	}
	r := testenv.Tick(h.t, h.line, h.queue, waitqueue.Tick{
		Epoch: h.gw.epoch(), TargetActive: target, MaxAdmitPerTick: cfg.MaxAdmitPerTick,
		TickLength: tickLen, TokenTTL: time.Duration(cfg.TokenTTLSeconds) * time.Second,
		Paused: cfg.State != catalog.StateOpen,
	})
	time.Sleep(tickLen)
	return r
}

func isProblem(r response) bool {
	return r.header.Get("Content-Type") == "application/problem+json" &&
		r.num("status") == int64(r.status) && r.str("title") != "" && r.str("type") != ""
}

func pretty(b []byte) string {
	var out bytes.Buffer
	if json.Indent(&out, b, "", " ") != nil {
		return string(b)
	}
	return out.String()
}

// serve runs the app on a loopback socket until the test ends and returns
// its base URL.
func (h *harness) serve() string {
	h.t.Helper()
	base, serve := h.listen()
	serve()
	return base
}

// listen opens a loopback socket and returns its base URL, and serve,
// which runs the app on it (as the test has built it by then) until the
// test ends.
func (h *harness) listen() (base string, serve func()) {
	h.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		h.t.Fatal(err)
	}
	return "http://" + ln.Addr().String(), func() {
		h.t.Helper()
		app := h.app
		checkServed(h.t, app, h.serviceOf(app)) // against the API contract
		go httpapi.Listen(app, ln)
		h.t.Cleanup(func() { app.Shutdown() })
	}
}

// with returns the harness reporting to t (a fuzz target must not use the
// F it was built with).
func (h *harness) with(t testing.TB) *harness {
	c := *h
	c.t = t
	return &c
}

func mustClientIPs(t testing.TB, proxies []string, header string) httpapi.ClientIPs {
	t.Helper()
	ips, err := httpapi.ParseClientIPs(proxies, header)
	if err != nil {
		t.Fatal(err)
	}
	return ips
}
