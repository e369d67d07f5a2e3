package main

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"usher/gateway/gate"
	"usher/internal/config"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
)

// The proxy gate (package gate), driven as a proxy drives it: GET /v1/gate
// with the original request in X-Forwarded-* / X-Original-* headers, the
// shopper's cookie and X-User-Id passed on, on a real line.

// gateRule is a rule of the harness's queue protecting /shop/, with a
// completePath, and extra fields (JSON members, comma first) added.
func (h *harness) gateRule(extra string) string {
	return fmt.Sprintf(`{"rules": [{"queue": %q, "paths": ["/shop/"], "completePath": "/shop/checkout/done",
		"bypass": {"paths": ["/shop/static/"], "methods": ["OPTIONS"], "cidrs": ["10.0.0.0/8"]}%s}],
		"insecureCookie": true}`, h.queue, extra)
}

// withGate turns the harness's gate on with the gate file rules: the
// proxies it trusts are app.Test's (0.0.0.0) and loopback.
func (h *harness) withGate(rules string) {
	h.t.Helper()
	cfg, err := gate.Parse([]byte(rules), os.ReadFile)
	if err != nil {
		h.t.Fatalf("gate.Parse: %v", err)
	}
	h.gw.gate = cfg
	h.gw.ips = mustClientIPs(h.t, []string{"0.0.0.0/32", "127.0.0.0/8"}, "")
	h.rebuild()
}

// ask is the proxy's question about method uri for user (none: "") with
// the pass cookie (none: ""), and more headers.
func (h *harness) ask(method, uri, user, pass string, more map[string]string) response {
	h.t.Helper()
	hdr := map[string]string{"X-Forwarded-Method": method, "X-Forwarded-Uri": uri,
		"X-Forwarded-Host": "shop.test", "X-Forwarded-Proto": "https"}
	if user != "" {
		hdr["X-User-Id"] = user
	}
	if pass != "" {
		hdr["Cookie"] = gate.CookieName + "=" + pass
	}
	for k, v := range more {
		hdr[k] = v
	}
	return h.do("GET", "/v1/gate", "", hdr)
}

var (
	asPage = map[string]string{"Accept": "text/html,application/xhtml+xml"}
	asAPI  = map[string]string{"Accept": "application/json"}
)

// readyTicket joins user and returns their ticket once READY.
func (h *harness) readyTicket(user string) string {
	h.t.Helper()
	r := h.join(user)
	tkt := r.str("ticket")
	if r.str("status") != "READY" {
		h.admit()
		if r = h.poll(tkt); r.str("status") != "READY" {
			h.t.Fatalf("poll after a tick = %s, want READY", r.raw)
		}
	}
	return tkt
}

// pass has a READY user fetch their pass; it returns the cookie's value
// and the answer.
func (h *harness) pass(user string) (string, response) {
	h.t.Helper()
	tkt := h.readyTicket(user)
	r := h.do("GET", "/v1/gate/pass?ticket="+url.QueryEscape(tkt)+"&return="+url.QueryEscape("https://shop.test/shop/item"),
		"", map[string]string{"X-User-Id": user, "X-Forwarded-Host": "shop.test"})
	if r.status != 303 {
		h.t.Fatalf("pass of READY %s = %d %s, want 303", user, r.status, r.raw)
	}
	for _, c := range (&http.Response{Header: r.header}).Cookies() {
		if c.Name == gate.CookieName {
			return c.Value, r
		}
	}
	h.t.Fatalf("pass of READY %s set no %s cookie: %v", user, gate.CookieName, r.header)
	return "", r
}

func (h *harness) active() int64 {
	h.t.Helper()
	st, err := h.line.Stats(context.Background(), h.queue)
	if err != nil {
		h.t.Fatal(err)
	}
	return st.Active
}

// Without a pass, a page navigation goes to the waiting room with the URL
// it came for; an API call or asset gets 429 problem+json with
// Retry-After, never HTML; 503 once the queue is paused.
func TestGateWithoutAPassQueues(t *testing.T) {
	h := newHarness(t)
	h.withGate(h.gateRule(""))

	r := h.ask("GET", "/shop/item?id=7", "alice", "", asPage)
	want := "/q/" + h.queue + "?return=" + url.QueryEscape("https://shop.test/shop/item?id=7")
	if r.status != 302 || r.header.Get("Location") != want {
		t.Errorf("navigation = %d Location %q, want 302 to %q", r.status, r.header.Get("Location"), want)
	}
	nav := h.ask("GET", "/shop/item", "alice", "", map[string]string{"Sec-Fetch-Mode": "navigate"})
	if nav.status != 302 {
		t.Errorf("Sec-Fetch-Mode: navigate = %d, want 302", nav.status)
	}
	for _, tt := range []struct{ method, accept string }{{"GET", "application/json"}, {"POST", "text/html"}, {"GET", "*/*"}} {
		r := h.ask(tt.method, "/shop/api/cart", "alice", "", map[string]string{"Accept": tt.accept})
		if r.status != 429 || !isProblem(r) || r.header.Get("Retry-After") == "" {
			t.Errorf("%s Accept %s = %d %s (Retry-After %q), want a 429 problem with Retry-After",
				tt.method, tt.accept, r.status, r.raw, r.header.Get("Retry-After"))
		}
	}
	h.putQueue(h.queue, `{"targetActive": 5, "state": "paused", "rateLimit": `+limitsOff+`}`, 200)
	testenv.Eventually(t, 5*time.Second, func() bool {
		cfg, _ := h.gw.queues.Get(h.queue)
		return cfg.State == "paused"
	}, "the pause in the gateway's catalog")
	if r := h.ask("GET", "/shop/api/cart", "alice", "", asAPI); r.status != 503 || !isProblem(r) || r.header.Get("Retry-After") == "" {
		t.Errorf("API call to a paused queue = %d %s, want a 503 problem with Retry-After", r.status, r.raw)
	}
}

// For nginx (whose auth_request passes on only 2xx, 401 and 403), mode 401
// denies with 401 and says where to go, or which status to answer.
func TestGateMode401TellsNginxWhereToGo(t *testing.T) {
	h := newHarness(t)
	h.withGate(h.gateRule(""))
	hdr := map[string]string{"X-Original-Method": "GET", "X-Original-URI": "/shop/item", "X-Forwarded-Host": "shop.test",
		"Accept": "text/html"}
	r := h.do("GET", "/v1/gate?mode=401", "", hdr)
	if r.status != 401 || !strings.HasPrefix(r.header.Get("Usher-Location"), "/q/"+h.queue+"?return=http%3A%2F%2Fshop.test%2Fshop%2Fitem") {
		t.Errorf("navigation in mode 401 = %d Usher-Location %q, want 401 to the waiting room", r.status, r.header.Get("Usher-Location"))
	}
	hdr["Accept"] = "application/json"
	r = h.do("GET", "/v1/gate?mode=401", "", hdr)
	if r.status != 401 || r.header.Get("Usher-Status") != "429" || r.header.Get("Retry-After") == "" || r.header.Get("Usher-Location") != "" {
		t.Errorf("API call in mode 401 = %d Usher-Status %q Retry-After %q, want 401 with Usher-Status 429 and Retry-After",
			r.status, r.header.Get("Usher-Status"), r.header.Get("Retry-After"))
	}
}

// Requests a rule bypasses pass without a pass: its paths, its methods,
// its client networks, a partner's header with the secret (only the
// secret); a path no rule protects passes too.
func TestGateBypasses(t *testing.T) {
	h := newHarness(t)
	secret := filepath.Join(t.TempDir(), "partner")
	if err := os.WriteFile(secret, []byte("partner-secret-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.withGate(h.gateRule(`, "bypass": {"paths": ["/shop/static/"], "methods": ["OPTIONS"], "cidrs": ["10.0.0.0/8"],
		"header": "X-Partner-Key", "secretFile": "` + secret + `"}`))
	tests := []struct {
		name, method, uri string
		more              map[string]string
		want              string // Usher-Gate; "" refused
	}{
		{"a bypassed path", "GET", "/shop/static/app.css", nil, "bypass"},
		{"a path dressed up to look bypassed", "GET", "/shop/static/../cart", nil, ""},
		{"a bypassed method", "OPTIONS", "/shop/cart", nil, "bypass"},
		{"a bypassed network", "GET", "/shop/cart", map[string]string{"X-Forwarded-For": "10.1.2.3"}, "bypass"},
		{"another network", "GET", "/shop/cart", map[string]string{"X-Forwarded-For": "192.0.2.1"}, ""},
		{"the partner's secret", "GET", "/shop/cart", map[string]string{"X-Partner-Key": "partner-secret-0123456789"}, "bypass"},
		{"a wrong secret", "GET", "/shop/cart", map[string]string{"X-Partner-Key": "partner-secret-0123456788"}, ""},
		{"an unprotected path", "GET", "/about", nil, "unprotected"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := h.with(t).ask(tt.method, tt.uri, "alice", "", tt.more)
			switch {
			case tt.want != "" && (r.status != 200 || r.header.Get("Usher-Gate") != tt.want):
				t.Errorf("%s %s = %d Usher-Gate %q, want 200 %s", tt.method, tt.uri, r.status, r.header.Get("Usher-Gate"), tt.want)
			case tt.want == "" && r.status != 429:
				t.Errorf("%s %s = %d %s, want 429", tt.method, tt.uri, r.status, r.raw)
			}
		})
	}
}

// A READY shopper's pass is a cookie bound to the admission (HttpOnly,
// Secure unless configured off, SameSite=Lax, the rule's domain, until
// the admission ends); with it the gate answers 200 and tells the origin
// who passes, with the entry token it can verify offline.
func TestGatePassLetsTheShopperThrough(t *testing.T) {
	h := newHarness(t)
	h.withGate(strings.Replace(h.gateRule(`, "cookieDomain": "shop.test"`), `"insecureCookie": true`, `"insecureCookie": false`, 1))
	pass, r := h.pass("alice")
	if r.header.Get("Location") != "https://shop.test/shop/item" {
		t.Errorf("pass Location = %q, want the return URL", r.header.Get("Location"))
	}
	set := strings.ToLower(r.header.Get("Set-Cookie"))
	for _, attr := range []string{"httponly", "secure", "samesite=lax", "domain=shop.test", "path=/", "max-age="} {
		if !strings.Contains(set, attr) {
			t.Errorf("Set-Cookie %q lacks %s", r.header.Get("Set-Cookie"), attr)
		}
	}
	g := h.ask("GET", "/shop/item", "alice", pass, asPage)
	if g.status != 200 || g.header.Get("Usher-Gate") != "pass" || g.header.Get("Usher-User") != "alice" ||
		g.header.Get("Usher-Queue") != h.queue || g.header.Get("Usher-Admission") == "" {
		t.Fatalf("gate with a pass = %d %v, want 200 with the user, queue and admission", g.status, g.header)
	}
	claims, err := h.gw.keys.Verify(g.header.Get("Usher-Token"), time.Now())
	if err != nil || claims.User != "alice" || claims.ID != g.header.Get("Usher-Admission") {
		t.Errorf("Usher-Token = %+v, %v; want alice's entry token with the admission's id", claims, err)
	}
}

// A cookie that is no good pass is refused as no pass at all: a forged
// MAC, an expired pass, another user's copy, a pass of another queue.
func TestGateRefusesForgedExpiredAndCopiedPasses(t *testing.T) {
	h := newHarness(t)
	h.withGate(h.gateRule(""))
	pass, _ := h.pass("alice")
	p, ok := h.gw.gateKeys.Open(pass)
	if !ok {
		t.Fatal("the gate cannot open its own pass")
	}
	expired := p
	expired.ExpiresAt = time.Now().Add(-time.Second)
	other := p
	other.Queue = "another-queue"
	forged := pass[:len(pass)-2] + map[bool]string{true: "AA", false: "AB"}[strings.HasSuffix(pass, "AB")]
	tests := []struct{ name, user, cookie string }{
		{"a forged MAC", "alice", forged},
		{"signed by another key", "alice", gate.RandomKeys().Seal(p)},
		{"expired", "alice", h.gw.gateKeys.Seal(expired)},
		{"copied to another user", "bob", pass},
		{"without the user", "", pass},
		{"of another queue", "alice", h.gw.gateKeys.Seal(other)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if r := h.with(t).ask("GET", "/shop/item", tt.user, tt.cookie, asPage); r.status != 302 {
				t.Errorf("navigation with a pass %s = %d, want 302 to the waiting room", tt.name, r.status)
			}
			if r := h.with(t).ask("GET", "/shop/api", tt.user, tt.cookie, asAPI); r.status != 429 {
				t.Errorf("API call with a pass %s = %d, want 429", tt.name, r.status)
			}
		})
	}
	if r := h.ask("GET", "/shop/item", "alice", pass, asPage); r.status != 200 {
		t.Errorf("the pass itself = %d, want 200", r.status)
	}
}

// The pass goes back only where the shop is: a path, this host, the
// rule's hosts; a foreign host is a 400 problem, not an open redirect. It
// is handed out only for the ticket's own user, once READY.
func TestGatePassReturnsOnlyToTheShop(t *testing.T) {
	h := newHarness(t)
	h.withGate(h.gateRule(`, "returnHosts": ["www.shop.test"]`))
	tkt := h.readyTicket("alice")
	for _, tt := range []struct {
		ret  string
		want int
	}{
		{"/shop/item", 303}, {"https://shop.test/x", 303}, {"https://www.shop.test/x", 303}, {"", 303},
		{"https://evil.test/x", 400}, {"//evil.test/x", 400}, {"/\\evil.test", 400}, {"javascript:alert(1)", 400},
		{"https://shop.test.evil.test/", 400}, {"https://alice@evil.test/", 400},
	} {
		r := h.do("POST", "/v1/gate/pass", "ticket="+url.QueryEscape(tkt)+"&return="+url.QueryEscape(tt.ret),
			map[string]string{"X-User-Id": "alice", "X-Forwarded-Host": "shop.test", "Content-Type": "application/x-www-form-urlencoded"})
		if r.status != tt.want || (tt.want == 400 && (!isProblem(r) || r.str("type") != "https://usher.dev/problems/invalid-return")) {
			t.Errorf("pass with return %q = %d %s, want %d", tt.ret, r.status, r.raw, tt.want)
		}
	}
	r := h.do("GET", "/v1/gate/pass?ticket="+url.QueryEscape(tkt), "", map[string]string{"X-User-Id": "bob"})
	if r.status != 403 || !isProblem(r) {
		t.Errorf("bob's pass for alice's ticket = %d %s, want a 403 problem", r.status, r.raw)
	}
	// A shopper still waiting (the queue paused) is not READY: no pass.
	h.putQueue(h.queue, `{"targetActive": 5, "state": "paused", "rateLimit": `+limitsOff+`}`, 200)
	testenv.Eventually(t, 5*time.Second, func() bool { cfg, _ := h.gw.queues.Get(h.queue); return cfg.State == "paused" }, "the pause")
	cj := h.join("carol")
	carol := cj.str("ticket")
	if cj.str("status") != "WAITING" {
		t.Fatalf("carol's join into a paused queue = %s, want WAITING", cj.raw)
	}
	r = h.do("GET", "/v1/gate/pass?ticket="+url.QueryEscape(carol), "", map[string]string{"X-User-Id": "carol"})
	if r.status != 409 || !isProblem(r) {
		t.Errorf("pass of a waiting shopper = %d %s, want a 409 problem", r.status, r.raw)
	}
}

// A request on the rule's completePath with a pass passes and frees the
// slot (the queue's active count drops); the pass is no good after.
func TestGateCompletePathFreesTheSlot(t *testing.T) {
	h := newHarness(t)
	h.withGate(h.gateRule(""))
	pass, _ := h.pass("alice")
	before := h.active()
	r := h.ask("POST", "/shop/checkout/done", "alice", pass, asAPI)
	if r.status != 200 || r.header.Get("Usher-Gate") != "complete" || r.header.Get("Usher-User") != "alice" {
		t.Fatalf("completePath with a pass = %d %v, want 200 complete", r.status, r.header)
	}
	if after := h.active(); after != before-1 {
		t.Errorf("active = %d after completion, want %d", after, before-1)
	}
	if r := h.ask("GET", "/shop/item", "alice", pass, asPage); r.status != 302 {
		t.Errorf("the pass after completion = %d, want 302 to the waiting room", r.status)
	}
}

// A gateway remembers for USHER_GATE_RECHECK that a pass's admission held
// its slot: the requests of one page view cost the line one check. A slot
// freed elsewhere (here the shopper's own leave) is seen once the moment
// passes; the completion through this gateway is seen at once.
func TestGateRemembersACheckForItsRecheck(t *testing.T) {
	h := newHarness(t)
	h.gw.gateRecheck = time.Hour
	h.withGate(h.gateRule(""))
	pass, _ := h.pass("alice")
	first := h.ask("GET", "/shop/item", "alice", pass, asPage)
	if first.status != 200 {
		t.Fatalf("a pass = %d %s, want 200", first.status, first.raw)
	}
	tkt := h.readyTicket("alice")
	if r := h.do("DELETE", "/v1/queues/"+h.queue+"/tickets/"+tkt, "", nil); r.status != 204 {
		t.Fatalf("alice's leave = %d %s", r.status, r.raw)
	}
	again := h.ask("GET", "/shop/item", "alice", pass, asPage)
	if again.status != 200 || again.header.Get("Usher-Token") != first.header.Get("Usher-Token") {
		t.Errorf("the pass within its recheck = %d (token %q), want 200 with the same token %q: remembered",
			again.status, again.header.Get("Usher-Token"), first.header.Get("Usher-Token"))
	}
	bob, _ := h.pass("bob")
	if r := h.ask("POST", "/shop/checkout/done", "bob", bob, asAPI); r.status != 200 || r.header.Get("Usher-Gate") != "complete" {
		t.Fatalf("bob's completion = %d %v", r.status, r.header)
	}
	if r := h.ask("GET", "/shop/item", "bob", bob, asPage); r.status != 302 {
		t.Errorf("bob's pass after his completion here = %d, want 302: forgotten at once", r.status)
	}
}

// A pass idle for longer than passIdle is swept: its slot frees as a
// leave frees it. One used since is not.
func TestGateSweepFreesIdlePasses(t *testing.T) {
	h := newHarness(t)
	h.withGate(h.gateRule(""))
	h.gw.gate.Rules[0].PassIdle = 400 * time.Millisecond
	h.rebuild()
	idle, _ := h.pass("alice")
	busy, _ := h.pass("bob")
	if n := h.gw.gateRoom.Sweep(context.Background()); n != 0 {
		t.Fatalf("Sweep of fresh passes freed %d, want 0", n)
	}
	before := h.active()
	deadline := time.Now().Add(10 * time.Second)
	freed := 0
	for freed == 0 && time.Now().Before(deadline) {
		// bob keeps browsing; alice has gone.
		if r := h.ask("GET", "/shop/item", "bob", busy, asPage); r.status != 200 {
			t.Fatalf("bob's pass = %d, want 200", r.status)
		}
		time.Sleep(100 * time.Millisecond)
		freed = h.gw.gateRoom.Sweep(context.Background())
	}
	if freed != 1 || h.active() != before-1 {
		t.Fatalf("Sweep freed %d (active %d, was %d), want alice's one", freed, h.active(), before)
	}
	if r := h.ask("GET", "/shop/item", "alice", idle, asPage); r.status != 302 {
		t.Errorf("alice's swept pass = %d, want 302", r.status)
	}
	if r := h.ask("GET", "/shop/item", "bob", busy, asPage); r.status != 200 {
		t.Errorf("bob's pass in use = %d, want 200", r.status)
	}
}

// When the line (Redis) cannot be read, a pass passes with failMode open
// (Usher-Gate: fail-open) and gets 503 with Retry-After with closed.
func TestGateFailModes(t *testing.T) {
	for _, mode := range []string{"open", "closed"} {
		t.Run(mode, func(t *testing.T) {
			h := newHarness(t)
			h.withGate(h.gateRule(`, "failMode": "` + mode + `"`))
			pass, _ := h.pass("alice")
			url, stop := testenv.RedisServer(t)
			rdb, err := waitqueue.DialURL(url, 2)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { rdb.Close() })
			h.gw.line = waitqueue.NewClient(rdb)
			h.rebuild()
			stop() // Redis is gone

			r := h.ask("GET", "/shop/item", "alice", pass, asPage)
			switch mode {
			case "open":
				if r.status != 200 || r.header.Get("Usher-Gate") != "fail-open" || r.header.Get("Usher-User") != "alice" {
					t.Errorf("failMode open, Redis down = %d %v, want 200 fail-open", r.status, r.header)
				}
			case "closed":
				if r.status != 503 || !isProblem(r) || r.header.Get("Retry-After") == "" {
					t.Errorf("failMode closed, Redis down = %d %s, want a 503 problem with Retry-After", r.status, r.raw)
				}
			}
		})
	}
}

// Envoy's ext_authz HTTP service keeps the original method and appends
// the original path to the gate's prefix.
func TestGateAnswersEnvoysPrefix(t *testing.T) {
	h := newHarness(t)
	h.withGate(h.gateRule(""))
	pass, _ := h.pass("alice")
	ask := func(method, path string, hdr map[string]string) *http.Response {
		req, _ := http.NewRequest(method, "http://gateway"+gate.EnvoyPrefix+path, nil)
		req.Host = "shop.test"
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		res, err := h.app.Test(req, 10_000)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	if res := ask("POST", "/shop/cart?x=1", map[string]string{"Accept": "application/json"}); res.StatusCode != 429 {
		t.Errorf("Envoy POST without a pass = %d, want 429", res.StatusCode)
	}
	if res := ask("GET", "/shop/item", map[string]string{"Accept": "text/html"}); res.StatusCode != 302 ||
		res.Header.Get("Location") != "/q/"+h.queue+"?return="+url.QueryEscape("http://shop.test/shop/item") {
		t.Errorf("Envoy navigation = %d %q, want 302 to the waiting room", res.StatusCode, res.Header.Get("Location"))
	}
	res := ask("DELETE", "/shop/cart/1", map[string]string{"Cookie": gate.CookieName + "=" + pass, "X-User-Id": "alice"})
	if res.StatusCode != 200 || res.Header.Get("Usher-User") != "alice" {
		t.Errorf("Envoy DELETE with a pass = %d %v, want 200 for alice", res.StatusCode, res.Header)
	}
	if res := ask("GET", "/about", nil); res.StatusCode != 200 || res.Header.Get("Usher-Gate") != "unprotected" {
		t.Errorf("Envoy unprotected path = %d, want 200", res.StatusCode)
	}
}

// The gate believes the original request's headers only from a trusted
// proxy; a gateway without USHER_GATE_FILE has no gate; headers that
// describe no request are a 400 problem.
func TestGateAnswersOnlyItsProxies(t *testing.T) {
	h := newHarness(t)
	if r := h.ask("GET", "/shop/item", "alice", "", asPage); r.status != 404 || !isProblem(r) {
		t.Errorf("gate without a gate file = %d %s, want a 404 problem", r.status, r.raw)
	}
	h.withGate(h.gateRule(""))
	h.gw.ips = mustClientIPs(t, []string{"192.0.2.0/24"}, "")
	h.rebuild()
	if r := h.ask("GET", "/shop/item", "alice", "", asPage); r.status != 403 || !isProblem(r) {
		t.Errorf("gate asked by an untrusted caller = %d %s, want a 403 problem", r.status, r.raw)
	}
	h.withGate(h.gateRule(""))
	for _, uri := range []string{"", "shop/item", "//evil.test/shop", "/shop/%zz"} {
		if r := h.ask("GET", uri, "alice", "", asPage); r.status != 400 || !isProblem(r) {
			t.Errorf("original URI %q = %d %s, want a 400 problem", uri, r.status, r.raw)
		}
	}
}

// The gate file is read and checked at start: a bad one stops the
// gateway, naming the file and every problem; a pass cookie without
// Secure is refused where others can connect.
func TestABadGateFileStopsTheStart(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.json", `{"rules": [{"queue": "drop", "paths": ["/shop/"]}]}`)
	insecure := write("insecure.json", `{"rules": [{"queue": "drop"}], "insecureCookie": true}`)
	bad := write("bad.json", `{"rules": [{"queue": "drop", "failMode": "sometimes", "passIdle": "1s"}]}`)
	safe := []string{"USHER_ADMIN_TOKEN", "a-long-secret-of-our-own", "USHER_TRUSTED_PROXIES", "10.0.0.0/8"}
	tests := []struct {
		name string
		env  []string
		want []string // in the error; none: it starts
	}{
		{"a good file", []string{"USHER_GATE_FILE", good}, nil},
		{"a missing file", []string{"USHER_GATE_FILE", filepath.Join(dir, "nope.json")}, []string{"USHER_GATE_FILE=", "no such file"}},
		{"a bad file", []string{"USHER_GATE_FILE", bad}, []string{"USHER_GATE_FILE=" + bad, "failMode", "passIdle"}},
		{"insecureCookie on loopback", []string{"USHER_GATE_FILE", insecure}, nil},
		{"insecureCookie on every interface", append([]string{"USHER_GATE_FILE", insecure, "USHER_GATEWAY_ADDR", ":8080"}, safe...),
			[]string{"insecureCookie"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{}
			for i := 0; i+1 < len(tt.env); i += 2 {
				env[tt.env[i]] = tt.env[i+1]
			}
			s, err := loadSettings(config.New(func(k string) string { return env[k] }))
			if len(tt.want) == 0 {
				if err != nil || len(s.gate.Rules) != 1 {
					t.Fatalf("loadSettings = %v (%d rules), want it to start with the rule", err, len(s.gate.Rules))
				}
				return
			}
			if err == nil {
				t.Fatalf("loadSettings started, want an error naming %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("loadSettings error %q does not name %q", err, w)
				}
			}
		})
	}
}

// Without JavaScript too: the page opened with ?return= keeps it through
// its forms, and READY offers the form that takes the pass and goes back.
func TestGatePassFromThePageWithoutJavaScript(t *testing.T) {
	h := newHarness(t)
	h.withGate(h.gateRule(""))
	ret := "https://shop.test/shop/item?id=7"
	page := "/q/" + h.queue + "?return=" + url.QueryEscape(ret)
	r := h.do("GET", page, "", nil)
	if !strings.Contains(string(r.raw), `action="/q/`+h.queue+`?return=`+url.QueryEscape(ret)+`"`) {
		t.Fatalf("the page's forms do not carry ?return= on:\n%s", r.raw)
	}
	r = h.postForm(page, map[string]string{"action": "join", "user": "nojs"}, nil)
	if match(statusRE, r.raw) != "READY" {
		// Admitted at once, READY at its readyAt: check again after it.
		h.admit()
		r = h.postForm(page, map[string]string{"action": "check", "ticket": match(formTicketRE, r.raw), "user": "nojs"}, nil)
	}
	if match(statusRE, r.raw) != "READY" {
		t.Fatalf("the page of a shopper in an empty line = %q, want READY", match(statusRE, r.raw))
	}
	passForm := regexp.MustCompile(`<form method="post" action="/v1/gate/pass"><input type="hidden" name="ticket" value="([^"]+)"><input type="hidden" name="return" value="([^"]+)">`)
	m := passForm.FindSubmatch(r.raw)
	if m == nil || html.UnescapeString(string(m[2])) != ret {
		t.Fatalf("READY page without the pass form back to %q:\n%s", ret, r.raw)
	}
	p := h.postForm("/v1/gate/pass", map[string]string{"ticket": html.UnescapeString(string(m[1])), "return": ret},
		map[string]string{"X-User-Id": "nojs", "X-Forwarded-Host": "shop.test"})
	if p.status != 303 || p.header.Get("Location") != ret || !strings.Contains(p.header.Get("Set-Cookie"), gate.CookieName+"=") {
		t.Errorf("the pass form = %d Location %q, want 303 back with the pass", p.status, p.header.Get("Location"))
	}
}
