package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"usher/internal/adaptive"
	"usher/internal/adaptive/adaptivetest"
	"usher/internal/event"
	"usher/internal/testenv"
	"usher/tools/internal/chromium"
)

// queueView is what the admin API says of a queue, as these tests read
// it.
func (s *shop) queueView() map[string]any {
	s.t.Helper()
	code, v := call(s.t, "GET", s.base+"/v1/admin/queues/"+s.queue, "", s.admin)
	if code != 200 {
		s.t.Fatalf("GET queue %s = %d %v", s.queue, code, v)
	}
	return v
}

// lastConfigChange is the last usher.ops.config_changed record on the
// broker at natsURL.
func lastConfigChange(t *testing.T, natsURL string) event.ConfigChanged {
	t.Helper()
	js, ctx := jetStreamAt(t, natsURL)
	st, err := js.Stream(ctx, event.StreamOps)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(ctx, event.ConfigChangedSubject)
	if err != nil {
		t.Fatal(err)
	}
	var c event.ConfigChanged
	if _, err := event.Unmarshal(m.Data, event.TypeConfigChanged, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// The dashboard in a real browser, on every service: it asks for the
// token, shows the queue's figures live — shoppers waiting and admitted,
// the orders paid and the units sold, as the order worker and PostgreSQL
// have them — and its Pause button changes the queue in the catalog.
func TestOpsDashboardInABrowser(t *testing.T) {
	t.Parallel()
	bin := chromium.Path(t)
	s := newShop(t)
	sku := "sku-" + s.queue
	s.stock(sku, 100)
	s.configure(`{"targetActive": 1, "sku": "` + sku + `", "maxQuantity": 5, "rateLimit": ` + limitsOff + `}`)
	var tickets []string
	for _, u := range []string{"dash-a", "dash-b", "dash-c", "dash-d", "dash-e"} {
		tickets = append(tickets, s.mustJoin(u))
	}
	// One slot: the first buys five units, and the slot goes to the next.
	if o := s.buy("dash-a", s.ready(tickets[0], "dash-a"), `{"sku": "`+sku+`", "quantity": 5}`); o["status"] != "PAID" {
		t.Fatalf("dash-a's order = %v, want PAID", o)
	}
	s.ready(tickets[1], "dash-b")

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
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatalf("evaluate %s: %v", js, err)
		}
		return v
	}
	card := `document.getElementById('q-` + s.queue + `')`
	run("open the dashboard", chromedp.EmulateViewport(1200, 800), chromedp.Navigate(s.base+"/ops"))
	if got := eval(`document.getElementById('ops').dataset.conn`); got != "login" {
		t.Fatalf("before the token the page is %q, want login", got)
	}
	run("sign in as José",
		chromedp.SetValue(chromedp.CSS("#who"), "José"),
		chromedp.SendKeys(chromedp.CSS("#token"), "e2e-admin"),
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
	if stock := eval(card + `.querySelector('[data-field=stock]').textContent`); !strings.Contains(stock, sku+": ") || !strings.Contains(stock, " 5 sold") {
		t.Errorf("stock = %q, want %s's 5 sold", stock, sku)
	}
	// A few events in, the sparklines have points to draw.
	testenv.Eventually(t, 30*time.Second, func() bool {
		return eval(card+`.querySelector('[data-chart=waiting] polyline').getAttribute('points').split(' ').length >= 3 ? 'y' : ''`) == "y"
	}, "the waiting sparkline never had 3 points")
	shoot(t, ctx, shots, "ops.png")

	run("pause", chromedp.Click(chromedp.CSS(`#q-`+s.queue+` [data-action=paused]`)))
	testenv.Eventually(t, 30*time.Second, func() bool {
		return s.queueView()["state"] == "paused"
	}, "queue %s never paused in the catalog", s.queue)
	// The browser sent its operator's name as ISO-8859-1 (fetch does):
	// the audit says José all the same.
	if c := lastConfigChange(t, s.env["USHER_NATS_URL"]); c.Queue != s.queue || c.By != "José" {
		t.Errorf("the pause's audit record is of %s by %q, want %s by José", c.Queue, c.By, s.queue)
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		got = eval(card + `.dataset.state`)
		return got == "paused"
	}, "card state = %q, want paused", got)
	shoot(t, ctx, shots, "ops-paused.png")

	// A notice from the dashboard reaches the line's configuration, is
	// shown on the card, and comes down again.
	run("put up a notice",
		chromedp.SendKeys(chromedp.CSS(`#q-`+s.queue+` [name=message]`), "Restock at 10:30"),
		chromedp.Click(chromedp.CSS(`#q-`+s.queue+` [data-form=notice] button[type=submit]`)))
	testenv.Eventually(t, 30*time.Second, func() bool {
		n, _ := s.queueView()["notice"].(map[string]any)
		return n != nil && n["message"] == "Restock at 10:30"
	}, "the notice never reached the catalog")
	testenv.Eventually(t, 30*time.Second, func() bool {
		got = eval(card + `.querySelector('[data-field=notice]').textContent`)
		return strings.Contains(got, "Restock at 10:30")
	}, "card notice = %q", lazy(func() string { return got }))
	if tick := eval(card + `.querySelector('[data-field=tick]').textContent`); tick == "" {
		t.Error("the card does not say whether an admitter ticks the queue")
	}
	run("take it down", chromedp.Click(chromedp.CSS(`#q-`+s.queue+` [data-notice=remove]`)))
	testenv.Eventually(t, 30*time.Second, func() bool {
		return s.queueView()["notice"] == nil
	}, "the notice never came down")
	if _, err := os.Stat(filepath.Join("testdata", "screenshots", "ops.png")); err != nil {
		t.Errorf("screenshot not kept: %v", err)
	}
}

// The dashboard says how each queue's limit is set, and its buttons still
// work on an adaptive queue (the live fields stay out of the PUT). The
// gateway runs without an admitter: the test commits the controller's
// decision to Redis itself (adaptive.Store, as an admitter does), since a
// real controller's figures are the latencies it measures, which no test
// can name beforehand — and an admitter beside it would decide the windows
// itself.
func TestOpsDashboardShowsTheAdaptiveLimit(t *testing.T) {
	t.Parallel()
	bin := chromium.Path(t)
	s := newShopOf(t, []string{"gateway"})
	s.configure(`{"targetActive": 5, "adaptive": {"enabled": true, "min": 2, "max": 40}, "rateLimit": ` + limitsOff + `}`)
	p := adaptive.Params{Window: 100 * time.Millisecond, Bounds: adaptive.Bounds{Min: 2, Max: 40, Start: 5}, Lease: time.Second}
	adaptivetest.Decide(t, adaptive.NewStore(testenv.RedisAt(t, s.env["USHER_REDIS_URL"])), s.queue, p, adaptive.State{Limit: 9, BaselineMs: 240, LatencyMs: 251.26},
		adaptive.Decision{Limit: 9, Reason: adaptive.ReasonRaise}, 37)
	ctx := browser(t, bin)
	eval := func(js string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatalf("evaluate %s: %v", js, err)
		}
		return v
	}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1200, 800), chromedp.Navigate(s.base+"/ops"),
		chromedp.SendKeys(chromedp.CSS("#token"), "e2e-admin"), chromedp.Click(chromedp.CSS("#signin"))); err != nil {
		t.Fatal(err)
	}
	card := `document.getElementById('q-` + s.queue + `')`
	var got string
	testenv.Eventually(t, 30*time.Second, func() bool {
		got = eval(`(` + card + `||{}).querySelector ? ` + card + `.querySelector('[data-field=limit]').textContent : ''`)
		return strings.HasPrefix(got, "9 adaptive")
	}, "limit line %v, want the adaptive limit", lazy(func() string { return got }))
	if want := "9 adaptive, 2–40 · raise · order latency 251 ms against 240 ms unloaded"; got != want {
		t.Errorf("limit line %q, want %q", got, want)
	}
	if active := eval(card + `.querySelector('[data-field=active]').textContent`); active != "0 / 9" {
		t.Errorf("active = %q, want 0 / 9 (the adaptive limit)", active)
	}
	shoot(t, ctx, screenshotDirs(t), "ops-adaptive.png")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#q-`+s.queue+` [data-action=paused]`))); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		v := s.queueView()
		a, _ := v["adaptive"].(map[string]any)
		if v["state"] != "paused" || a == nil || a["enabled"] != true || a["max"] != 40.0 {
			return fmt.Errorf("state %v, adaptive %v", v["state"], a)
		}
		return nil
	}, "the adaptive queue never paused (with its adaptive setting kept): %s", lazy(func() string {
		return eval(`document.getElementById('actionError').textContent`)
	}))
}
