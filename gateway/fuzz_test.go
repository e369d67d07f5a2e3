package main

import (
	"net/url"
	"strings"
	"testing"
)

// No request, however odd, gets a 500 or a non-problem error.
func FuzzJoinAndPoll(f *testing.F) {
	h := newHarness(f)
	f.Add("alice", h.queue, "t1.x.y.1.z")
	f.Add("", "", "")
	f.Add("a b", "../admin", "%00")
	f.Add("u@x.io", h.queue, h.join("bob").str("ticket"))
	// Sent as written too (asSegment): a name with its characters encoded
	// by the client, a stray %, an escaped slash or dot-dot.
	f.Add("carl", encoded(h.queue), encoded(h.join("carl").str("ticket")))
	f.Add("dora", "%"+h.queue, "%zz")
	f.Add("eve", "a%2Fb", "%2E%2E")
	f.Add("fay", "%2564emo", "%00")
	f.Fuzz(func(t *testing.T, user, queue, tkt string) {
		if !validHeaderValue(user) {
			return // not something an HTTP client can send
		}
		if len(user)+len(url.PathEscape(queue))+len(url.PathEscape(tkt)) > 4096 {
			// Beyond the header limit; fiber's in-memory transport fails
			// such requests itself. TestOversizedHeadersAre431 covers them
			// over a real socket.
			return
		}
		h := h.with(t)
		path := "/v1/queues/" + url.PathEscape(queue) + "/tickets"
		rs := []response{
			h.do("POST", path, "", map[string]string{"X-User-Id": user}),
			h.do("GET", path+"/"+url.PathEscape(tkt), "", nil),
		}
		if asSegment(queue) && asSegment(tkt) {
			raw := "/v1/queues/" + queue + "/tickets"
			rs = append(rs,
				h.doTarget("POST", raw, map[string]string{"X-User-Id": user}),
				h.doTarget("GET", raw+"/"+tkt, nil))
		}
		for _, r := range rs {
			if r.status >= 500 || (r.status >= 400 && !isProblem(r)) {
				t.Fatalf("status %d %s for user %q queue %q ticket %q", r.status, r.raw, user, queue, tkt)
			}
		}
	})
}

func FuzzAdminBody(f *testing.F) {
	h := newHarness(f)
	f.Add(`{"targetActive": 3}`)
	f.Add(`{"state":"closed","tickMs":10}`)
	f.Add(`{} {}`)
	f.Add(`[1,2]`)
	f.Add(`{"targetActive": 1e400}`)
	f.Add(`{"state": null, "challenge": {"mode": "log"}}`)
	f.Add(`{"TickMs": 5, "adaptive": {"Enabled": true}}`)
	f.Add(`{"opensAt": "2030-01-01T00:00:00Z", "skus": ["a"], "maxQuantity": 2, "notice": {"message": "hi"}}`)
	f.Add(`{"targetActive": 10, "targetActive": 100000}`)
	f.Add(`{"rateLimit": {"perIpBurst": 5, "perIpBurst": 500000}, "lottery": {"seed": "a", "seed": "b"}}`)
	f.Fuzz(func(t *testing.T, body string) {
		h := h.with(t)
		r := h.do("PUT", "/v1/admin/queues/fuzz-"+h.queue, body, map[string]string{"Authorization": "Bearer secret-admin"})
		switch {
		case r.status == 200 || r.status == 201:
			if _, ok := h.gw.queues.Get("fuzz-" + h.queue); !ok {
				t.Fatalf("accepted %q but the queue is not in the catalog", body)
			}
		case r.status == 400 && isProblem(r):
		default:
			t.Fatalf("PUT %q = %d %s, want 2xx or a 400 problem", body, r.status, r.raw)
		}
	})
}

func validHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}

// asSegment reports whether s can be sent as a path segment as it is:
// RFC 3986's pchar, and % whether or not an escape follows.
func asSegment(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~!$&'()*+,;=:@%", c) >= 0) {
			return false
		}
	}
	return true
}

// Whatever a proxy (or someone posing as one) describes to the gate, and
// whatever the pass endpoint is sent, the answer is a decision or a
// problem: never a 500, never an error that is not problem+json.
func FuzzGate(f *testing.F) {
	h := newHarness(f)
	h.withGate(h.gateRule(""))
	pass, _ := h.pass("alice")
	f.Add("GET", "/shop/item?x=1", "shop.test", "https", "alice", pass, "text/html", "/shop/item")
	f.Add("POST", "/shop/../shop/cart", "shop.test:8443", "http", "bob", pass[:len(pass)/2], "*/*", "https://evil.test/")
	f.Add("", "", "", "", "", "", "", "")
	f.Add("get", "//x", "[::1]:80", "ftp", "a b", "p1.x.1.1.YQ.AA", "text/html", "javascript:alert(1)")
	f.Add("OPTIONS", "/shop/%zz", "user@host", "HTTPS", "alice", "p1...", "", "/\\evil")
	f.Fuzz(func(t *testing.T, method, uri, host, proto, user, cookie, accept, ret string) {
		for _, v := range []string{method, uri, host, proto, user, cookie, accept, ret} {
			if !validHeaderValue(v) || len(v) > 1024 {
				return // not something an HTTP client can send, or past the header limit
			}
		}
		h := h.with(t)
		hdr := map[string]string{"X-Forwarded-Method": method, "X-Forwarded-Uri": uri, "X-Forwarded-Host": host,
			"X-Forwarded-Proto": proto, "X-User-Id": user, "Accept": accept}
		if cookie != "" && !strings.ContainsAny(cookie, ";,\" ") {
			hdr["Cookie"] = "usher_pass=" + cookie
		}
		rs := []response{
			h.do("GET", "/v1/gate", "", hdr),
			h.do("GET", "/v1/gate/pass?ticket="+url.QueryEscape(cookie)+"&return="+url.QueryEscape(ret), "", hdr),
		}
		for _, r := range rs {
			if r.status >= 500 || (r.status >= 400 && !isProblem(r)) {
				t.Fatalf("status %d %s for %q %q %q %q user %q cookie %q", r.status, r.raw, method, uri, host, proto, user, cookie)
			}
		}
	})
}
