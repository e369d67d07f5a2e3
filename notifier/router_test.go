package main

import (
	"io"
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

// A path the document does not hold is 404 not-found, whatever Go's
// ServeMux would make of it: it answered a path with "//" or a "." or ".."
// segment with a 307 to the path it cleans it to (RFC 9110's URI is not
// cleaned: /v1/../healthz is not /healthz). Sent by hand, as a client that
// does not clean paths itself sends them.
func TestAPathServeMuxWouldCleanIsNotFound(t *testing.T) {
	w := newWorld(t)
	n := w.start()
	stream := strings.TrimPrefix(n.url(w.queue, w.join(1, "alice")), "http://"+n.addr)
	tests := []struct{ name, path string }{
		{"a doubled slash", "/" + stream},
		{"..", "/v1/../healthz"},
		{".", "/./healthz"},
		{"a trailing .", "/healthz/."},
		{"the ticket's own path, up one", stream + "/.."},
		{"an escaped ..", strings.Replace(stream, "/tickets/", "/tickets/%2e%2e/", 1)},
		{"a doubled slash inside", "/v1/queues/" + w.queue + "//tickets/x/events"},
	}
	for _, tt := range tests {
		path := tt.path
		t.Run(tt.name, func(t *testing.T) {
			for _, method := range []string{"GET", "OPTIONS", "DELETE"} {
				res, err := http.ReadResponse(onTheWire(t, n, method, path, "Origin: http://example.test"), nil)
				if err != nil {
					t.Fatalf("%s %s: %v", method, path, err)
				}
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusNotFound || res.Header.Get("Content-Type") != "application/problem+json" ||
					res.Header.Get("Location") != "" || !strings.Contains(string(body), "/not-found") {
					t.Errorf("%s %s = %d, Location %q, %s %s; want 404, a not-found problem",
						method, path, res.StatusCode, res.Header.Get("Location"), res.Header.Get("Content-Type"), body)
				}
			}
		})
	}
}

// Headers over 1 MB are answered 431 in plain text, and the connection
// closed, as the document says — 2 MB of them too, sent at once (curl
// cannot send them: it refuses a request over 1 MB itself, "(27) Out of
// memory", before it connects).
func TestHeadersOverAMegabyteAre431(t *testing.T) {
	w := newWorld(t)
	n := w.start()
	for _, size := range []int{1<<20 + 64<<10, 2 << 20} {
		res, err := http.ReadResponse(onTheWire(t, n, "GET", "/healthz", "X-Big: "+strings.Repeat("a", size)), nil)
		if err != nil {
			t.Fatalf("a %d-byte header: %v", size, err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusRequestHeaderFieldsTooLarge || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/plain") || !res.Close {
			t.Errorf("a %d-byte header = %d %s, close %v: %s; want 431 in plain text, the connection closed",
				size, res.StatusCode, res.Header.Get("Content-Type"), res.Close, body)
		}
	}
}
