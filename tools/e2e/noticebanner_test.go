package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"usher/internal/testenv"
	"usher/tools/internal/chromium"
)

// xssNotice is a notice that would run a script, were it written as HTML.
const xssNotice = `<img src="x" onerror="window.pwned = 1">Sizes 40-42 <b>back</b> at 10:30 & "soon"`

// putNotice puts up a notice on queue q of s through the admin API.
func putNotice(t *testing.T, s *shop, q, message, level string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"message": message, "level": level})
	if code, got := call(t, "PUT", s.base+"/v1/admin/queues/"+q+"/notice", string(body), s.admin); code != 200 {
		t.Fatalf("PUT notice = %d %v", code, got)
	}
}

// takeDownNotice takes the notice of queue q of s down.
func takeDownNotice(t *testing.T, s *shop, q string) {
	t.Helper()
	if code, got := call(t, "DELETE", s.base+"/v1/admin/queues/"+q+"/notice", "", s.admin); code != 204 {
		t.Fatalf("DELETE notice = %d %v", code, got)
	}
}

// The banner in a real browser, against the real notifier: a notice put up
// through the admin API appears on an open page over its stream, changes
// level, is written as text (never markup), is taken down, and reaches
// the page by polling too while the stream is down; the page without
// JavaScript shows it; axe-core finds nothing wrong with a banner shown.
func TestNoticeBannerInABrowser(t *testing.T) {
	t.Parallel()
	bin := chromium.Path(t)
	s := pageShop(t, "gateway", "admitter", "notifier")
	q := s.heldLine(t, s.queue, `{"targetActive": 5, "rateLimit": `+limitsOff+`}`)
	q.join("ahead") // so the page waits
	browserCtx := browser(t, bin)
	shots := screenshotDirs(t)
	axe := axeSource(t)

	// banner is what the page's banner says, as "level role | label |
	// text" ("" for none).
	const banner = `(() => {
		const out = [];
		for (const l of ['info', 'warning']) {
			const r = document.getElementById('notice-' + l);
			if (!r.textContent) continue;
			const label = r.querySelector('.notice-label'), text = r.querySelector('.notice-text');
			out.push(l + ' ' + r.getAttribute('role') + ' | ' + (label && label.textContent) + ' | ' + (text && text.textContent));
		}
		return out.join(' ; ');
	})()`
	waitBanner := func(tab *pageTab, want string) {
		t.Helper()
		var got string
		testenv.Eventually(t, 30*time.Second, func() bool {
			got, _ = chromedp.Run(tab.ctx, chromedp.Evaluate[string](banner))
			return got == want
		}, "banner = %q, want %q", got, want)
	}
	waitConn := func(tab *pageTab, want ...string) {
		t.Helper()
		var got string
		testenv.Eventually(t, 30*time.Second, func() bool {
			got, _ = chromedp.Run(tab.ctx, chromedp.Evaluate[string](`document.getElementById('usher').dataset.conn`))
			return strings.Contains(strings.Join(want, " "), got) && got != ""
		}, "data-conn = %q, want one of %v", got, want)
	}

	js := newTab(t, browserCtx, true, nil)
	js.open(q.page("notice-js", ""))
	js.waitStatus("WAITING")
	waitConn(js, "live")
	waitBanner(js, "")

	// Over the stream.
	putNotice(t, s, q.name, "Restock at 10:30: stay in line.", "info")
	waitBanner(js, "info status | Notice from the shop | Restock at 10:30: stay in line.")
	js.expect(`document.getElementById('usher').dataset.conn`, "live") // the stream brought it, not a poll
	js.axe(axe, "js-notice-info")
	shoot(t, js.ctx, shots, "notice-info.png")

	putNotice(t, s, q.name, xssNotice, "warning")
	waitBanner(js, "warning alert | Important notice from the shop | "+xssNotice)
	js.expect(`document.querySelectorAll('#usher img, #usher b').length`, 0)
	js.expect(`window.pwned === undefined`, true)
	js.axe(axe, "js-notice-warning")
	shoot(t, js.ctx, shots, "notice-warning.png")

	// Without JavaScript: on the page, and on the answer to its join.
	nojs := newTab(t, browserCtx, false, nil)
	nojs.open(q.page("notice-nojs", ""))
	waitBanner(nojs, "warning alert | Important notice from the shop | "+xssNotice)
	nojs.submit(`#join button`, "WAITING")
	waitBanner(nojs, "warning alert | Important notice from the shop | "+xssNotice)
	nojs.expect(`document.querySelectorAll('#usher img, #usher b').length`, 0)
	nojs.axe(axe, "nojs-notice-warning")
	shoot(t, nojs.ctx, shots, "nojs-notice-warning.png")

	takeDownNotice(t, s, q.name)
	waitBanner(js, "")
	nojs.submit(`#waiting form button`, "WAITING")
	waitBanner(nojs, "")

	// While the stream is down the page polls, and the poll answers carry
	// the notice (and its absence once taken down).
	if err := s.running["notifier"].interrupt(t); err != nil {
		t.Fatalf("notifier after SIGINT: %v", err)
	}
	waitConn(js, "reconnecting", "polling")
	putNotice(t, s, q.name, "The stream is down; this came by polling.", "info")
	waitBanner(js, "info status | Notice from the shop | The stream is down; this came by polling.")
	takeDownNotice(t, s, q.name)
	waitBanner(js, "")
}
