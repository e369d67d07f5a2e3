package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"usher/internal/testenv"
	"usher/internal/ticket"
	"usher/tools/internal/chromium"
)

// The waiting-room page in a real browser, on every service: it joins,
// shows its place over the notifier's stream, keeps going through a
// notifier restart, flips to READY when the admitter admits it and places
// the order.
func TestWaitingRoomInABrowser(t *testing.T) {
	t.Parallel()
	bin := chromium.Path(t)
	s := pageShop(t, "pgsim", "gateway", "admitter", "notifier", "orderworker")
	q := orderLine(t, s)
	q.join("first")
	q.join("second")

	shots := screenshotDirs(t)
	ctx := browser(t, bin)
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return v
	}
	// waitFor polls the page until its root's data-<attr> is one of want.
	waitFor := func(attr string, want ...string) {
		t.Helper()
		var got string
		testenv.Eventually(t, 30*time.Second, func() bool {
			var err error
			got, err = chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('usher').dataset.`+attr))
			if err != nil {
				t.Fatalf("read data-%s: %v", attr, err)
			}
			return slices.Contains(want, got)
		}, "data-%s = %q, want one of %v", attr, got, want)
	}
	do("open the page", chromedp.EmulateViewport(390, 844), chromedp.Navigate(q.page("browser-shopper", "")))
	waitFor("status", "WAITING")
	waitFor("conn", "live")
	if pos, ahead := text("#position"), text("#ahead"); pos != "3" || ahead != "2" {
		t.Errorf("page shows place %q with %q ahead, want 3 with 2 ahead", pos, ahead)
	}
	shoot(t, ctx, shots, "waiting.png")

	if err := s.running["notifier"].interrupt(t); err != nil {
		t.Fatalf("notifier after SIGINT: %v", err)
	}
	waitFor("conn", "reconnecting", "polling")
	s.restart("notifier")
	waitFor("conn", "live") // the page's EventSource came back by itself

	q.open()
	waitFor("status", "READY")
	if left := text("#left"); !strings.Contains(left, "min") {
		t.Errorf("time left = %q, want minutes of a 5-minute token", left)
	}
	shoot(t, ctx, shots, "ready.png")

	do("order", chromedp.Click(chromedp.CSS("#order")))
	var answer string
	testenv.Eventually(t, 30*time.Second, func() bool {
		answer = text("#answer")
		return strings.HasPrefix(answer, "Order ")
	}, "order answer = %q, want the order's id and status", answer)
	shoot(t, ctx, shots, "ordered.png")
}

// A page whose kept ticket is of a line since reset (the poll's 410
// ticket-stale) drops it and joins again, as it does a ticket the line does
// not know and as the page without JavaScript does, rather than poll the
// stale ticket every few seconds for good, showing only the problem. The
// stale ticket is signed with the gateway's own secret (from its data
// folder), for an epoch the line no longer has.
func TestAPageWithAStaleTicketJoinsAgain(t *testing.T) {
	t.Parallel()
	s, tab := orderPage(t)
	q := orderLine(t, s)
	page := q.page("stale-shopper", "")
	tab.open(page)
	tab.waitStatus("WAITING")
	signer, err := ticket.LoadOrCreateSigner(filepath.Join(s.env["USHER_DATA_DIR"], "ticket.secret"))
	if err != nil {
		t.Fatal(err)
	}
	stale := signer.Issue(ticket.Ticket{Queue: q.name, User: "stale-shopper", Epoch: "linesincereset", Seq: 1})
	key := "usher.ticket." + q.name + ".stale-shopper"
	tab.eval(`localStorage.setItem('` + key + `', '` + stale + `'), true`)
	tab.open(page)
	tab.waitStatus("WAITING")
	tab.expect(`localStorage.getItem('`+key+`') !== '`+stale+`'`, true)
}

// A READY page shows a notice put up after the turn came, as the API guide
// promises every READY shopper: the page closed its stream at READY (and
// polled no more), so no notice reached it until it was reloaded.
func TestAReadyPageShowsANoticePutUpAfterwards(t *testing.T) {
	t.Parallel()
	s, tab := orderPage(t)
	q := orderLine(t, s)
	tab.open(q.page("ready-notice", ""))
	tab.waitStatus("WAITING")
	q.open()
	tab.waitStatus("READY")
	putNotice(t, s, q.name, "Payments are slow: your turn is kept.", "warning")
	var got string
	testenv.Eventually(t, 30*time.Second, func() bool {
		got, _ = chromedp.Run(tab.ctx, chromedp.Evaluate[string](`document.getElementById('notice-warning').textContent`))
		return strings.Contains(got, "Payments are slow")
	}, "READY page's warning notice = %q, want the one put up after READY", got)
	tab.expect(`document.getElementById('usher').dataset.status`, "READY")
}

// orderPage is a shop of the gateway, an admitter and a notifier
// (pageShop) and a tab of a browser with JavaScript on it (browser tests
// are skipped with -short).
func orderPage(t *testing.T) (*shop, *pageTab) {
	t.Helper()
	bin := chromium.Path(t)
	s := pageShop(t, "gateway", "admitter", "notifier")
	return s, newTab(t, browser(t, bin), true, nil)
}

// orderLine is the held line of the shop's queue, which sells a SKU of its
// own (100 units in stock), up to 2 an order.
func orderLine(t *testing.T, s *shop) *line {
	t.Helper()
	sku := "sku-" + s.queue
	s.stock(sku, 100)
	return s.heldLine(t, s.queue, `{"targetActive": 5, "sku": "`+sku+`", "maxQuantity": 2, "rateLimit": `+limitsOff+`}`)
}

// browser starts a headless Chromium (chromium.Start) whose first tab
// gives up after three minutes.
func browser(t *testing.T, bin string) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(chromium.Start(t, bin), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// screenshotDirs are where screenshots go: the test's artifact directory
// (kept with go test -artifacts) and testdata/screenshots (gitignored).
func screenshotDirs(t *testing.T) []string {
	t.Helper()
	keep := filepath.Join("testdata", "screenshots")
	if err := os.MkdirAll(keep, 0o755); err != nil {
		t.Fatal(err)
	}
	return []string{t.ArtifactDir(), keep}
}

func shoot(t *testing.T, ctx context.Context, dirs []string, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	for _, d := range dirs {
		if err := os.WriteFile(filepath.Join(d, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("screenshot %s", filepath.Join(dirs[len(dirs)-1], name))
}

// A scheduled drop's page counts down to the opening, and a queue in
// maintenance says so, in a real browser.
func TestDropPagesInABrowser(t *testing.T) {
	t.Parallel()
	bin := chromium.Path(t)
	s := newShopOf(t, []string{"gateway", "admitter"})
	opens := time.Now().Add(90 * time.Minute)
	drop := s.queueOf(t, s.queue, `{"targetActive": 5, "rateLimit": `+limitsOff+`, "opensAt": "`+rfc3339(opens)+`"}`)
	maint := s.queueOf(t, s.queue+"-m", `{"targetActive": 5, "rateLimit": `+limitsOff+`, "mode": "reject"}`)

	ctx := browser(t, bin)
	shots := screenshotDirs(t)
	eval := func(js string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return v
	}
	waitStatus := func(want string) {
		t.Helper()
		var got string
		testenv.Eventually(t, 30*time.Second, func() bool {
			got = eval(`document.getElementById('usher').dataset.status`)
			return got == want
		}, "data-status = %q, want %q", got, want)
	}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 844), chromedp.Navigate(drop.page("early-bird", ""))); err != nil {
		t.Fatal(err)
	}
	waitStatus("PRE_QUEUE")
	if in := eval(`document.getElementById('opens-in').textContent`); !strings.Contains(in, "h 29 min") && !strings.Contains(in, "h 30 min") {
		t.Errorf("countdown = %q, want 1 h 29/30 min", in)
	}
	if at := eval(`document.getElementById('opens-at').dateTime`); at == "" {
		t.Error("the opening time is not given as a <time> with its datetime")
	}
	shoot(t, ctx, shots, "prequeue.png")

	if err := chromedp.Do(ctx, chromedp.Navigate(maint.page("early-bird", ""))); err != nil {
		t.Fatal(err)
	}
	waitStatus("MAINTENANCE")
	if title := eval(`document.getElementById('end-title').textContent`); !strings.Contains(title, "maintenance") {
		t.Errorf("maintenance page title = %q", title)
	}
	shoot(t, ctx, shots, "maintenance.png")
}
