package main

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// limited sets the harness queue's rate limits and freezes the gateway's
// clock, so every decision below is exact.
func (h *harness) limited(rateLimit string) func(time.Duration) {
	h.t.Helper()
	h.putQueue(h.queue, `{"targetActive": 5, "rateLimit": `+rateLimit+`}`, 200)
	start := time.Now()
	now := start
	h.api.now = func() time.Time { return now }
	return func(d time.Duration) { now = start.Add(d) }
}

func (h *harness) joinFrom(user, ip string) response {
	h.t.Helper()
	return h.do("POST", "/v1/queues/"+h.queue+"/tickets", "", map[string]string{"X-User-Id": user, "X-Forwarded-For": ip})
}

func TestJoinsOverTheUserLimitAre429(t *testing.T) {
	h := newHarness(t)
	at := h.limited(`{"perIpPerSecond": 0, "perUserPerSecond": 1, "perUserBurst": 2}`)
	for i := range 2 {
		if r := h.join("alice"); r.status != 202 && r.status != 200 {
			t.Fatalf("join %d = %d %s, want it allowed (burst 2)", i+1, r.status, r.raw)
		}
	}
	r := h.join("alice")
	if r.status != 429 || !isProblem(r) {
		t.Fatalf("third join = %d %s, want a 429 problem", r.status, r.raw)
	}
	for k, want := range map[string]string{
		"Retry-After":      "1",
		"RateLimit-Policy": `"peruser";q=2;w=2`,
		"RateLimit":        `"peruser";r=0;t=1`,
	} {
		if got := r.header.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	for _, old := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
		if r.header.Get(old) != "" {
			t.Errorf("%s is set; the IETF fields replace it", old)
		}
	}
	if r := h.join("bob"); r.status != 202 {
		t.Errorf("bob's join = %d %s, want 202: alice's limit is hers", r.status, r.raw)
	}
	at(time.Second)
	if r := h.join("alice"); r.status != 200 {
		t.Errorf("alice's join a second later = %d %s, want 200 with her ticket", r.status, r.raw)
	}
}

func TestJoinsOverTheIPLimitAre429(t *testing.T) {
	h := newHarness(t)
	h.api.ips = mustClientIPs(t, []string{"0.0.0.0/0", "::/0"}, "X-Forwarded-For")
	h.limited(`{"perIpPerSecond": 1, "perIpBurst": 3, "perUserPerSecond": 0}`)
	for i := range 3 {
		if r := h.joinFrom(fmt.Sprint("u", i), "192.0.2.1"); r.status != 202 {
			t.Fatalf("join %d from 192.0.2.1 = %d %s, want 202", i, r.status, r.raw)
		}
	}
	r := h.joinFrom("u3", "192.0.2.1")
	if got, want := r.header.Get("RateLimit"), `"perip";r=0;t=1`; r.status != 429 || got != want {
		t.Fatalf("fourth join from 192.0.2.1 = %d RateLimit %q, want 429 with %q", r.status, got, want)
	}
	if r := h.joinFrom("u4", "192.0.2.2"); r.status != 202 {
		t.Errorf("join from another address = %d %s, want 202", r.status, r.raw)
	}
	// An IPv6 subscriber's /64 is one client, however it picks addresses.
	for i := range 3 {
		h.joinFrom(fmt.Sprint("v", i), fmt.Sprintf("2001:db8:1:2::%x", i+1))
	}
	if r := h.joinFrom("v9", "2001:db8:1:2:ffff::1"); r.status != 429 {
		t.Errorf("fourth join from one /64 = %d, want 429", r.status)
	}
}

// Allowed answers tell the client its budget too.
func TestAllowedJoinsCarryTheRateLimitFields(t *testing.T) {
	h := newHarness(t)
	h.limited(`{"perIpPerSecond": 50, "perIpBurst": 100, "perUserPerSecond": 5, "perUserBurst": 10}`)
	r := h.join("alice")
	if got, want := r.header.Get("RateLimit-Policy"), `"perip";q=100;w=2, "peruser";q=10;w=2`; got != want {
		t.Errorf("RateLimit-Policy = %q, want %q", got, want)
	}
	if got, want := r.header.Get("RateLimit"), `"perip";r=99;t=1, "peruser";r=9;t=1`; got != want {
		t.Errorf("RateLimit = %q, want %q", got, want)
	}
}

// A waiting shopper must see the line: polls are never limited.
func TestPollsAreNotRateLimited(t *testing.T) {
	h := newHarness(t)
	h.limited(`{"perIpPerSecond": 1, "perIpBurst": 1, "perUserPerSecond": 1, "perUserBurst": 1}`)
	tk := h.join("alice").str("ticket")
	for i := range 50 {
		r := h.poll(tk)
		if r.status != 200 || r.header.Get("RateLimit") != "" {
			t.Fatalf("poll %d = %d %s (RateLimit %q), want 200 without rate limiting", i, r.status, r.raw, r.header.Get("RateLimit"))
		}
	}
}

func TestLimitsOffCostNothing(t *testing.T) {
	h := newHarness(t) // its queue has every limit off
	for i := range 150 {
		if r := h.join("alice"); r.status >= 400 || r.header.Get("RateLimit") != "" {
			t.Fatalf("join %d = %d %s, want no limit at all", i, r.status, r.raw)
		}
	}
}

// The queue's orders-per-second cap holds whoever orders, in case the
// line is ever bypassed.
func TestOrdersPerSecondCap(t *testing.T) {
	h := newOrderHarness(t)
	h.putQueue(h.queue, `{"targetActive": 5, "sku": "sku-1", "rateLimit": {"perIpPerSecond": 0, "perUserPerSecond": 0, "ordersPerSecond": 2}}`, 200)
	toks := h.ready("buyer-0", "buyer-1", "buyer-2")
	now := time.Now()
	h.api.now = func() time.Time { return now }
	for i := range 3 {
		user := fmt.Sprint("buyer-", i)
		tok := toks[i]
		r := h.order(user, tok, `{"sku": "sku-1"}`)
		want := 202
		if i == 2 {
			want = 429
		}
		if r.status != want {
			t.Fatalf("order %d = %d %s, want %d", i, r.status, r.raw, want)
		}
		if want == 429 && (!isProblem(r) || r.header.Get("RateLimit") != `"orders";r=0;t=1` || r.header.Get("Retry-After") != "1") {
			t.Fatalf("refused order = %s %v, want a problem with the orders policy", r.raw, r.header)
		}
	}
}

func mustClientIPs(t testing.TB, proxies []string, header string) clientIPs {
	t.Helper()
	ips, err := parseClientIPs(proxies, header)
	if err != nil {
		t.Fatal(err)
	}
	return ips
}

func TestClientIP(t *testing.T) {
	behindLB := []string{"10.0.0.0/8", "2001:db8:ffff::/48"}
	tests := []struct {
		name    string
		proxies []string
		header  string
		peer    string
		values  []string
		want    string
	}{
		{"no proxies: the socket's peer, whatever the headers say", nil, "", "203.0.113.9", []string{"1.2.3.4"}, "203.0.113.9"},
		{"an untrusted peer's header is ignored", behindLB, "X-Forwarded-For", "203.0.113.9", []string{"1.2.3.4"}, "203.0.113.9"},
		{"behind the LB: the hop it appended", behindLB, "X-Forwarded-For", "10.1.1.1", []string{"198.51.100.7"}, "198.51.100.7"},
		{"what a client writes in front is not believed", behindLB, "X-Forwarded-For", "10.1.1.1", []string{"1.2.3.4, 198.51.100.7"}, "198.51.100.7"},
		{"trusted hops are skipped", behindLB, "X-Forwarded-For", "10.1.1.1", []string{"198.51.100.7, 10.2.2.2,10.3.3.3"}, "198.51.100.7"},
		{"several header lines read as one list", behindLB, "X-Forwarded-For", "10.1.1.1", []string{"198.51.100.7", "10.2.2.2"}, "198.51.100.7"},
		{"garbage stops at the nearest good hop", behindLB, "X-Forwarded-For", "10.1.1.1", []string{"<script>, 10.2.2.2"}, "10.2.2.2"},
		{"an empty header: the peer", behindLB, "X-Forwarded-For", "10.1.1.1", nil, "10.1.1.1"},
		{"every hop trusted: the farthest", behindLB, "X-Forwarded-For", "10.1.1.1", []string{"10.9.9.9"}, "10.9.9.9"},
		{"IPv6 and mapped IPv4", behindLB, "X-Forwarded-For", "::ffff:10.1.1.1", []string{"[2001:db8::1]", "2001:db8::2"}, "2001:db8::2"},
		{"a single-address header", []string{"173.245.48.0/20"}, "CF-Connecting-IP", "173.245.48.1", []string{" 198.51.100.7 "}, "198.51.100.7"},
		{"a single-address header twice is not believed", []string{"173.245.48.0/20"}, "CF-Connecting-IP", "173.245.48.1", []string{"1.1.1.1", "2.2.2.2"}, "173.245.48.1"},
		{"a single-address header with garbage", []string{"173.245.48.0/20"}, "CF-Connecting-IP", "173.245.48.1", []string{"nope"}, "173.245.48.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ips := mustClientIPs(t, tt.proxies, tt.header)
			var values [][]byte
			for _, v := range tt.values {
				values = append(values, []byte(v))
			}
			got := ips.resolve(netip.MustParseAddr(tt.peer), values)
			if got.String() != tt.want {
				t.Errorf("resolve(%s, %q) = %s, want %s", tt.peer, tt.values, got, tt.want)
			}
		})
	}
}

func TestParseClientIPsRefuses(t *testing.T) {
	tests := []struct {
		name    string
		proxies []string
		header  string
	}{
		{"a header without trusted proxies", nil, "X-Forwarded-For"},
		{"a proxy that is no address", []string{"10.0.0.0/8", "lb.internal"}, ""},
		{"a header name with a space", []string{"10.0.0.0/8"}, "X Forwarded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := parseClientIPs(tt.proxies, tt.header); err == nil {
				t.Errorf("parseClientIPs(%q, %q) = nil error", tt.proxies, tt.header)
			}
		})
	}
	ips := mustClientIPs(t, []string{"10.0.0.0/8"}, "")
	if ips.header != "X-Forwarded-For" {
		t.Errorf("header with proxies and none named = %q, want X-Forwarded-For", ips.header)
	}
}

func TestIPKey(t *testing.T) {
	tests := []struct{ in, want string }{
		{"192.0.2.1", "192.0.2.1"},
		{"2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"},
	}
	for _, tt := range tests {
		if got := ipKey(netip.MustParseAddr(tt.in)); got != tt.want {
			t.Errorf("ipKey(%s) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// Whatever a client writes into the header, the answer is the peer or one
// of the header's own entries, and the peer when it is not trusted.
func FuzzClientIP(f *testing.F) {
	ips := mustClientIPs(f, []string{"10.0.0.0/8", "fd00::/8"}, "X-Forwarded-For")
	f.Add("10.0.0.1", "1.2.3.4, 10.0.0.2")
	f.Add("203.0.113.1", "1.2.3.4")
	f.Add("fd00::1", ",,, ,[::1], fe80::1%eth0")
	f.Fuzz(func(t *testing.T, peer, header string) {
		p, err := netip.ParseAddr(peer)
		if err != nil {
			return
		}
		p = p.Unmap()
		got := ips.resolve(p, [][]byte{[]byte(header)})
		if !ips.isTrusted(p) && got != p {
			t.Fatalf("resolve(%s, %q) = %s: believed an untrusted peer's header", peer, header, got)
		}
		if got == p {
			return
		}
		for _, hop := range strings.Split(header, ",") {
			if a, err := netip.ParseAddr(strings.TrimSpace(hop)); err == nil && a.Unmap() == got {
				return
			}
		}
		t.Fatalf("resolve(%s, %q) = %s, an address from nowhere", peer, header, got)
	})
}

// BenchmarkJoinWithLimits is BenchmarkJoin with both join limits on (set
// high enough never to refuse): the difference is the rate-limit decision
// inside a real join.
func BenchmarkJoinWithLimits(b *testing.B) {
	h := newHarness(b)
	h.putQueue(h.queue, `{"targetActive": 5, "rateLimit": {"perIpPerSecond": 1000000, "perIpBurst": 1000000, "perUserPerSecond": 5, "perUserBurst": 10}}`, 200)
	serveDirect(b, h, "POST", "/v1/queues/"+h.queue+"/tickets", "bench-user-", 202, func(int) {})
}
