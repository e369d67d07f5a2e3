package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"usher/shared/catalog"
	"usher/shared/orders"
	"usher/shared/testenv"
	"usher/shared/testenv/chromium"
)

// lazy formats as what its function returns when the message is built,
// for messages about values a poll keeps changing.
type lazy func() string

func (l lazy) String() string { return l() }

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
	h.api.ops.breaker, h.api.ops.outcomes = fixedBreaker(true), records
	h.api.ops.interval = 20 * time.Millisecond
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

	req, _ := http.NewRequest("GET", base+"/v1/admin/ops/stream", nil)
	req.Header.Set("Authorization", "Bearer secret-admin")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
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
	h.api.ops.interval = 20 * time.Millisecond
	base := h.serve()
	req, _ := http.NewRequest("GET", base+"/v1/admin/ops/stream", nil)
	req.Header.Set("Authorization", "Bearer secret-admin")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	readEvents(t, sc, 1)
	if err := h.app.ShutdownWithTimeout(30 * time.Second); err != nil {
		t.Fatalf("shutdown with an open stream = %v, want nil", err)
	}
	for sc.Scan() {
	}
	select {
	case h.api.ops.slots <- struct{}{}: // the stream gave its slot back
	default:
		t.Errorf("after shutdown the stream still holds a slot")
	}
}

// Dashboard streams are bounded; one more is told to poll instead.
func TestOpsStreamsAreBounded(t *testing.T) {
	h := newHarness(t)
	for range cap(h.api.ops.slots) {
		h.api.ops.slots <- struct{}{}
	}
	r := h.do("GET", "/v1/admin/ops/stream", "", map[string]string{"Authorization": "Bearer secret-admin"})
	if r.status != 503 || !isProblem(r) || r.str("type") == "" || r.header.Get("Retry-After") == "" {
		t.Errorf("stream %d of %d = %d %v %s, want 503 problem+json with Retry-After", cap(h.api.ops.slots)+1, cap(h.api.ops.slots), r.status, r.header, r.raw)
	}
}

// The dashboard in a real browser: it asks for the token, shows the test
// queue's figures live, and its Pause button changes the queue in the
// catalog.
func TestOpsDashboardInABrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	bin := chromium.Path(t)
	h := newHarness(t)
	records := orders.NewRecords(testenv.Redis(t))
	h.api.ops.breaker, h.api.ops.outcomes = fixedBreaker(false), records
	h.putQueue(h.queue, `{"targetActive": 1, "rateLimit": `+limitsOff+`}`, 200)
	for _, u := range []string{"dash-a", "dash-b", "dash-c", "dash-d"} {
		h.join(u)
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		st, _ := h.line.Stats(context.Background(), h.queue)
		return st.Waiting == 4
	}, "4 joins in line")
	h.admit()
	records.CountOutcome(context.Background(), h.queue, "o1", orders.Paid)
	base := h.serve()

	shots := screenshotDirs(t)
	ctx := browser(t, bin)
	run := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	eval := func(js string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatalf("evaluate %s: %v", js, err)
		}
		return s
	}
	card := `document.getElementById('q-` + h.queue + `')`
	run("open the dashboard", chromedp.EmulateViewport(1200, 800), chromedp.Navigate(base+"/ops"))
	if got := eval(`document.getElementById('ops').dataset.conn`); got != "login" {
		t.Fatalf("before the token the page is %q, want login", got)
	}
	run("sign in",
		chromedp.SendKeys(chromedp.CSS("#token"), "secret-admin"),
		chromedp.Click(chromedp.CSS("#signin")))
	var got, page string
	testenv.Eventually(t, 30*time.Second, func() bool {
		got = eval(`(` + card + `||{}).querySelector ? ` + card + `.querySelector('[data-field=waiting]').textContent : ''`)
		page = eval(`document.getElementById('ops').dataset.conn + ': ' + document.getElementById('conn').textContent`)
		return got == "3"
	}, "waiting on the dashboard = %v, want 3 (page %v)", lazy(func() string { return got }), lazy(func() string { return page }))
	if conn := eval(`document.getElementById('ops').dataset.conn`); conn != "live" {
		t.Errorf("connection = %q, want live (streaming)", conn)
	}
	if active := eval(card + `.querySelector('[data-field=active]').textContent`); active != "1 / 1" {
		t.Errorf("active = %q, want 1 / 1", active)
	}
	if ord := eval(card + `.querySelector('[data-field=orders]').textContent`); ord != "1 paid" {
		t.Errorf("orders = %q, want 1 paid", ord)
	}
	// A few events in, the sparklines have points to draw.
	testenv.Eventually(t, 30*time.Second, func() bool {
		return eval(card+`.querySelector('[data-chart=waiting] polyline').getAttribute('points').split(' ').length >= 3 ? 'y' : ''`) == "y"
	}, "the waiting sparkline never had 3 points")
	shoot(t, ctx, shots, "ops.png")

	run("pause", chromedp.Click(chromedp.CSS(`#q-`+h.queue+` [data-action=paused]`)))
	testenv.Eventually(t, 30*time.Second, func() bool {
		cfg, _ := h.api.queues.Get(h.queue)
		return cfg.State == catalog.StatePaused
	}, "queue %s never paused in the catalog", h.queue)
	testenv.Eventually(t, 30*time.Second, func() bool {
		got = eval(card + `.dataset.state`)
		return got == catalog.StatePaused
	}, "card state = %q, want paused", got)
	shoot(t, ctx, shots, "ops-paused.png")

	// A notice from the dashboard reaches the line's configuration, is
	// shown on the card, and comes down again.
	run("put up a notice",
		chromedp.SendKeys(chromedp.CSS(`#q-`+h.queue+` [name=message]`), "Restock at 10:30"),
		chromedp.Click(chromedp.CSS(`#q-`+h.queue+` [data-form=notice] button[type=submit]`)))
	testenv.Eventually(t, 30*time.Second, func() bool {
		cfg, _ := h.api.queues.Get(h.queue)
		return cfg.Notice != nil && cfg.Notice.Message == "Restock at 10:30"
	}, "the notice never reached the catalog")
	testenv.Eventually(t, 30*time.Second, func() bool {
		got = eval(card + `.querySelector('[data-field=notice]').textContent`)
		return strings.Contains(got, "Restock at 10:30")
	}, "card notice = %q", lazy(func() string { return got }))
	if tick := eval(card + `.querySelector('[data-field=tick]').textContent`); tick == "" {
		t.Error("the card does not say whether an admitter ticks the queue")
	}
	run("take it down", chromedp.Click(chromedp.CSS(`#q-`+h.queue+` [data-notice=remove]`)))
	testenv.Eventually(t, 30*time.Second, func() bool {
		cfg, _ := h.api.queues.Get(h.queue)
		return cfg.Notice == nil
	}, "the notice never came down")
	if _, err := os.Stat(filepath.Join("testdata", "screenshots", "ops.png")); err != nil {
		t.Errorf("screenshot not kept: %v", err)
	}
}
