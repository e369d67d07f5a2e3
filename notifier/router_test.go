package main

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"usher/api/contract"
)

// A method a path of the notifier does not take is answered 405
// method-not-allowed, with Allow naming the ones it does (RFC 9110
// §15.5.6), for every path the API contract gives the notifier: the
// operational endpoints as much as the stream. A path that is no resource
// is 404 not-found. A method no route knows (FOO) is one the path does
// not take all the same. Both are problem documents (call checks each answer
// against the document).
func TestAMethodAPathDoesNotTakeIs405WithAllow(t *testing.T) {
	w := newWorld(t)
	n := w.start()
	stream := n.url(w.queue, w.join(1, "alice"))
	base := "http://" + n.addr
	tests := []struct {
		template, url, allow string
	}{
		{"/healthz", base + "/healthz", "GET, HEAD"},
		{"/readyz", base + "/readyz", "GET, HEAD"},
		{"/metrics", base + "/metrics", "GET, HEAD"},
		{eventsPath, stream, "GET, OPTIONS"},
	}
	// Every path the document gives the notifier is in the table.
	var tried []string
	for _, tt := range tests {
		tried = append(tried, tt.template)
	}
	for _, r := range contractDoc(t).Routes(contract.Notifier) {
		if _, tmpl, _ := strings.Cut(r, " "); !slices.Contains(tried, tmpl) {
			t.Errorf("the document gives the notifier %s, which this test does not try", r)
		}
	}
	for _, tt := range tests {
		for _, method := range []string{"POST", "PUT", "PATCH", "DELETE", "FOO"} {
			res, body := call(t, method, tt.url, nil)
			if res.StatusCode != http.StatusMethodNotAllowed || res.Header.Get("Allow") != tt.allow ||
				res.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(string(body), "/method-not-allowed") {
				t.Errorf("%s %s = %d, Allow %q, %s %s; want 405, Allow %q, a method-not-allowed problem",
					method, tt.template, res.StatusCode, res.Header.Get("Allow"), res.Header.Get("Content-Type"), body, tt.allow)
			}
		}
	}
	for _, path := range []string{"/healthz/x", "/v1/queues/" + w.queue, "/metricsz"} {
		res, body := call(t, "POST", base+path, nil)
		if res.StatusCode != http.StatusNotFound || res.Header.Get("Allow") != "" || !strings.Contains(string(body), "/not-found") {
			t.Errorf("POST %s = %d, Allow %q, %s; want 404 not-found without Allow", path, res.StatusCode, res.Header.Get("Allow"), body)
		}
	}
}
