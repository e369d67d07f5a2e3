package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"usher/internal/testenv"
	"usher/tools/internal/chromium"
)

// The waiting-room page for everyone, in one real Chromium (each subtest
// in tabs of its own): its languages, the flow without JavaScript, the
// flow by keyboard alone, and an axe-core audit of both pages in every
// state a shopper meets. The gateway and an admitter serve it: with no
// notifier the page polls (as on a shop that runs none), and with no order
// worker an order placed stays PENDING, as received.
func TestPageForEveryoneInABrowser(t *testing.T) {
	t.Parallel()
	bin := chromium.Path(t)
	s := newShopOf(t, []string{"gateway", "admitter"})
	sku := "sku-" + s.queue
	s.stock(sku, 1000)
	browserCtx := browser(t, bin)
	shots := screenshotDirs(t)
	// queue is a held line (heldLine) of its own for a subtest.
	queue := func(t *testing.T, name, config string) *line {
		t.Helper()
		return s.heldLine(t, s.queue+"-"+name, config)
	}
	open := `{"targetActive": 5, "sku": "` + sku + `", "rateLimit": ` + limitsOff + `}`
	// readyTabs takes a shopper to READY in a tab with JavaScript and one
	// without (users prefix-js and prefix-nojs, query added to the page's
	// address), behind one who joined first, and returns both tabs.
	readyTabs := func(t *testing.T, q *line, prefix, query string) (js, nojs *pageTab) {
		t.Helper()
		q.join("first")
		js = newTab(t, browserCtx, true, nil)
		js.open(q.page(prefix+"-js", query))
		js.waitStatus("WAITING")
		nojs = newTab(t, browserCtx, false, nil)
		nojs.open(q.page(prefix+"-nojs", ""))
		nojs.submit(`#join button`, "WAITING")
		q.open(nojs.ticket())
		js.waitStatus("READY")
		nojs.submit(`#waiting form button`, "READY")
		return js, nojs
	}

	t.Run("languages", func(t *testing.T) {
		q := queue(t, "lang", open)
		q.join("ahead") // so the page waits, with no ETA yet
		de := newTab(t, browserCtx, true, nil)
		de.open(q.page("lang-de", "&lang=de"))
		de.waitStatus("WAITING")
		de.expect(`document.documentElement.lang`, "de")
		de.expect(`document.querySelector('h1').innerText`, "Du bist in der Warteschlange für "+q.name)
		de.expect(`document.querySelector('#waiting .label').textContent`, "Dein Platz")
		de.expect(`document.getElementById('eta').textContent`, "unbekannt") // written by page.js
		shoot(t, de.ctx, shots, "lang-de.png")

		ja := newTab(t, browserCtx, true, map[string]string{"Accept-Language": "ja-JP,ja;q=0.9,en;q=0.5"})
		ja.open(q.page("lang-ja", ""))
		ja.waitStatus("WAITING")
		ja.expect(`document.documentElement.lang`, "ja")
		ja.expect(`document.querySelector('h1').innerText`, q.name+" の順番待ちに並んでいます")
		ja.expect(`document.getElementById('eta').textContent`, "不明")
		ja.expect(`document.getElementById('position').textContent`, "3")
		shoot(t, ja.ctx, shots, "lang-ja.png")

		other := newTab(t, browserCtx, true, map[string]string{"Accept-Language": "tlh,x-klingon;q=0.9"})
		other.open(q.page("lang-zz", "&lang=zz"))
		other.waitStatus("WAITING")
		other.expect(`document.documentElement.lang`, "en")
		other.expect(`document.querySelector('h1').innerText`, "You are in line for "+q.name)
		other.expect(`document.getElementById('eta').textContent`, "unknown")

		// Without JavaScript too, and the opening time by Intl in the
		// page's language.
		fr := newTab(t, browserCtx, false, nil)
		fr.open(q.page("lang-fr", "&lang=fr"))
		fr.expect(`document.documentElement.lang`, "fr")
		fr.expect(`document.querySelector('#join button').textContent`, "Rejoindre la file")
		drop := s.queueOf(t, s.queue+"-lang-drop", `{"targetActive": 5, "rateLimit": `+limitsOff+`, "opensAt": "`+rfc3339(time.Now().Add(3*time.Hour))+`"}`)
		ja.open(drop.page("lang-ja", ""))
		ja.waitStatus("PRE_QUEUE")
		ja.expect(`(() => { const at = document.getElementById('opens-at');
			const o = { weekday: 'short', hour: '2-digit', minute: '2-digit', second: '2-digit' };
			const d = new Date(at.dateTime);
			return at.textContent === d.toLocaleString('ja', o) && at.textContent !== d.toLocaleString('en', o) ? 'ja' : at.textContent; })()`, "ja")
		ja.expect(`document.getElementById('opens-in').textContent.includes('時間')`, true)
		shoot(t, ja.ctx, shots, "lang-ja-prequeue.png")
	})

	t.Run("without JavaScript", func(t *testing.T) {
		q := queue(t, "nojs", open)
		q.join("first")
		q.join("second")
		tab := newTab(t, browserCtx, false, nil)
		tab.open(q.page("nojs-shopper", ""))
		tab.expect(`getComputedStyle(document.querySelector('.conn')).display`, "none") // "Connecting…" is the script's
		tab.expect(`document.querySelector('#join button').textContent`, "Join the line")
		shoot(t, tab.ctx, shots, "nojs-join.png")

		tab.submit(`#join button`, "WAITING")
		tab.expect(`document.getElementById('position').textContent`, "3")
		tab.expect(`document.getElementById('ahead').textContent`, "2")
		tab.expect(`document.title`, "Your place: 3 · Waiting room · "+q.name)
		shoot(t, tab.ctx, shots, "nojs-waiting.png")

		tab.submit(`#waiting form button`, "WAITING") // check my place: nothing moved
		tab.expect(`document.getElementById('position').textContent`, "3")
		q.open(tab.ticket())
		tab.submit(`#waiting form button`, "READY")
		tab.expectSoon(`document.activeElement.id`, "order")
		tab.expect(`document.getElementById('ready').innerText.includes('Your place is held until ')`, true)
		shoot(t, tab.ctx, shots, "nojs-ready.png")

		tab.submit(`#order`, "READY")
		tab.expectPrefix(`document.getElementById('answer').textContent`, "Order ord_")
		shoot(t, tab.ctx, shots, "nojs-ordered.png")
	})

	t.Run("keyboard only", func(t *testing.T) {
		// Without JavaScript: Tab reaches each form's button first, Enter
		// sends it; READY puts the focus on the order button.
		q := queue(t, "keys", open)
		q.join("first")
		tab := newTab(t, browserCtx, false, nil)
		tab.open(q.page("keyboard-nojs", ""))
		tab.key(kb.Tab)
		tab.expect(`document.activeElement.textContent`, "Join the line")
		tab.focusVisible()
		shoot(t, tab.ctx, shots, "keyboard-focus.png")
		tab.keySubmit(kb.Enter, "WAITING")
		tab.key(kb.Tab)
		tab.expect(`document.activeElement.textContent`, "Check my place")
		tab.focusVisible()
		q.open(tab.ticket())
		tab.keySubmit(kb.Enter, "READY")
		tab.expectSoon(`document.activeElement.id`, "order")
		tab.focusVisible()
		tab.keySubmit(kb.Enter, "READY")
		tab.expectPrefix(`document.getElementById('answer').textContent`, "Order ord_")

		// With JavaScript: the page joins by itself and, on READY, moves
		// the focus to the order button; Enter orders.
		q2 := queue(t, "keys-js", open)
		q2.join("first")
		js := newTab(t, browserCtx, true, nil)
		js.open(q2.page("keyboard-js", ""))
		js.waitStatus("WAITING")
		js.key(kb.Tab) // the keyboard has been used: focus shows as it does for keyboard users
		q2.open()
		js.waitStatus("READY")
		js.expectSoon(`document.activeElement.id`, "order")
		js.expect(`document.getElementById('order').getAttribute('aria-describedby')`, "ready-title")
		js.focusVisible()
		shoot(t, js.ctx, shots, "keyboard-ready.png")
		js.key(kb.Enter)
		var answer string
		testenv.Eventually(t, 30*time.Second, func() bool {
			answer, _ = chromedp.Run(js.ctx, chromedp.Evaluate[string](`document.getElementById('answer').textContent`))
			return strings.HasPrefix(answer, "Order ord_")
		}, "order answer = %q after Enter on the focused button", answer)
	})

	t.Run("a queue that sells nothing", func(t *testing.T) {
		// No sku, no skus: READY tells the turn and sends the shopper to
		// the shop's own checkout, with no order button; the heading takes
		// the focus instead, with and without JavaScript.
		axe := axeSource(t)
		q := queue(t, "nosku", `{"targetActive": 5, "rateLimit": `+limitsOff+`}`)
		const checkout = "Buy at the shop's own checkout: your turn is valid there while your place is held. This page takes no orders."
		js, nojs := readyTabs(t, q, "nosku", "")
		for _, tab := range []*pageTab{js, nojs} {
			tab.expectSoon(`document.activeElement.id`, "ready-title")
			tab.expect(`document.getElementById('order') === null && document.getElementById('order-form') === null`, true)
			tab.expect(`document.getElementById('shop-checkout').innerText`, checkout)
		}
		js.expect(`/^Your place is held for \d/.test(document.querySelector('#ready .js-only').innerText)`, true)
		shoot(t, js.ctx, shots, "nosku-ready.png")
		js.axe(axe, "js-ready-nosku")
		nojs.axe(axe, "nojs-ready-nosku")
	})

	t.Run("a queue that sells variants", func(t *testing.T) {
		// skus: READY offers a labelled choice of the queue's SKUs and the
		// order names the one chosen, with and without JavaScript. ?sku=
		// comes chosen and the order button takes the focus; without it
		// the choice is required and takes the focus.
		axe := axeSource(t)
		s := s.with(t)
		s.stock("shoe-41", 100)
		s.stock("shoe-42", 100)
		q := queue(t, "skus", `{"targetActive": 5, "skus": ["shoe-41", "shoe-42"], "rateLimit": `+limitsOff+`}`)
		js, nojs := readyTabs(t, q, "skus", "&sku=shoe-42")
		js.expectSoon(`document.activeElement.id`, "order")
		nojs.expectSoon(`document.activeElement.id`, "variant")
		for _, tab := range []*pageTab{js, nojs} {
			tab.expect(`[...document.getElementById('variant').options].map((o) => o.value).join()`, ",shoe-41,shoe-42")
			tab.expect(`document.getElementById('variant').labels[0].innerText`, "Variant")
			tab.expect(`document.getElementById('variant').required`, true)
		}
		js.expect(`document.getElementById('variant').value`, "shoe-42")
		nojs.expect(`document.getElementById('variant').value`, "")
		shoot(t, js.ctx, shots, "skus-ready.png")
		shoot(t, nojs.ctx, shots, "skus-ready-nojs.png")
		js.axe(axe, "js-ready-skus")
		nojs.axe(axe, "nojs-ready-skus")

		// ordered is the order the page answered, which must name sku.
		orderRE := regexp.MustCompile(`^Order (ord_[^:]+): received, now being processed$`)
		ordered := func(tab *pageTab, user, sku string) {
			t.Helper()
			var answer string
			testenv.Eventually(t, 30*time.Second, func() bool {
				answer, _ = chromedp.Run(tab.ctx, chromedp.Evaluate[string](`document.getElementById('answer').textContent`))
				return orderRE.MatchString(answer)
			}, "order answer = %q", answer)
			id := orderRE.FindStringSubmatch(answer)[1]
			if _, o := call(t, "GET", s.base+"/v1/orders/"+id, "", map[string]string{"X-User-Id": user}); o["sku"] != sku || o["status"] != "PENDING" {
				t.Errorf("GET order %s of %s = %v, want PENDING %s", id, user, o, sku)
			}
		}
		js.do("order", chromedp.Click(chromedp.CSS(`#order`)))
		ordered(js, "skus-js", "shoe-42")
		js.expect(`document.getElementById('variant').disabled && document.getElementById('order').disabled`, true)
		nojs.eval(`document.getElementById('variant').value = 'shoe-41'`) // the shopper's choice
		nojs.submit(`#order`, "READY")
		ordered(nojs, "skus-nojs", "shoe-41")
	})

	t.Run("variants sold out", func(t *testing.T) {
		// A stock-aware queue of variants: READY shows a variant that ran
		// out while the shopper waited as sold out, and it cannot be
		// chosen (not even as ?sku= named it), with and without
		// JavaScript; once nothing is left the page says so instead of the
		// form, with the focus on the heading — page.js by itself, from
		// its polls. (SKUs of its own: a queue selling the shoes above
		// would share their units.)
		axe := axeSource(t)
		s := s.with(t)
		for sku, n := range map[string]int{"boot-41": 3, "boot-42": 0, "boot-43": 1} {
			s.stock(sku, n)
		}
		q := queue(t, "soldout", `{"targetActive": 5, "skus": ["boot-41", "boot-42", "boot-43"], "rateLimit": `+limitsOff+`}`)
		first := q.join("first")
		// The line has the stock (the admitter copies it from the store)
		// before anyone is admitted.
		waitSKUs(t, q, first, "boot-41,boot-43")
		js := newTab(t, browserCtx, true, nil)
		js.open(q.page("soldout-js", "&sku=boot-42"))
		js.waitStatus("WAITING")
		nojs := newTab(t, browserCtx, false, nil)
		nojs.open(q.page("soldout-nojs", "&sku=boot-42"))
		nojs.submit(`#join button`, "WAITING")
		q.open(nojs.ticket())
		js.waitStatus("READY")
		nojs.submit(`#waiting form button`, "READY")
		for _, tab := range []*pageTab{js, nojs} {
			tab.expectSoon(`document.activeElement.id`, "variant")
			tab.expect(`[...document.getElementById('variant').options].map((o) => o.value + (o.disabled ? ':off' : '')).join()`, ",boot-41,boot-42:off,boot-43")
			tab.expect(`document.querySelector('#variant option[value="boot-42"]').textContent`, "boot-42 (sold out)")
			tab.expect(`document.getElementById('variant').value`, "")
			tab.expect(`!document.getElementById('order-form').hidden && document.getElementById('sold-out').textContent === ''`, true)
		}
		shoot(t, js.ctx, shots, "soldout-ready.png")
		js.axe(axe, "js-ready-soldout")
		nojs.axe(axe, "nojs-ready-soldout")

		for _, sku := range []string{"boot-41", "boot-42", "boot-43"} {
			s.stock(sku, 0)
		}
		waitSKUs(t, q, first, "")
		nojs.submit(`#ready form:not(#order-form) button`, "READY") // check my place
		const nothing = "Sold out: everything was sold while you waited, so there is nothing left to order."
		testenv.Eventually(t, 30*time.Second, func() error {
			if got := js.eval(`document.getElementById('sold-out').textContent`); got != nothing {
				return fmt.Errorf("%q", got)
			}
			return nil
		}, "the JavaScript page's #sold-out once nothing is left, want %q", nothing)
		for _, tab := range []*pageTab{js, nojs} {
			tab.expect(`document.getElementById('order-form').hidden && getComputedStyle(document.getElementById('order-form')).display === 'none'`, true)
			tab.expect(`document.getElementById('sold-out').textContent`, nothing)
			tab.expectSoon(`document.activeElement.id`, "ready-title")
		}
		shoot(t, js.ctx, shots, "soldout-nothing-left.png")
		js.axe(axe, "js-ready-nothing-left")
		nojs.axe(axe, "nojs-ready-nothing-left")
	})

	t.Run("axe", func(t *testing.T) {
		axe := axeSource(t)
		js := newTab(t, browserCtx, true, nil)
		nojs := newTab(t, browserCtx, false, nil)
		audit := func(tab *pageTab, name string) {
			t.Helper()
			tab.axe(axe, name)
			shoot(t, tab.ctx, shots, "axe-"+name+".png")
		}

		waiting := queue(t, "axe", open)
		waiting.join("first")
		nojs.open(waiting.page("axe-nojs", ""))
		audit(nojs, "nojs-join")
		nojs.submit(`#join button`, "WAITING")
		audit(nojs, "nojs-waiting")
		js.open(waiting.page("axe-js", ""))
		js.waitStatus("WAITING")
		audit(js, "js-waiting")
		waiting.open(nojs.ticket())
		nojs.submit(`#waiting form button`, "READY")
		audit(nojs, "nojs-ready")
		js.waitStatus("READY")
		audit(js, "js-ready")

		drop := s.queueOf(t, s.queue+"-axe-drop", `{"targetActive": 5, "rateLimit": `+limitsOff+`, "opensAt": "`+rfc3339(time.Now().Add(90*time.Minute))+`"}`)
		js.open(drop.page("axe-js", "&lang=ja"))
		js.waitStatus("PRE_QUEUE")
		audit(js, "js-prequeue-ja")
		nojs.open(drop.page("axe-nojs", ""))
		nojs.submit(`#join button`, "PRE_QUEUE")
		audit(nojs, "nojs-prequeue")

		closed := s.queueOf(t, s.queue+"-axe-closed", `{"targetActive": 5, "rateLimit": `+limitsOff+`, "state": "closed", "closedReason": "sold_out"}`)
		js.open(closed.page("axe-js", ""))
		js.waitStatus("CLOSED")
		audit(js, "js-closed")
		nojs.open(closed.page("axe-nojs", "&lang=de"))
		nojs.submit(`#join button`, "CLOSED")
		audit(nojs, "nojs-closed-de")

		maint := s.queueOf(t, s.queue+"-axe-maint", `{"targetActive": 5, "rateLimit": `+limitsOff+`, "mode": "reject"}`)
		js.open(maint.page("axe-js", ""))
		js.waitStatus("MAINTENANCE")
		audit(js, "js-maintenance")
		nojs.open(maint.page("axe-nojs", ""))
		nojs.submit(`#join button`, "MAINTENANCE")
		audit(nojs, "nojs-maintenance")
	})
}

// waitSKUs waits until a poll of the ticket of q names the SKUs with units
// left that want lists, comma-separated: the line has the stock the store
// reported last.
func waitSKUs(t *testing.T, q *line, tk, want string) {
	t.Helper()
	var got map[string]any
	testenv.Eventually(t, 30*time.Second, func() bool {
		got = q.poll(tk)
		skus, _ := got["skusAvailable"].([]any)
		names := make([]string, len(skus))
		for i, s := range skus {
			names[i], _ = s.(string)
		}
		return got["stock"] != nil && strings.Join(names, ",") == want
	}, "poll of %s = %v, want the SKUs with units left %q", q.name, lazy(func() string { return fmt.Sprint(got) }), want)
}

// pageTab is one tab of the shared browser.
type pageTab struct {
	t   *testing.T
	ctx context.Context
	js  bool
}

// newTab opens a tab, with JavaScript off when js is false (as a browser
// with scripts disabled: <noscript> shows) and extra request headers.
func newTab(t *testing.T, browserCtx context.Context, js bool, header map[string]string) *pageTab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browserCtx)
	t.Cleanup(cancel)
	tab := &pageTab{t: t, ctx: ctx, js: js}
	tab.do("viewport", chromedp.EmulateViewport(390, 844))
	// Each tab believes it has the focus, as a window in front does.
	if _, err := chromedp.Call(ctx, emulation.SetFocusEmulationEnabled, emulation.SetFocusEmulationEnabledParams{Enabled: true}); err != nil {
		t.Fatal(err)
	}
	if !js {
		if _, err := chromedp.Call(ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true}); err != nil {
			t.Fatal(err)
		}
	}
	if header != nil {
		hd := network.Headers{}
		for k, v := range header {
			hd[k] = v
		}
		if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
			t.Fatal(err)
		}
		if _, err := chromedp.Call(ctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: hd}); err != nil {
			t.Fatal(err)
		}
	}
	return tab
}

func (p *pageTab) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	if err := chromedp.Do(p.ctx, steps...); err != nil {
		p.t.Fatalf("%s: %v", what, err)
	}
}

func (p *pageTab) open(url string) { p.t.Helper(); p.do("open "+url, chromedp.Navigate(url)) }

// ticket is the ticket the page without JavaScript carries in its forms.
func (p *pageTab) ticket() string {
	p.t.Helper()
	tk, _ := p.eval(`(document.querySelector('input[name=ticket]') || {value: ''}).value`).(string)
	if tk == "" {
		p.t.Fatal("the page carries no ticket in its forms")
	}
	return tk
}

func (p *pageTab) key(k string) { p.t.Helper(); p.do("key", chromedp.KeyEvent(k)) }

// eval runs js in the page (DevTools runs it even where the page's own
// scripts are off).
func (p *pageTab) eval(js string) any {
	p.t.Helper()
	v, err := chromedp.Run(p.ctx, chromedp.Evaluate[any](js))
	if err != nil {
		p.t.Fatalf("%s: %v", js, err)
	}
	return v
}

func (p *pageTab) expect(js string, want any) {
	p.t.Helper()
	if got := p.eval(js); fmt.Sprint(got) != fmt.Sprint(want) {
		p.t.Errorf("%s = %v, want %v", js, got, want)
	}
}

// expectSoon is expect for what the browser does a moment after the page
// is complete: autofocus is applied at its next rendering update, and a
// loaded machine may check before it and find activeElement still the body.
func (p *pageTab) expectSoon(js string, want any) {
	p.t.Helper()
	testenv.Eventually(p.t, 5*time.Second, func() error {
		if got := p.eval(js); fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("%v", got)
		}
		return nil
	}, "%s, want %v", js, want)
}

func (p *pageTab) expectPrefix(js, prefix string) {
	p.t.Helper()
	if got := fmt.Sprint(p.eval(js)); !strings.HasPrefix(got, prefix) {
		p.t.Errorf("%s = %q, want it to start with %q", js, got, prefix)
	}
}

// waitStatus waits until the page's data-status is want.
func (p *pageTab) waitStatus(want string) {
	p.t.Helper()
	var got string
	testenv.Eventually(p.t, 30*time.Second, func() bool {
		got, _ = chromedp.Run(p.ctx, chromedp.Evaluate[string](`(document.getElementById('usher') || {dataset: {}}).dataset.status`))
		return got == want
	}, "data-status = %q, want %q", got, want)
}

// submit clicks a form's button and waits for the page the gateway
// answers with, in status want.
func (p *pageTab) submit(button, want string) {
	p.t.Helper()
	p.markStale()
	p.do("click "+button, chromedp.Click(chromedp.CSS(button)))
	p.waitFresh(want)
}

// keySubmit presses k on the focused button and waits for the answer.
func (p *pageTab) keySubmit(k, want string) {
	p.t.Helper()
	p.markStale()
	p.key(k)
	p.waitFresh(want)
}

func (p *pageTab) markStale() {
	p.t.Helper()
	p.eval(`document.documentElement.dataset.stale = '1'`)
}

// waitFresh waits for a new document (not the one markStale marked) in
// status want.
func (p *pageTab) waitFresh(want string) {
	p.t.Helper()
	var got string
	testenv.Eventually(p.t, 30*time.Second, func() bool {
		got, _ = chromedp.Run(p.ctx, chromedp.Evaluate[string](`document.readyState === 'complete' && !document.documentElement.dataset.stale ? document.getElementById('usher').dataset.status : 'stale'`))
		return got == want
	}, "after the form: data-status = %q, want %q", got, want)
}

// focusVisible checks that the focused element shows a focus ring a
// keyboard user can see: :focus-visible, with an outline of 2px or more.
func (p *pageTab) focusVisible() {
	p.t.Helper()
	p.expect(`(() => { const e = document.activeElement, s = getComputedStyle(e);
		return e !== document.body && e.matches(':focus-visible') && s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) >= 2; })()`, true)
}

// axeSHA256 pins the vendored axe-core (testdata/axe/README.md).
const axeSHA256 = "29348999450cdf2849a8e70b7912fc2da85a849da39c0d0d5394f51d4a9ed95c"

func axeSource(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "axe", "axe.min.js"))
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != axeSHA256 {
		t.Fatalf("testdata/axe/axe.min.js is not axe-core 4.14.1 (SHA-256 %x): see testdata/axe/README.md", sum)
	}
	return string(b)
}

// axe runs axe-core's default rules (WCAG 2.0–2.2 A and AA, and best
// practices) on the page as it stands and fails on any violation.
func (p *pageTab) axe(src, name string) {
	p.t.Helper()
	if !p.js {
		// The page's own scripts stay off (the document was parsed and
		// laid out without them: <noscript> shown); axe needs timers,
		// which a page with scripting off does not run.
		if _, err := chromedp.Call(p.ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: false}); err != nil {
			p.t.Fatal(err)
		}
		defer func() {
			if _, err := chromedp.Call(p.ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true}); err != nil {
				p.t.Fatal(err)
			}
		}()
	}
	if !p.js {
		// axe runs as a script, so it takes <noscript> for never shown
		// and would skip all it holds: the join, the hints, the buttons to
		// check again. Here they are shown (they were parsed as elements):
		// put them where the page shows them, as they are.
		p.eval(`for (const n of [...document.querySelectorAll('noscript')]) n.replaceWith(...n.childNodes); true`)
	}
	if _, err := chromedp.Run(p.ctx, chromedp.Evaluate[bool](src+";\ntypeof axe === 'object'")); err != nil {
		p.t.Fatalf("load axe-core: %v", err)
	}
	out, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](`axe.run(document, {resultTypes: ['violations']}).then((r) => JSON.stringify({
		passes: r.passes.length,
		violations: r.violations.map((v) => ({id: v.id, impact: v.impact, help: v.help,
			nodes: v.nodes.map((n) => n.target.join(' ') + ' — ' + n.failureSummary)}))}))`, chromedp.EvalAwaitPromise))
	if err != nil {
		p.t.Fatalf("axe %s: %v", name, err)
	}
	var res struct {
		Passes     int
		Violations []struct {
			ID, Impact, Help string
			Nodes            []string
		}
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		p.t.Fatal(err)
	}
	for _, v := range res.Violations {
		p.t.Errorf("axe, %s page: %s (%s): %s\n  %s", name, v.ID, v.Impact, v.Help, strings.Join(v.Nodes, "\n  "))
	}
	p.t.Logf("axe, %s page: %d rules passed, %d violated", name, res.Passes, len(res.Violations))
}
