package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"usher/gateway/admin"
	"usher/internal/catalog"
	"usher/internal/orders"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
)

// fixedBreaker is a payment breaker that is as the test sets it.
type fixedBreaker bool

func (b fixedBreaker) Open(context.Context) (bool, error) { return bool(b), nil }

func TestOpsEndpointsNeedTheAdminToken(t *testing.T) {
	h := newHarness(t)
	tests := []struct {
		name, path, auth string
		want             int
	}{
		{"stream without a token", "/v1/admin/ops/stream", "", 401},
		{"stream with a wrong token", "/v1/admin/ops/stream", "Bearer nope", 401},
		{"snapshot without a token", "/v1/admin/ops", "", 401},
		{"snapshot with the token", "/v1/admin/ops", "Bearer secret-admin", 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := h.with(t).do("GET", tt.path, "", map[string]string{"Authorization": tt.auth})
			if r.status != tt.want {
				t.Fatalf("GET %s = %d %s, want %d", tt.path, r.status, r.raw, tt.want)
			}
			if tt.want == 401 && (!isProblem(r) || r.header.Get("WWW-Authenticate") == "") {
				t.Errorf("GET %s: 401 is not problem+json with WWW-Authenticate: %v %s", tt.path, r.header, r.raw)
			}
		})
	}
}

// The page and its assets are public and carry no data: the figures come
// from the admin API.
func TestOpsPageAndAssetsAreServed(t *testing.T) {
	h := newHarness(t)
	tests := []struct {
		path, typ string
		want      int
		contains  string
	}{
		{"/ops", "text/html; charset=utf-8", 200, `/ops/static/ops.js`},
		{"/ops/static/ops.js", "text/javascript; charset=utf-8", 200, "/v1/admin/ops/stream"},
		{"/ops/static/ops.css", "text/css; charset=utf-8", 200, "tabular-nums"},
		{"/ops/static/ops%2Ecss", "text/css; charset=utf-8", 200, "tabular-nums"},
		{"/ops/static/ops.html", "application/problem+json", 404, ""},
	}
	for _, tt := range tests {
		r := h.do("GET", tt.path, "", nil)
		if r.status != tt.want || r.header.Get("Content-Type") != tt.typ || !strings.Contains(string(r.raw), tt.contains) {
			t.Errorf("GET %s = %d %s, want %d %s containing %q", tt.path, r.status, r.header.Get("Content-Type"), tt.want, tt.typ, tt.contains)
		}
	}
	if r := h.do("GET", "/ops", "", nil); strings.Contains(string(r.raw), h.queue) {
		t.Errorf("GET /ops names a queue without a token")
	}
}

// sseEvent is one parsed Server-Sent Event.
type sseEvent struct{ id, name, data string }

// readEvents reads SSE blocks from r until n events (blocks with an event
// line) have come, and returns them with the fields before the first.
func readEvents(t *testing.T, sc *bufio.Scanner, n int) (preamble []string, events []sseEvent) {
	t.Helper()
	var cur sseEvent
	for len(events) < n && sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.name != "" {
				events = append(events, cur)
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, "id: "):
			cur.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			cur.name = line[7:]
		case strings.HasPrefix(line, "data: "):
			cur.data = line[6:]
		default:
			if len(events) == 0 && cur.name == "" {
				preamble = append(preamble, line)
			}
		}
	}
	if len(events) < n {
		t.Fatalf("stream ended after %d events (%v), want %d", len(events), sc.Err(), n)
	}
	return preamble, events
}

// The stream is text/event-stream: a retry hint, then one `queues` event
// per interval with an increasing id, each a snapshot of every queue with
// its live figures, the ETA of the last in line, the breaker and the
// order outcomes.
func TestOpsStreamSendsQueueSnapshots(t *testing.T) {
	h := newHarness(t)
	records := orders.NewRecords(testenv.Redis(t))
	h.gw.ops.breaker, h.gw.ops.outcomes = fixedBreaker(true), records
	h.gw.ops.interval = 20 * time.Millisecond
	h.rebuild()
	h.putQueue(h.queue, `{"targetActive": 1, "rateLimit": `+limitsOff+`}`, 200)
	for _, u := range []string{"ops-a", "ops-b", "ops-c"} {
		if r := h.join(u); r.status != 201 && r.status != 202 {
			t.Fatalf("join %s = %d %s", u, r.status, r.raw)
		}
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		st, _ := h.line.Stats(context.Background(), h.queue)
		return st.Waiting == 3
	}, "3 joins in line")
	h.admit()
	ctx := context.Background()
	for i, st := range []orders.Status{orders.Paid, orders.Paid, orders.Failed} {
		if err := records.CountOutcome(ctx, h.queue, strconv.Itoa(i), st); err != nil {
			t.Fatal(err)
		}
	}
	base := h.serve()

	res := operatorGet(t, base, "/v1/admin/ops/stream")
	if got, want := res.Header.Get("Content-Type"), "text/event-stream"; res.StatusCode != 200 || got != want {
		t.Fatalf("stream = %d %s, want 200 %s", res.StatusCode, got, want)
	}
	preamble, events := readEvents(t, bufio.NewScanner(res.Body), 2)
	if len(preamble) != 1 || preamble[0] != "retry: 2000" {
		t.Errorf("preamble = %q, want [retry: 2000]", preamble)
	}
	first, _ := strconv.ParseInt(events[0].id, 10, 64)
	second, _ := strconv.ParseInt(events[1].id, 10, 64)
	if events[0].name != "queues" || events[1].name != "queues" || first <= 0 || second < first {
		t.Errorf("events %q %s, %q %s: want two queues events with non-decreasing ids", events[0].name, events[0].id, events[1].name, events[1].id)
	}
	var snap struct {
		BreakerOpen bool `json:"breakerOpen"`
		Queues      []struct {
			Name            string           `json:"name"`
			State           string           `json:"state"`
			TargetActive    int              `json:"targetActive"`
			Waiting         int64            `json:"waiting"`
			Active          int64            `json:"active"`
			AdmittedTotal   int64            `json:"admittedTotal"`
			AdmitRatePerSec float64          `json:"admitRatePerSec"`
			EtaLastSeconds  *float64         `json:"etaLastSeconds"`
			Orders          map[string]int64 `json:"orders"`
		} `json:"queues"`
	}
	if err := json.Unmarshal([]byte(events[1].data), &snap); err != nil {
		t.Fatalf("event data %s: %v", events[1].data, err)
	}
	if !snap.BreakerOpen {
		t.Errorf("breakerOpen = false, want true (the breaker reads open)")
	}
	found := false
	for _, q := range snap.Queues {
		if q.Name != h.queue {
			continue
		}
		found = true
		if q.State != catalog.StateOpen || q.TargetActive != 1 || q.Waiting != 2 || q.Active != 1 || q.AdmittedTotal != 1 {
			t.Errorf("queue = %+v, want open, target 1, 2 waiting, 1 active, 1 admitted", q)
		}
		if q.AdmitRatePerSec <= 0 || q.EtaLastSeconds == nil || *q.EtaLastSeconds != float64(q.Waiting)/q.AdmitRatePerSec {
			t.Errorf("rate %v, eta %v: want a measured rate and eta = waiting / rate", q.AdmitRatePerSec, q.EtaLastSeconds)
		}
		if got, want := q.Orders, map[string]int64{"PAID": 2, "FAILED": 1}; len(got) != 2 || got["PAID"] != 2 || got["FAILED"] != 1 {
			t.Errorf("orders = %v, want %v", got, want)
		}
	}
	if !found {
		t.Errorf("snapshot lacks queue %s: %s", h.queue, events[1].data)
	}
}

// A shutdown ends open streams: fasthttp waits for connections to go idle,
// and a stream never would.
func TestOpsStreamEndsAtShutdown(t *testing.T) {
	h := newHarness(t)
	h.gw.ops.interval = 20 * time.Millisecond
	h.rebuild()
	base := h.serve()
	res := operatorGet(t, base, "/v1/admin/ops/stream")
	sc := bufio.NewScanner(res.Body)
	readEvents(t, sc, 1)
	if err := h.app.ShutdownWithTimeout(30 * time.Second); err != nil {
		t.Fatalf("shutdown with an open stream = %v, want nil", err)
	}
	for sc.Scan() {
	}
	select {
	case h.gw.ops.slots <- struct{}{}: // the stream gave its slot back
	default:
		t.Errorf("after shutdown the stream still holds a slot")
	}
}

// Dashboard streams are bounded; one more is told to poll instead.
func TestOpsStreamsAreBounded(t *testing.T) {
	h := newHarness(t)
	for range cap(h.gw.ops.slots) {
		h.gw.ops.slots <- struct{}{}
	}
	r := h.do("GET", "/v1/admin/ops/stream", "", map[string]string{"Authorization": "Bearer secret-admin"})
	if r.status != 503 || !isProblem(r) || r.str("type") == "" || r.header.Get("Retry-After") == "" {
		t.Errorf("stream %d of %d = %d %v %s, want 503 problem+json with Retry-After", cap(h.gw.ops.slots)+1, cap(h.gw.ops.slots), r.status, r.header, r.raw)
	}
}

// countedSales counts the reads of units sold that reach the database.
type countedSales struct {
	src admin.Sales
	n   atomic.Int64
}

func (c *countedSales) Sold(ctx context.Context, q string) (map[string]int64, error) {
	c.n.Add(1)
	return c.src.Sold(ctx, q)
}

// soldQueue makes the harness queue sell sku, stock-aware, with a tick
// that saw its stock, so the admin view and the dashboard show its SKUs.
func soldQueue(t *testing.T, h *harness, sku string) {
	t.Helper()
	h.putQueue(h.queue, `{"targetActive": 5, "sku": "`+sku+`", "rateLimit": `+limitsOff+`}`, 200)
	stockTick(t, h, 5, sku)
}

// stockTick runs a stock-aware tick of the harness queue (targetActive
// target) that sees 100 units of sku.
func stockTick(t *testing.T, h *harness, target int, sku string) {
	t.Helper()
	if err := h.line.SetStock(context.Background(), h.queue, true, waitqueue.StockLevel{SKU: sku, Available: 100, Version: 1}); err != nil {
		t.Fatal(err)
	}
	testenv.Tick(t, h.line, h.queue, waitqueue.Tick{Epoch: h.gw.epoch(), TargetActive: target, TickLength: 100 * time.Millisecond,
		TokenTTL: time.Minute, StockAware: true})
}

// migratedStore is a migrated order store on a fresh database.
func migratedStore(t *testing.T) *orders.Store {
	t.Helper()
	db, err := orders.Open(testenv.PostgresURL(t), orders.Options{MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	if err := db.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return db
}

// operatorGet GETs path over HTTP as an operator (the admin token); the
// body is closed when the test ends.
func operatorGet(t *testing.T, base, path string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("GET", base+path, nil)
	req.Header.Set("Authorization", "Bearer secret-admin")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}

// soldOf fetches path over HTTP as an operator and returns the sold figure
// of queue's sku ("absent" when the answer has no such SKU, "null" when
// it is unknown).
func soldOf(t *testing.T, base, path, queue, sku string) string {
	t.Helper()
	res := operatorGet(t, base, path)
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		t.Fatalf("GET %s = %d %s", path, res.StatusCode, raw)
	}
	return soldIn(t, raw, queue, sku)
}

// soldIn reads the sold figure of queue's sku in a queue view, a list of
// them or an ops snapshot.
func soldIn(t *testing.T, raw []byte, queue, sku string) string {
	t.Helper()
	type view struct {
		Name  string `json:"name"`
		Stock *struct {
			SKUs []struct {
				SKU  string          `json:"sku"`
				Sold json.RawMessage `json:"sold"`
			} `json:"skus"`
		} `json:"stock"`
	}
	var body struct {
		view
		Queues []view `json:"queues"`
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	for _, v := range append(body.Queues, body.view) {
		if v.Name != queue || v.Stock == nil {
			continue
		}
		for _, s := range v.Stock.SKUs {
			if s.SKU == sku {
				if s.Sold == nil {
					return "absent"
				}
				return string(s.Sold)
			}
		}
	}
	return "absent"
}

// The dashboard shows each SKU's units sold as the admin API does: the
// PAID orders PostgreSQL sums. Operators watching it share one read per
// queue a second (soldEvery), however many dashboards are open.
func TestOpsDashboardShowsUnitsSold(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	db := migratedStore(t)
	reads := &countedSales{src: db}
	clk := &clock{t: time.Now()}
	h.gw.sales = reads
	h.gw.ops.sold = admin.NewSoldCache(reads, clk.Now, admin.SoldEvery)
	h.gw.ops.interval = 20 * time.Millisecond
	h.rebuild()
	const sku = "ops-sold-sku"
	soldQueue(t, h, sku)
	if _, err := db.SetStock(ctx, sku, 100); err != nil {
		t.Fatal(err)
	}
	order := func(id string, qty int, pay bool) {
		t.Helper()
		o, err := db.Place(ctx, orders.Order{ID: id, TokenID: "tok-" + id, Queue: h.queue, User: "user-" + id, SKU: sku,
			Quantity: qty, Deadline: time.Now().Add(time.Minute)})
		if err != nil || o.Status != orders.Pending {
			t.Fatalf("place %s = %+v, %v", id, o, err)
		}
		if pay {
			_, err = db.Pay(ctx, id, "pay-"+id)
		} else {
			_, err = db.Fail(ctx, id, "payment_declined")
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	order("a", 2, true)
	order("b", 3, true)
	order("c", 4, false) // failed: not sold
	base := h.serve()

	if got := soldOf(t, base, "/v1/admin/queues/"+h.queue, h.queue, sku); got != "5" {
		t.Fatalf("admin API: sold = %s, want 5", got)
	}
	reads.n.Store(0)
	if got := soldOf(t, base, "/v1/admin/ops", h.queue, sku); got != "5" {
		t.Fatalf("dashboard snapshot: sold = %s, want 5, as the admin API shows", got)
	}
	// Eight more operators load it at once, a ninth streams it.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if got := soldOf(t, base, "/v1/admin/ops", h.queue, sku); got != "5" {
				t.Errorf("another operator's dashboard: sold = %s, want 5", got)
			}
		})
	}
	wg.Wait()
	res := operatorGet(t, base, "/v1/admin/ops/stream")
	_, events := readEvents(t, bufio.NewScanner(res.Body), 3)
	for _, ev := range events {
		if got := soldIn(t, []byte(ev.data), h.queue, sku); ev.name != "queues" || got != "5" {
			t.Errorf("stream event %s: sold = %s, want 5", ev.name, got)
		}
	}
	if n := reads.n.Load(); n != 1 {
		t.Errorf("the dashboard's viewers read the units sold %d times within a second, want once", n)
	}
	// A sale a moment later shows once the second is over.
	order("d", 1, true)
	if got := soldOf(t, base, "/v1/admin/ops", h.queue, sku); got != "5" {
		t.Errorf("dashboard within the second: sold = %s, want 5 (the shared read)", got)
	}
	clk.Advance(admin.SoldEvery)
	if got := soldOf(t, base, "/v1/admin/ops", h.queue, sku); got != "6" {
		t.Errorf("dashboard a second later: sold = %s, want 6", got)
	}
	if n := reads.n.Load(); n != 2 {
		t.Errorf("reads after a second = %d, want 2", n)
	}
}

// While PostgreSQL cannot be read, the sold figures are unknown (null),
// never a misleading 0, and the rest of the view stands.
func TestUnitsSoldUnknownWithoutTheDatabase(t *testing.T) {
	h := newHarness(t)
	db, err := orders.Open(testenv.PostgresURL(t), orders.Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	db.Close() // every read fails
	h.gw.sales = db
	h.gw.ops.sold = admin.NewSoldCache(db, time.Now, admin.SoldEvery)
	h.rebuild()
	const sku = "ops-unknown-sku"
	soldQueue(t, h, sku)
	base := h.serve()
	for _, path := range []string{"/v1/admin/queues/" + h.queue, "/v1/admin/queues", "/v1/admin/ops"} {
		if got := soldOf(t, base, path, h.queue, sku); got != "null" {
			t.Errorf("GET %s: sold = %s, want null", path, got)
		}
	}
}
