package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"usher/internal/pow"
	"usher/internal/testenv"
	"usher/tools/internal/chromium"
)

// powScript is pow.js as the gateway at base serves it.
func powScript(t testing.TB, base string) string {
	t.Helper()
	res, err := http.Get(base + "/q/static/pow.js")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("GET /q/static/pow.js = %d, %v", res.StatusCode, err)
	}
	return string(b)
}

// gatewayAlone starts a gateway, on servers of its own, and returns its
// base URL once it is ready.
func gatewayAlone(t testing.TB) string {
	t.Helper()
	env := stackEnv(t)
	start(t, "gateway", env)
	base := "http://" + env["USHER_GATEWAY_ADDR"]
	waitReady(t, 30*time.Second, base)
	return base
}

// powPage opens a gateway page in Chromium with pow.js loaded: the script
// itself, whose document has the gateway's origin (so a Worker may load
// it too).
func powPage(t testing.TB, bin, base string) context.Context {
	t.Helper()
	ctx := chromium.Start(t, bin)
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/q/static/pow.js")); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](powScript(t, base)+"; typeof UsherPoW === 'object'")); err != nil {
		t.Fatalf("load pow.js: %v", err)
	}
	return ctx
}

// The JavaScript solver finds exactly the nonce the Go reference finds
// (the smallest), hashes like crypto/sha256 on one block and on several,
// and solves through the Promise API, in a Worker and on the page.
func TestPowJSAgreesWithGo(t *testing.T) {
	t.Parallel()
	bin := chromium.Path(t)
	ctx := powPage(t, bin, gatewayAlone(t))
	eval := func(js string, opts ...chromedp.EvaluateOption) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](js, opts...))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return v
	}
	for _, n := range []int{0, 3, 55, 56, 63, 64, 119, 200} {
		s := strings.Repeat("usher", 40)[:n]
		want := sha256.Sum256([]byte(s))
		if got := eval(fmt.Sprintf("UsherPoW.hashHex(%q)", s)); got != hex.EncodeToString(want[:]) {
			t.Errorf("hashHex of %d bytes = %s, want %x", n, got, want)
		}
	}
	is, err := pow.NewIssuer([]byte(strings.Repeat("k", 32)), 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range []int{0, 1, 4, 8, 12, 16, 17} {
		c := is.Issue("drop", netip.MustParseAddr("198.51.100.7"), d, time.Unix(int64(1e9+i), 0))
		want, err := pow.Solve(context.Background(), c.Challenge, d)
		if err != nil {
			t.Fatal(err)
		}
		if got := eval(fmt.Sprintf("String(UsherPoW.solveRange(%q, %d, 0, 1e8))", c.Challenge, d)); got != want {
			t.Errorf("solveRange(d=%d) = %s, want Go's %s", d, got, want)
		}
		// Starting past the answer finds the next one, never an earlier one.
		got, _ := strconv.ParseUint(eval(fmt.Sprintf("String(UsherPoW.solveRange(%q, %d, %s + 1, 1e8))", c.Challenge, d, want)), 10, 64)
		if w, _ := strconv.ParseUint(want, 10, 64); got <= w || pow.LeadingZeroBits(c.Challenge+":"+strconv.FormatUint(got, 10)) < d {
			t.Errorf("solveRange(d=%d) from %d+1 = %d, want a later solution", d, w, got)
		}
	}
	// Nonces that grow past the one-block limit (55 bytes) are still right.
	long := "AQ8AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	from := "99999999999990" // 14 digits: the last that fit one block, then 15
	var wantLong string
	for n := uint64(99999999999990); ; n++ {
		v := long + ":" + fmt.Sprint(n)
		if pow.LeadingZeroBits(v) >= 4 {
			wantLong = fmt.Sprint(n)
			break
		}
	}
	if got := eval(fmt.Sprintf("String(UsherPoW.solveRange(%q, 4, %s, 1e6))", long, from)); got != wantLong {
		t.Errorf("solveRange across the one-block limit = %s, want %s", got, wantLong)
	}
	c := is.Issue("drop", netip.MustParseAddr("198.51.100.7"), 12, time.Unix(2e9, 0))
	want, _ := pow.Solve(context.Background(), c.Challenge, 12)
	for _, where := range []string{"{worker: '/q/static/pow.js'}", "{}"} {
		js := fmt.Sprintf(`(async () => {
			let calls = 0, last = 0;
			const n = await UsherPoW.solve(%q, 12, Object.assign(%s, {onProgress: (f) => { calls++; last = f; }}));
			return n + ' ' + calls + ' ' + last;
		})()`, c.Challenge, where)
		got := strings.Fields(eval(js, chromedp.EvalAwaitPromise))
		if len(got) != 3 || got[0] != want || got[1] == "0" || got[2] != "1" {
			t.Errorf("solve(%s) = %v, want nonce %s with progress ending at 1", where, got, want)
		}
	}
	aborted := eval(`(async () => {
		const ctl = new AbortController();
		const p = UsherPoW.solve('x', 32, {signal: ctl.signal, worker: '/q/static/pow.js'});
		ctl.abort(new Error('stopped'));
		try { await p; return 'solved'; } catch (e) { return e.message; }
	})()`, chromedp.EvalAwaitPromise)
	if aborted != "stopped" {
		t.Errorf("solve aborted = %q, want the abort's reason", aborted)
	}
}

// The waiting-room page solves the queue's challenge in a Web Worker,
// showing its progress, before it joins: the gateway sees one valid proof
// and no refused join. (The line is held, so the shopper waits first in
// it.)
func TestWaitingRoomSolvesBeforeJoining(t *testing.T) {
	t.Parallel()
	bin := chromium.Path(t)
	s := newShopOf(t, []string{"gateway", "admitter"})
	q := s.heldLine(t, s.queue, `{"rateLimit": `+limitsOff+`, "challenge": {"mode": "enforce", "difficulty": 16}}`)
	ctx := chromium.Start(t, bin)
	// Record every data-status and progress value the page shows.
	record := chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: `
			window.__seen = [];
			new MutationObserver((ms) => { for (const m of ms) window.__seen.push(m.target.id + ':' + m.attributeName + '=' + m.target.getAttribute(m.attributeName)); })
				.observe(document, {attributes: true, subtree: true, attributeFilter: ['data-status', 'aria-valuenow']});`})
		return err
	})
	if err := chromedp.Do(ctx, record, chromedp.Navigate(q.page("pow-shopper", ""))); err != nil {
		t.Fatal(err)
	}
	var status string
	testenv.Eventually(t, 60*time.Second, func() bool {
		status, _ = chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('usher').dataset.status`))
		return status == "WAITING"
	}, "page status = %q, want WAITING", status)
	seen, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`window.__seen`))
	if err != nil {
		t.Fatal(err)
	}
	solving := slices.Index(seen, "usher:data-status=SOLVING")
	done := slices.Index(seen, "work:aria-valuenow=100")
	waiting := slices.Index(seen, "usher:data-status=WAITING")
	if solving < 0 || done < solving || waiting < done {
		t.Errorf("the page showed %v; want SOLVING, its progress reaching 100, then WAITING", seen)
	}
	series := `usher_pow_checks_total{mode="enforce",queue="` + q.name + `",result="%s"}`
	ok, missing := metricValue(t, s.base+"/metrics", fmt.Sprintf(series, "ok")), metricValue(t, s.base+"/metrics", fmt.Sprintf(series, "missing"))
	if ok != "1" || (missing != "" && missing != "0") {
		t.Errorf("gateway saw %q valid proofs and %q joins without one, want 1 and none", ok, missing)
	}
	if pos, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#position"))); pos != "1" {
		t.Errorf("page shows place %q, want 1", pos)
	}
}

// BenchmarkPowJS is the JavaScript solver in headless Chromium: hashes per
// second on the page's main thread and in a Web Worker, without and with
// the DevTools CPU throttling Lighthouse uses for a mid-range phone (4×);
// and the time to solve per difficulty (fresh challenges; one solve is
// luck, the mean is 2^d / rate). Besides wall time it reports the CPU time
// of Chromium's renderer processes (hashes/cpu-s, cpu-ms/op): on a shared
// machine the wall clock also counts other processes' turns. Run with
// -benchtime=Nx.
func BenchmarkPowJS(b *testing.B) {
	bin := chromium.Path(b)
	ctx := powPage(b, bin, gatewayAlone(b))
	throttle := func(rate float64) {
		err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, emulation.SetCPUThrottlingRate, emulation.SetCPUThrottlingRateParams{Rate: rate})
			return err
		}))
		if err != nil {
			b.Fatal(err)
		}
	}
	browserPid := chromedp.FromContext(ctx).Browser.Process().Pid
	const hashes = 1 << 21
	for _, slow := range []float64{1, 4} {
		for _, where := range []string{"main", "worker"} {
			b.Run(fmt.Sprintf("rate/%s/throttle=%g", where, slow), func(b *testing.B) {
				throttle(slow)
				defer throttle(1)
				js := fmt.Sprintf(`UsherPoW.solveRange('AQ8AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA', 32, 0, %d)`, hashes)
				if where == "worker" {
					js = fmt.Sprintf(`new Promise((resolve) => {
						const src = 'onmessage = (e) => { importScripts(e.data); postMessage(UsherPoW.solveRange("AQ8AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", 32, 0, %d)); };';
						const w = new Worker(URL.createObjectURL(new Blob([src])));
						w.onmessage = (e) => { w.terminate(); resolve(e.data); };
						w.postMessage(location.origin + '/q/static/pow.js');
					})`, hashes)
				}
				cpu0 := rendererCPU(b, browserPid)
				for b.Loop() {
					if _, err := chromedp.Run(ctx, chromedp.Evaluate[int](js, chromedp.EvalAwaitPromise)); err != nil {
						b.Fatal(err)
					}
				}
				cpu := (rendererCPU(b, browserPid) - cpu0).Seconds()
				b.ReportMetric(float64(hashes)*float64(b.N)/b.Elapsed().Seconds(), "hashes/s")
				b.ReportMetric(float64(hashes)*float64(b.N)/cpu, "hashes/cpu-s")
			})
		}
	}
	is, err := pow.NewIssuer([]byte(strings.Repeat("k", 32)), 0)
	if err != nil {
		b.Fatal(err)
	}
	for _, d := range []int{12, 16, 18} {
		b.Run(fmt.Sprintf("solve/d=%d", d), func(b *testing.B) {
			i := 0
			var tries float64
			cpu0 := rendererCPU(b, browserPid)
			for b.Loop() {
				c := is.Issue("drop", netip.MustParseAddr("198.51.100.7"), d, time.Unix(int64(1e9+i), 0))
				i++
				n, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf(`UsherPoW.solveRange(%q, %d, 0, 1e9)`, c.Challenge, d)))
				if err != nil {
					b.Fatal(err)
				}
				tries += float64(n + 1)
			}
			cpu := (rendererCPU(b, browserPid) - cpu0).Seconds()
			b.ReportMetric(cpu/float64(b.N)*1000, "cpu-ms/op")
			b.ReportMetric(tries/float64(b.N), "hashes/op")
		})
	}
}

// rendererCPU is the CPU time (user + system) so far of every Chromium
// renderer process under the browser process pid: where pages and their
// dedicated workers run.
func rendererCPU(t testing.TB, pid int) time.Duration {
	t.Helper()
	all := testenv.Processes()
	if len(all) == 0 {
		t.Fatal("no processes read from /proc")
	}
	ppid := make(map[int]int, len(all))
	for _, p := range all {
		ppid[p.PID] = p.PPID
	}
	var cpu time.Duration
	for _, p := range all {
		cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/cmdline")
		if !strings.Contains(string(cmd), "--type=renderer") {
			continue
		}
		for a := p.PPID; a > 1; a = ppid[a] {
			if a == pid {
				cpu += p.CPU
				break
			}
		}
	}
	return cpu
}
