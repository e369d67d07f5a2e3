package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go/jetstream"

	"usher/internal/event"
	"usher/internal/testenv"
	"usher/internal/testenv/chromium"
	"usher/internal/ticket"
	"usher/internal/token"
)

func TestPageAndAssetsAreServed(t *testing.T) {
	h := newHarness(t)
	h.gw.pageCSS = "https://shop.example/brand.css"
	h.rebuild()
	tests := []struct {
		name, path string
		want       int
		typ        string
		contains   []string
	}{
		{"page", "/q/" + h.queue, 200, "text/html; charset=utf-8",
			[]string{`data-queue="` + h.queue + `"`, `aria-live="polite"`, `<link rel="stylesheet" href="https://shop.example/brand.css">`, `/q/static/page.js`}},
		{"script", "/q/static/page.js", 200, "text/javascript; charset=utf-8", []string{"EventSource", "pollAfterMs", "/v1/orders"}},
		{"stylesheet", "/q/static/page.css", 200, "text/css; charset=utf-8", []string{"tabular-nums"}},
		{"a name percent-encoded (RFC 3986: the same name)", "/q/static/pow%2Ejs", 200, "text/javascript; charset=utf-8", []string{"solve"}},
		{"unknown queue", "/q/nope", 404, "application/problem+json", nil},
		{"unknown asset", "/q/static/page.html", 404, "application/problem+json", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := h.with(t).do("GET", tt.path, "", nil)
			if r.status != tt.want || r.header.Get("Content-Type") != tt.typ {
				t.Fatalf("GET %s = %d %s, want %d %s", tt.path, r.status, r.header.Get("Content-Type"), tt.want, tt.typ)
			}
			for _, s := range tt.contains {
				if !strings.Contains(string(r.raw), s) {
					t.Errorf("GET %s: body lacks %q", tt.path, s)
				}
			}
		})
	}
	// A stylesheet URL that is not a URL does not become markup.
	h.gw.pageCSS = `"><script>alert(1)</script>`
	h.rebuild()
	if r := h.do("GET", "/q/"+h.queue, "", nil); strings.Contains(string(r.raw), "<script>alert") {
		t.Errorf("USHER_PAGE_CSS_URL was not escaped: %s", r.raw)
	}
}

// The waiting-room page in a real browser: it joins, shows its place over
// the notifier's stream, keeps going through a notifier restart, flips to
// READY on admission and places the order.
func TestWaitingRoomInABrowser(t *testing.T) {
	bin := chromium.Path(t)
	h := newOrderHarness(t)
	base, n := serveWithNotifier(t, h)
	h.join("first")
	h.join("second")

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
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
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
	do("open the page", chromedp.EmulateViewport(390, 844), chromedp.Navigate(base+"/q/"+h.queue+"?user=browser-shopper"))
	waitFor("status", "WAITING")
	waitFor("conn", "live")
	if pos, ahead := text("#position"), text("#ahead"); pos != "3" || ahead != "2" {
		t.Errorf("page shows place %q with %q ahead, want 3 with 2 ahead", pos, ahead)
	}
	shoot(t, ctx, shots, "waiting.png")

	n.stop()
	waitFor("conn", "reconnecting", "polling")
	n.start()
	waitFor("conn", "live") // the page's EventSource came back by itself

	h.admit()
	publishAdmissions(t, h)
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
// not know and as the page without JavaScript does. It used to poll the
// stale ticket every few seconds for good, showing only the problem.
func TestAPageWithAStaleTicketJoinsAgain(t *testing.T) {
	h, base, tab := orderPage(t)
	page := base + "/q/" + h.queue + "?user=stale-shopper"
	tab.open(page)
	tab.waitStatus("WAITING")
	stale := h.gw.tickets.Issue(ticket.Ticket{Queue: h.queue, User: "stale-shopper", Epoch: "linesincereset", Seq: 1})
	key := "usher.ticket." + h.queue + ".stale-shopper"
	tab.eval(`localStorage.setItem('` + key + `', '` + stale + `'), true`)
	tab.open(page)
	tab.waitStatus("WAITING")
	tab.expect(`localStorage.getItem('`+key+`') !== '`+stale+`'`, true)
}

// A READY page shows a notice put up after the turn came, as the API guide
// promises every READY shopper: the page closed its stream at READY (and
// polled no more), so no notice reached it until it was reloaded.
func TestAReadyPageShowsANoticePutUpAfterwards(t *testing.T) {
	h, base, tab := orderPage(t)
	tab.open(base + "/q/" + h.queue + "?user=ready-notice")
	tab.waitStatus("WAITING")
	h.admit()
	publishAdmissions(t, h)
	tab.waitStatus("READY")
	h.putNotice("Payments are slow: your turn is kept.", "warning")
	var got string
	testenv.Eventually(t, 30*time.Second, func() bool {
		got, _ = chromedp.Run(tab.ctx, chromedp.Evaluate[string](`document.getElementById('notice-warning').textContent`))
		return strings.Contains(got, "Payments are slow")
	}, "READY page's warning notice = %q, want the one put up after READY", got)
	tab.expect(`document.getElementById('usher').dataset.status`, "READY")
}

// serveWithNotifier serves h, with a real notifier process beside it (the
// page's stream): the notifier shares the gateway's keys and ticket
// secret, and lets the gateway's page open streams. It returns the
// gateway's base URL and the notifier, which the test may stop and start.
func serveWithNotifier(t *testing.T, h *harness) (string, *notifierProc) {
	t.Helper()
	dir := t.TempDir()
	// The notifier must share the gateway's keys and ticket secret.
	var err error
	if h.gw.keys, err = token.LoadKeyring(filepath.Join(dir, "signing.key"), nil); err != nil {
		t.Fatal(err)
	}
	if h.gw.tickets, err = ticket.LoadOrCreateSigner(filepath.Join(dir, "ticket.secret")); err != nil {
		t.Fatal(err)
	}
	base, serve := h.listen() // before FreePort: the kernel could hand out its port again
	// Built before the port is chosen: the port is free only until someone
	// else takes it, and the build takes seconds (minutes on a cold cache),
	// long enough for another test's server to be given it (seen in CI: the
	// notifier's /healthz answered by a NATS server's INFO line).
	bin := buildNotifier(t)
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	n := &notifierProc{t: t, bin: bin, env: append(os.Environ(),
		"USHER_NOTIFIER_ADDR=127.0.0.1:"+fmt.Sprint(port),
		"USHER_GATEWAY_PUBLIC_URL="+base, // the page's origin: the notifier lets it open streams
		"USHER_NATS_URL="+h.js.Conn().ConnectedUrl(),
		"USHER_REDIS_URL="+testenv.RedisURL(t),
		"USHER_DATA_DIR="+dir,
		"USHER_LOG_LEVEL=warn",
		"USHER_SHUTDOWN_TIMEOUT=2s",
	)}
	n.start()
	h.gw.notifierURL = fmt.Sprintf("http://127.0.0.1:%d", port)
	h.rebuild()
	serve()
	return base, n
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

// publishAdmissions announces the queue's outbox as the admitter does.
func publishAdmissions(t *testing.T, h *harness) {
	t.Helper()
	ctx := context.Background()
	out, err := h.line.Outbox(ctx, h.queue, 100)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for _, a := range out {
		body, err := event.Marshal(a.TokenID, event.TypeAdmitted, a.User, a.ReadyAt, event.Admitted{
			Queue: a.Queue, User: a.User, Seq: a.Seq, TokenID: a.TokenID, ReadyAt: a.ReadyAt.UTC(), ExpiresAt: a.ExpiresAt.UTC(),
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.js.Publish(ctx, event.AdmittedSubject(h.queue), body, jetstream.WithMsgID(a.TokenID)); err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, a.Seq)
	}
	if err := h.line.Announced(ctx, h.queue, seqs); err != nil {
		t.Fatal(err)
	}
}

// buildNotifier builds the notifier binary: services never import each
// other, so the gateway's browser test runs the real one as a process.
func buildNotifier(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "notifier")
	cmd := exec.Command("go", "build", "-o", out, "usher/notifier")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build notifier: %v\n%s", err, b)
	}
	return out
}

// notifierProc is a notifier process that a test can stop and start again
// on the same address.
type notifierProc struct {
	t    *testing.T
	bin  string
	env  []string
	cmd  *exec.Cmd
	done chan struct{}
}

func (n *notifierProc) start() {
	n.t.Helper()
	n.cmd = exec.Command(n.bin)
	n.cmd.Env = n.env
	stdout, err := n.cmd.StdoutPipe()
	if err != nil {
		n.t.Fatal(err)
	}
	n.cmd.Stderr = os.Stderr
	if err := n.cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	n.done = make(chan struct{})
	listening := make(chan string, 1)
	go func() {
		defer close(n.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var rec map[string]any
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec["msg"] == "notifier listening" {
				listening <- fmt.Sprint(rec["addr"])
			}
		}
		n.cmd.Wait()
	}()
	n.t.Cleanup(n.stop)
	// Log level warn hides the listening line: wait for /healthz instead.
	addr := envOf(n.env, "USHER_NOTIFIER_ADDR")
	testenv.Eventually(n.t, 20*time.Second, func() bool {
		res, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return false
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode == 200
	}, "notifier on %s did not answer /healthz", addr)
}

func (n *notifierProc) stop() {
	if n.cmd == nil || n.cmd.Process == nil {
		return
	}
	if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		n.cmd.Process.Kill()
	}
	select {
	case <-n.done:
	case <-time.After(10 * time.Second):
		n.cmd.Process.Kill()
		<-n.done
	}
	n.cmd = nil
}

func envOf(env []string, name string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	return ""
}

// A scheduled drop's page counts down to the opening, and a queue in
// maintenance says so, in a real browser.
func TestDropPagesInABrowser(t *testing.T) {
	bin := chromium.Path(t)
	h := newHarness(t)
	base := h.serve()
	opens := time.Now().Add(90 * time.Minute)
	h.putQueue(h.queue, `{"targetActive": 5, "rateLimit": `+limitsOff+`, "opensAt": "`+rfc3339(opens)+`"}`, 200)
	maint := h.queue + "-m"
	h.putQueue(maint, `{"targetActive": 5, "rateLimit": `+limitsOff+`, "mode": "reject"}`, 201)

	ctx := browser(t, bin)
	shots := screenshotDirs(t)
	eval := func(js string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return s
	}
	waitStatus := func(want string) {
		t.Helper()
		var got string
		testenv.Eventually(t, 30*time.Second, func() bool {
			got = eval(`document.getElementById('usher').dataset.status`)
			return got == want
		}, "data-status = %q, want %q", got, want)
	}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 844), chromedp.Navigate(base+"/q/"+h.queue+"?user=early-bird")); err != nil {
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

	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/q/"+maint+"?user=early-bird")); err != nil {
		t.Fatal(err)
	}
	waitStatus("MAINTENANCE")
	if title := eval(`document.getElementById('end-title').textContent`); !strings.Contains(title, "maintenance") {
		t.Errorf("maintenance page title = %q", title)
	}
	shoot(t, ctx, shots, "maintenance.png")
}

// orderPage is an order harness served with a notifier, and a tab of a
// browser with JavaScript on it (browser tests are skipped with -short).
func orderPage(t *testing.T) (*harness, string, *pageTab) {
	t.Helper()
	bin := chromium.Path(t)
	h := newOrderHarness(t)
	base, _ := serveWithNotifier(t, h)
	return h, base, newTab(t, browser(t, bin), true, nil)
}
