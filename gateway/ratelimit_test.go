package main

import (
	"fmt"
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
	h.gw.now = func() time.Time { return now }
	h.rebuild()
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
	h.gw.ips = mustClientIPs(t, []string{"0.0.0.0/0", "::/0"}, "X-Forwarded-For")
	h.rebuild()
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
	h.gw.now = func() time.Time { return now }
	h.rebuild()
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

// BenchmarkJoinWithLimits is BenchmarkJoin with both join limits on (set
// high enough never to refuse): the difference is the rate-limit decision
// inside a real join.
func BenchmarkJoinWithLimits(b *testing.B) {
	h := newHarness(b)
	h.putQueue(h.queue, `{"targetActive": 5, "rateLimit": {"perIpPerSecond": 1000000, "perIpBurst": 1000000, "perUserPerSecond": 5, "perUserBurst": 10}}`, 200)
	serveDirect(b, h, "POST", "/v1/queues/"+h.queue+"/tickets", "bench-user-", 202, func(int) {})
}
