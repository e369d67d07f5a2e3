package main

import (
	"encoding/json"
	"html"
	"regexp"
	"strings"
	"testing"
)

// xssNotice is a notice that would run a script, were it written as HTML.
const xssNotice = `<img src="x" onerror="window.pwned = 1">Sizes 40-42 <b>back</b> at 10:30 & "soon"`

// noticeRE reads a notice region of the page: its role, label and text.
var noticeRE = regexp.MustCompile(`<div id="notice-(info|warning)" class="notice[^"]*" role="(status|alert)">(?:<strong class="notice-label">([^<]*)</strong> <span class="notice-text">([^<]*)</span>)?</div>`)

// pageNotice is the notice the page shows, as "level role | label | text"
// ("" for none), read from its server-rendered HTML.
func pageNotice(t *testing.T, b []byte) string {
	t.Helper()
	regions := noticeRE.FindAllSubmatch(b, -1)
	if len(regions) != 2 {
		t.Fatalf("the page has %d notice regions, want 2 (info and warning):\n%s", len(regions), b)
	}
	var shown []string
	for _, m := range regions {
		if len(m[4]) > 0 {
			shown = append(shown, string(m[1])+" "+string(m[2])+" | "+html.UnescapeString(string(m[3]))+" | "+html.UnescapeString(string(m[4])))
		}
	}
	return strings.Join(shown, " ; ")
}

// putNotice puts up a notice on h's queue through the admin API.
func (h *harness) putNotice(message, level string) {
	h.t.Helper()
	body, _ := json.Marshal(map[string]string{"message": message, "level": level})
	if r := h.do("PUT", "/v1/admin/queues/"+h.queue+"/notice", string(body), adminAuth); r.status != 200 {
		h.t.Fatalf("PUT notice = %d %s", r.status, r.raw)
	}
}

// takeDownNotice takes h's queue's notice down.
func (h *harness) takeDownNotice() {
	h.t.Helper()
	if r := h.do("DELETE", "/v1/admin/queues/"+h.queue+"/notice", "", adminAuth); r.status != 204 {
		h.t.Fatalf("DELETE notice = %d %s", r.status, r.raw)
	}
}

// The page without JavaScript shows the queue's notice, as text, in the
// live region of its level — on the page and on every form's answer —
// and nothing once it is taken down.
func TestPageShowsTheNoticeWithoutJavaScript(t *testing.T) {
	h := newHarness(t)
	page := "/q/" + h.queue
	if got := pageNotice(t, h.do("GET", page, "", nil).raw); got != "" {
		t.Fatalf("page without a notice shows %q", got)
	}

	h.putNotice(xssNotice, "warning")
	r := h.do("GET", page+"?user=nojs", "", nil)
	want := "warning alert | Important notice from the shop | " + xssNotice
	if got := pageNotice(t, r.raw); got != want {
		t.Fatalf("page shows notice %q, want %q", got, want)
	}
	if strings.Contains(string(r.raw), "<img") || strings.Contains(string(r.raw), "<b>") {
		t.Fatalf("the notice became markup:\n%s", r.raw)
	}
	r = h.postForm(page, map[string]string{"action": "join", "user": "nojs"}, nil)
	if got := pageNotice(t, r.raw); match(statusRE, r.raw) != "WAITING" || got != want {
		t.Fatalf("join form: status %q, notice %q; want WAITING with %q", match(statusRE, r.raw), got, want)
	}
	tkt := match(formTicketRE, r.raw)

	h.putNotice("Restock at 10:30.\nStay in line.", "info")
	r = h.postForm(page+"?lang=de", map[string]string{"action": "check", "ticket": tkt, "user": "nojs"}, nil)
	if got, want := pageNotice(t, r.raw), "info status | Hinweis des Shops | Restock at 10:30.\nStay in line."; got != want {
		t.Fatalf("check form in German shows notice %q, want %q", got, want)
	}

	h.takeDownNotice()
	r = h.postForm(page, map[string]string{"action": "check", "ticket": tkt, "user": "nojs"}, nil)
	if got := pageNotice(t, r.raw); got != "" {
		t.Fatalf("after the notice was taken down the page shows %q", got)
	}
}
