package main

import (
	"strings"
	"testing"
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
