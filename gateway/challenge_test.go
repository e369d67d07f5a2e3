package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"usher/gateway/door"
	"usher/gateway/lineapi"
	"usher/internal/catalog"
	"usher/internal/event"
	"usher/internal/keyspace"
	"usher/internal/pow"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
)

// clock is a test's clock: it moves only when told to.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// value reads one counter's or gauge's value.
func value(t testing.TB, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	if d.Gauge != nil {
		return d.Gauge.GetValue()
	}
	return d.Counter.GetValue()
}

// clientHeader carries a test request's client address: the harness's
// in-memory requests all come from one peer, trusted here as a proxy.
const clientHeader = "X-Client-IP"

// powHarness is the harness with a queue whose challenge is cfg, client
// addresses taken from clientHeader, and a clock the test moves.
func powHarness(t *testing.T, challenge string) (*harness, *clock) {
	t.Helper()
	h := newHarness(t)
	h.gw.ips = mustClientIPs(t, []string{"0.0.0.0/0", "::/0"}, clientHeader)
	clk := &clock{t: time.Now()}
	h.gw.now = clk.Now
	h.rebuild()
	h.putQueue(h.queue, `{"targetActive": 5, "rateLimit": `+limitsOff+`, "challenge": `+challenge+`}`, 200)
	return h, clk
}

// challengeFor asks the gateway for a challenge as client.
func (h *harness) challengeFor(client string) pow.Challenge {
	h.t.Helper()
	r := h.do("GET", "/v1/queues/"+h.queue+"/challenge", "", map[string]string{clientHeader: client})
	if r.status != 200 {
		h.t.Fatalf("GET challenge = %d %s", r.status, r.raw)
	}
	var c pow.Challenge
	if err := json.Unmarshal(r.raw, &c); err != nil {
		h.t.Fatal(err)
	}
	return c
}

// difficultyAsker returns a function that asks the queue's difficulty
// from a new network each time (no client's own bits: the queue's alone).
func (h *harness) difficultyAsker() func() int {
	asked := 0
	return func() int {
		h.t.Helper()
		asked++
		return h.challengeFor(fmt.Sprintf("172.%d.%d.1", 16+asked/250, asked%250)).Difficulty
	}
}

// joinAs joins as user from client with an Usher-PoW value ("" for none).
func (h *harness) joinWithProof(user, client, proof string) response {
	h.t.Helper()
	hdr := map[string]string{"X-User-Id": user, clientHeader: client}
	if proof != "" {
		hdr[pow.Header] = proof
	}
	return h.do("POST", "/v1/queues/"+h.queue+"/tickets", "", hdr)
}

func solved(t testing.TB, c pow.Challenge) string {
	t.Helper()
	nonce, err := pow.Solve(context.Background(), c.Challenge, c.Difficulty)
	if err != nil {
		t.Fatal(err)
	}
	return pow.Value(c.Challenge, nonce)
}

// challengeOf is the fresh challenge a 428 carries.
func challengeOf(t testing.TB, r response) pow.Challenge {
	t.Helper()
	var body struct {
		Challenge pow.Challenge `json:"challenge"`
	}
	if err := json.Unmarshal(r.raw, &body); err != nil || body.Challenge.Challenge == "" {
		t.Fatalf("428 without a challenge: %s", r.raw)
	}
	return body.Challenge
}

func (h *harness) queueKeys() []string {
	h.t.Helper()
	keys, err := testenv.Redis(h.t).Keys(context.Background(), keyspace.Of(h.queue).Pattern()).Result()
	if err != nil {
		h.t.Fatal(err)
	}
	return keys
}

// Issuing a challenge stores nothing; a queue whose challenge is off
// answers one of difficulty 0, so a client may always ask.
func TestChallengeIsStateless(t *testing.T) {
	h, _ := powHarness(t, `{"mode": "enforce", "difficulty": 9}`)
	before := h.queueKeys()
	for i := range 50 {
		c := h.challengeFor(fmt.Sprintf("198.51.100.%d", i))
		if c.Algorithm != "sha256" || c.Difficulty != 9 || len(c.Challenge) != pow.ChallengeLen {
			t.Fatalf("challenge = %+v, want sha256 at 9 bits", c)
		}
	}
	if after := h.queueKeys(); len(after) != len(before) {
		t.Errorf("issuing 50 challenges changed the queue's keys from %v to %v", before, after)
	}
	r := h.do("GET", "/v1/queues/"+h.queue+"/challenge", "", nil)
	if r.header.Get("Cache-Control") != "no-store" {
		t.Errorf("Cache-Control = %q, want no-store", r.header.Get("Cache-Control"))
	}
	if r := h.do("GET", "/v1/queues/no-such-queue/challenge", "", nil); r.status != 404 || !isProblem(r) {
		t.Errorf("challenge of an unknown queue = %d %s, want a 404 problem", r.status, r.raw)
	}
	h.putQueue(h.queue, `{"rateLimit": `+limitsOff+`}`, 200)
	if c := h.challengeFor("198.51.100.1"); c.Difficulty != 0 {
		t.Errorf("challenge of a queue with challenges off = %d bits, want 0", c.Difficulty)
	}
}

// A HEAD of the challenge (fiber routes it to the GET handler) answers
// GET's status and headers and issues nothing: a client cannot read a
// challenge from it, so none is counted toward its address's extra bits
// or usher_pow_challenges_issued_total. Counted, forty HEADs would be forty
// challenges: the address's next GET would ask two bits more, and a
// monitor probing the endpoint with HEAD would raise the price of its own
// network.
func TestAChallengeHEADIssuesNothing(t *testing.T) {
	h, _ := powHarness(t, `{"mode": "enforce", "difficulty": "auto", "min": 4, "max": 16}`)
	const ip = "198.51.100.41"
	issued := func() float64 { return value(t, h.gw.metrics.pow.Issued.WithLabelValues(h.queue)) }
	for i := range 40 {
		r := h.do("HEAD", "/v1/queues/"+h.queue+"/challenge", "", map[string]string{clientHeader: ip})
		if r.status != 200 || len(r.raw) != 0 || r.header.Get("Cache-Control") != "no-store" || r.header.Get("Content-Type") != "application/json" {
			t.Fatalf("HEAD challenge %d = %d %v %q; want 200, Content-Type application/json, Cache-Control no-store, no body", i+1, r.status, r.header, r.raw)
		}
	}
	if n := issued(); n != 0 {
		t.Errorf("usher_pow_challenges_issued_total after 40 HEADs = %v, want 0", n)
	}
	if d := h.challengeFor(ip).Difficulty; d != 4 {
		t.Errorf("the address's first GET after 40 HEADs asks %d bits, want min 4 (no challenge of its own counted yet)", d)
	}
	if n := issued(); n != 1 {
		t.Errorf("usher_pow_challenges_issued_total after one GET = %v, want 1", n)
	}
	if r := h.do("HEAD", "/v1/queues/no-such-queue/challenge", "", nil); r.status != 404 {
		t.Errorf("HEAD challenge of an unknown queue = %d, want 404", r.status)
	}
}

// A HEAD of the challenge answers the status a GET would, with its
// headers and no body: with the line's Redis gone, a queue under auto
// difficulty cannot read its pressure, and GET answers 503 problem+json.
// A HEAD that answered 200 (reading nothing) would show a monitor probing
// the door with HEAD a healthy door while every shopper's GET failed.
func TestAChallengeHEADAnswersWhatGETWouldWhileRedisIsDown(t *testing.T) {
	h, _ := powHarness(t, `{"mode": "enforce", "difficulty": "auto", "min": 4, "max": 16}`)
	url, stop := testenv.RedisServer(t)
	rdb, err := waitqueue.DialURL(url, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	h.gw.line = waitqueue.NewClient(rdb)
	h.rebuild() // a door of its own, on this line
	stop()      // Redis is gone

	path := "/v1/queues/" + h.queue + "/challenge"
	hdr := map[string]string{clientHeader: "198.51.100.42"}
	head := h.do("HEAD", path, "", hdr)
	get := h.do("GET", path, "", hdr)
	if get.status != 503 || !isProblem(get) {
		t.Fatalf("GET challenge with Redis down = %d %s, want a 503 problem", get.status, get.raw)
	}
	if head.status != get.status || len(head.raw) != 0 {
		t.Fatalf("HEAD challenge with Redis down = %d %q, want GET's %d and no body", head.status, head.raw, get.status)
	}
	for _, k := range []string{"Content-Type", "Cache-Control", "Retry-After"} {
		if got, want := head.header.Get(k), get.header.Get(k); got != want {
			t.Errorf("HEAD challenge with Redis down: %s = %q, want GET's %q", k, got, want)
		}
	}
}

// Under enforce, a join needs a valid, unexpired, unused proof of this
// queue and address, at the queue's difficulty; anything else is a 428
// problem with a fresh challenge, which does let the client in.
func TestEnforceRefusesEveryBadProof(t *testing.T) {
	h, clk := powHarness(t, `{"mode": "enforce", "difficulty": 8}`)
	const ip = "198.51.100.7"
	addr := netip.MustParseAddr(ip)
	issue := func(q, client string, d int, at time.Time) pow.Challenge {
		return h.gw.challenges.Issue(q, netip.MustParseAddr(client), d, at)
	}
	other, err := pow.NewIssuer([]byte(strings.Repeat("z", 32)), 0)
	if err != nil {
		t.Fatal(err)
	}
	spent := solved(t, h.challengeFor(ip))
	if r := h.joinWithProof("first", ip, spent); r.status != 202 {
		t.Fatalf("join with a valid proof = %d %s, want 202", r.status, r.raw)
	}
	unsolved := func() string {
		c := h.challengeFor(ip)
		for n := 0; ; n++ {
			if v := pow.Value(c.Challenge, fmt.Sprint(n)); pow.LeadingZeroBits(v) < c.Difficulty {
				return v
			}
		}
	}()
	tests := []struct {
		name, client, proof, reason string
	}{
		{"no proof", ip, "", "missing"},
		{"garbage", ip, "let me in", "malformed"},
		{"forged: another secret's challenge", ip, solved(t, other.Issue(h.queue, addr, 8, clk.Now())), "invalid"},
		{"expired", ip, solved(t, issue(h.queue, ip, 8, clk.Now().Add(-3*time.Minute))), "expired"},
		{"reused", ip, spent, "reused"},
		{"wrong queue", ip, solved(t, issue("another-queue", ip, 8, clk.Now())), "invalid"},
		{"wrong IP", "198.51.100.8", solved(t, h.challengeFor(ip)), "invalid"},
		{"too easy: the nonce misses the difficulty", ip, unsolved, "unsolved"},
		{"too easy: a challenge easier than the queue asks", ip, solved(t, issue(h.queue, ip, 4, clk.Now())), "too_easy"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := h.with(t)
			user := fmt.Sprintf("shopper-%d", i)
			r := h.joinWithProof(user, tt.client, tt.proof)
			if r.status != 428 || !isProblem(r) || r.str("type") != "https://usher.dev/problems/challenge-required" || r.str("reason") != tt.reason {
				t.Fatalf("join = %d %s, want a 428 challenge-required problem, reason %s", r.status, r.raw, tt.reason)
			}
			fresh := challengeOf(t, r)
			if fresh.Difficulty != 8 {
				t.Errorf("the 428's challenge asks %d bits, want the queue's 8", fresh.Difficulty)
			}
			if r := h.joinWithProof(user, tt.client, solved(t, fresh)); r.status != 202 {
				t.Errorf("join with the 428's challenge solved = %d %s, want 202", r.status, r.raw)
			}
		})
	}
	if n := value(t, h.gw.metrics.pow.Checks.WithLabelValues(h.queue, "enforce", "reused")); n != 1 {
		t.Errorf("usher_pow_checks_total{result=reused} = %v, want 1", n)
	}
}

// log refuses nothing and counts what enforce would refuse, so ops can
// see the numbers before they switch; then enforce refuses it.
func TestLogCountsWhatEnforceWouldRefuse(t *testing.T) {
	h, _ := powHarness(t, `{"mode": "log", "difficulty": 8}`)
	const ip = "203.0.113.9"
	good := solved(t, h.challengeFor(ip))
	joins := []struct{ user, proof string }{{"a", ""}, {"b", "nonsense"}, {"c", good}, {"d", good}}
	for _, j := range joins {
		if r := h.joinWithProof(j.user, ip, j.proof); r.status != 202 {
			t.Fatalf("join %s under log = %d %s, want 202", j.user, r.status, r.raw)
		}
	}
	m := h.gw.metrics.pow.Checks
	for result, want := range map[string]float64{"ok": 1, "missing": 1, "malformed": 1, "reused": 1} {
		if got := value(t, m.WithLabelValues(h.queue, "log", result)); got != want {
			t.Errorf("usher_pow_checks_total{mode=log,result=%s} = %v, want %v", result, got, want)
		}
	}
	h.putQueue(h.queue, `{"targetActive": 5, "rateLimit": `+limitsOff+`, "challenge": {"mode": "enforce", "difficulty": 8}}`, 200)
	if r := h.joinWithProof("e", ip, ""); r.status != 428 {
		t.Errorf("join without a proof under enforce = %d %s, want 428", r.status, r.raw)
	}
	if got := value(t, m.WithLabelValues(h.queue, "enforce", "missing")); got != 1 {
		t.Errorf("usher_pow_checks_total{mode=enforce,result=missing} = %v, want 1", got)
	}
}

// auto: a scripted burst of joins (from many addresses, as a botnet's)
// raises the queue's difficulty within a second; once it passes, the
// difficulty falls back to min, one bit at a time. A proof of a challenge
// issued before the rise is refused as too easy.
func TestAutoDifficultyFollowsPressure(t *testing.T) {
	h, clk := powHarness(t, `{"mode": "enforce", "difficulty": "auto", "min": 2, "max": 12}`)
	gauge := func() int {
		return int(value(t, h.gw.metrics.pow.Difficulty.WithLabelValues(h.queue)))
	}
	ask := h.difficultyAsker()
	if d := ask(); d != 2 {
		t.Fatalf("calm queue: difficulty %d, want min 2", d)
	}
	early := solved(t, h.challengeFor("192.0.2.201"))
	// The burst: 40 joins in one second from 40 addresses. The admitter
	// admits nobody yet (an admission rate under 1/s counts as 1/s).
	for i := range 40 {
		ip := fmt.Sprintf("10.%d.0.1", i)
		if r := h.joinWithProof(fmt.Sprintf("bot-%d", i), ip, solved(t, h.challengeFor(ip))); r.status != 202 {
			t.Fatalf("burst join %d = %d %s", i, r.status, r.raw)
		}
	}
	clk.Advance(time.Second)
	// 40 joins/s against 1 admission/s: floor(log2 40) = 5 bits over min.
	if d := ask(); d != 7 || gauge() != 7 {
		t.Fatalf("after the burst: difficulty %d (gauge %d), want 7", d, gauge())
	}
	if r := h.joinWithProof("early-bird", "192.0.2.201", early); r.status != 428 || r.str("reason") != "too_easy" {
		t.Errorf("join with a challenge from before the burst = %d %s, want 428 too_easy", r.status, r.raw)
	}
	// Quiet: no joins. The difficulty steps down, never up, to min.
	last, steps := 7, 0
	for range 120 {
		clk.Advance(time.Second)
		d := ask()
		if d > last {
			t.Fatalf("difficulty rose from %d to %d while the queue was quiet", last, d)
		}
		if d < last {
			steps++
		}
		last = d
	}
	if last != 2 || steps != 5 {
		t.Errorf("after two quiet minutes: difficulty %d in %d steps, want min 2 in 5 one-bit steps", last, steps)
	}
}

// auto: an address that keeps asking pays more than its neighbours; a
// /24 that keeps asking pays more too; another network does not.
func TestAutoDifficultyForRepeatCustomers(t *testing.T) {
	h, _ := powHarness(t, `{"mode": "enforce", "difficulty": "auto", "min": 4, "max": 16}`)
	var got []int
	for range 70 {
		got = append(got, h.challengeFor("198.51.100.7").Difficulty)
	}
	// 16 free, then one bit per doubling of the address's count.
	if got[16] != 4 || got[17] != 5 || got[32] != 5 || got[33] != 6 || got[64] != 6 || got[65] != 7 {
		t.Errorf("difficulties of one address's challenges = %v, want 4 for 16, then a bit per doubling", got)
	}
	if d := h.challengeFor("198.51.100.8").Difficulty; d != 5 {
		t.Errorf("a neighbour in the same /24 (71 challenges there) = %d bits, want 5", d)
	}
	if d := h.challengeFor("203.0.113.8").Difficulty; d != 4 {
		t.Errorf("an address elsewhere = %d bits, want min 4", d)
	}
	if d := h.challengeFor("2001:db8:1:2::1").Difficulty; d != 4 {
		t.Errorf("an IPv6 client = %d bits, want min 4", d)
	}
}

// suspects "shadow": a client that keeps failing gets a real-looking
// WAITING answer in a line that never moves, takes no place and never
// reaches the stream, while everyone else goes on as before.
func TestShadowLine(t *testing.T) {
	h, clk := powHarness(t, `{"mode": "enforce", "difficulty": 6, "suspects": "shadow"}`)
	h.putQueue(h.queue, `{"targetActive": 2, "sku": "shadow-sku", "rateLimit": `+limitsOff+`, "challenge": {"mode": "enforce", "difficulty": 6, "suspects": "shadow"}}`, 200)
	const bot, shopper = "192.0.2.66", "198.51.100.7"
	h.joinWithProof("real-1", shopper, solved(t, h.challengeFor(shopper)))
	h.joinWithProof("real-2", shopper, solved(t, h.challengeFor(shopper)))
	lastSeq := func() uint64 {
		s, err := h.js.Stream(context.Background(), event.StreamEntries)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return info.State.LastSeq
	}
	waiting := func() int64 {
		st, err := h.line.Stats(context.Background(), h.queue)
		if err != nil {
			t.Fatal(err)
		}
		return st.Waiting
	}
	seqBefore := lastSeq()
	var r response
	for i := range door.ShadowAfter {
		r = h.joinWithProof("bot", bot, "")
		if i < door.ShadowAfter-1 && r.status != 428 {
			t.Fatalf("refused join %d = %d %s, want 428", i+1, r.status, r.raw)
		}
	}
	if r.status != 202 || r.str("status") != "WAITING" || r.num("position") != 3 || r.num("waiting") != 3 || r.str("ticket") == "" {
		t.Fatalf("join %d of a failing client = %d %s, want 202 WAITING at place 3 of 3 (the back of the line)", door.ShadowAfter, r.status, r.raw)
	}
	for _, k := range []string{"events", "pollAfterMs"} {
		if _, ok := r.body[k]; !ok {
			t.Errorf("shadow answer lacks %q, which a real one has: %s", k, r.raw)
		}
	}
	tkt := r.str("ticket")
	if loc := r.header.Get("Location"); loc != "/v1/queues/"+h.queue+"/tickets/"+tkt {
		t.Errorf("Location = %q", loc)
	}
	if got := lastSeq(); got != seqBefore {
		t.Errorf("USHER_ENTRIES went from sequence %d to %d: the shadow join must not reach the stream", seqBefore, got)
	}
	if got := waiting(); got != 2 {
		t.Errorf("%d waiting after the shadow join, want the 2 real shoppers only", got)
	}
	// The line goes on: three more real joins, the head two admitted.
	var later string
	for i := range 3 {
		later = h.joinWithProof(fmt.Sprintf("later-%d", i), shopper, solved(t, h.challengeFor(shopper))).str("ticket")
	}
	h.admit()
	// A stock-aware tick (the line's figures name the SKUs with units left)
	// and an operators' notice: a real poll carries both.
	if err := h.line.SetStock(context.Background(), h.queue, true, waitqueue.StockLevel{SKU: "shadow-sku", Available: 100, Version: 1}); err != nil {
		t.Fatal(err)
	}
	testenv.Tick(t, h.line, h.queue, waitqueue.Tick{Epoch: h.gw.epoch(), TargetActive: 2, TickLength: 100 * time.Millisecond,
		TokenTTL: time.Minute, StockAware: true})
	if r := h.do("PUT", "/v1/admin/queues/"+h.queue+"/notice", `{"message": "Restock at 10:30."}`, adminAuth); r.status != 200 {
		t.Fatalf("PUT notice = %d %s", r.status, r.raw)
	}
	clk.Advance(2 * time.Second) // past the line figures' one-second cache
	p := h.poll(tkt)
	if p.status != 200 || p.str("status") != "WAITING" || p.num("position") != 3 || p.num("waiting") != 3 || p.str("ticket") != tkt {
		t.Errorf("poll of the shadow ticket = %d %s, want the same ticket WAITING still at 3, with the real line's 3 waiting", p.status, p.raw)
	}
	// Nothing a real waiting shopper's poll says is missing from it.
	if real := h.poll(later); real.str("status") != "WAITING" || real.str("stock") != "available" {
		t.Errorf("poll of a real ticket = %d %s, want WAITING with stock available", real.status, real.raw)
	} else {
		for k := range real.body {
			if _, ok := p.body[k]; !ok {
				t.Errorf("the shadow poll lacks %q, which a real one has:\nreal:   %s\nshadow: %s", k, real.raw, p.raw)
			}
		}
	}
	if r := h.do("DELETE", "/v1/queues/"+h.queue+"/tickets/"+tkt, "", nil); r.status != 204 {
		t.Errorf("leave of a shadow ticket = %d %s, want 204", r.status, r.raw)
	}
	if got := waiting(); got != 3 {
		t.Errorf("%d waiting, want the 3 real shoppers not admitted", got)
	}
	// Another client is not a suspect: its failures are its own.
	if r := h.joinWithProof("honest", shopper, ""); r.status != 428 {
		t.Errorf("a first failure of another address = %d %s, want 428", r.status, r.raw)
	}
	// A shadow ticket in a queue without the shadow line is no ticket.
	h.putQueue(h.queue, `{"rateLimit": `+limitsOff+`, "challenge": {"mode": "enforce", "difficulty": 6}}`, 200)
	if p := h.poll(tkt); p.status != 401 {
		t.Errorf("poll of a shadow ticket once shadow is off = %d %s, want 401", p.status, p.raw)
	}
	if n := value(t, h.gw.metrics.pow.Shadowed.WithLabelValues(h.queue)); n != 1 {
		t.Errorf("usher_pow_shadowed_total = %v, want 1", n)
	}
}

// The door's metrics are on /metrics, labelled by queue, never by user or
// address.
func TestMetricsAfterProofs(t *testing.T) {
	h, _ := powHarness(t, `{"mode": "enforce", "difficulty": 4}`)
	h.joinWithProof("metrics-user-3", "198.51.100.77", solved(t, h.challengeFor("198.51.100.77")))
	h.joinWithProof("metrics-user-4", "198.51.100.77", "")
	s := testenv.Scrape(t, h.serve()+"/metrics")
	s.Check(t, []string{"usher_pow_challenges_issued_total", "usher_pow_checks_total", "usher_pow_difficulty"},
		"metrics-user", "198.51.100")
}

// No Usher-PoW value, however odd, gets anything but a 202 or a 428
// problem.
func FuzzProofHeader(f *testing.F) {
	h := newHarness(f)
	h.putQueue(h.queue, `{"rateLimit": `+limitsOff+`, "challenge": {"mode": "enforce", "difficulty": 1}}`, 200)
	var c pow.Challenge
	if err := json.Unmarshal(h.do("GET", "/v1/queues/"+h.queue+"/challenge", "", nil).raw, &c); err != nil {
		f.Fatal(err)
	}
	f.Add(solved(f, c))
	f.Add(c.Challenge + ":")
	f.Add(":")
	f.Add(strings.Repeat("A", 40) + ":0")
	f.Add(c.Challenge + ":99999999999999999999")
	f.Fuzz(func(t *testing.T, v string) {
		if !validHeaderValue(v) || len(v) > 2048 {
			return
		}
		h := h.with(t)
		r := h.do("POST", "/v1/queues/"+h.queue+"/tickets", "", map[string]string{"X-User-Id": "fuzz", pow.Header: v})
		if !(r.status == 202 || r.status == 200 || (r.status == 428 && isProblem(r))) {
			t.Fatalf("join with Usher-PoW %q = %d %s", v, r.status, r.raw)
		}
	})
}

// The ops dashboard's snapshot carries each queue's current difficulty
// (none while its challenge is off).
func TestOpsSnapshotShowsDifficulty(t *testing.T) {
	h, _ := powHarness(t, `{"mode": "log", "difficulty": "auto", "min": 11, "max": 20}`)
	r := h.do("GET", "/v1/admin/ops", "", map[string]string{"Authorization": "Bearer secret-admin"})
	var snap struct {
		Queues []struct {
			Name          string `json:"name"`
			PowDifficulty *int   `json:"powDifficulty"`
		} `json:"queues"`
	}
	if err := json.Unmarshal(r.raw, &snap); err != nil {
		t.Fatalf("GET /v1/admin/ops = %d %s", r.status, r.raw)
	}
	for _, q := range snap.Queues {
		if q.Name == h.queue && (q.PowDifficulty == nil || *q.PowDifficulty != 11) {
			t.Errorf("ops snapshot powDifficulty = %v, want 11 (auto's min on a calm queue)", q.PowDifficulty)
		}
	}
}

// A proof buys one place in line, not one answer: a join refused after
// its proof was checked — an invite code mistyped — costs the shopper no
// work, and the same proof, sent again once the cause is gone, gets the
// place (a queue in maintenance refuses before the check: nothing is
// spent). Spent all the same, it would make the retry a 428 "reused" and
// a phone solve a new challenge. Once a join with it is recorded, it is
// spent.
func TestAJoinRefusedAfterItsProofKeepsTheProof(t *testing.T) {
	h, _ := powHarness(t, `{"mode": "enforce", "difficulty": 6}`)
	const ip = "198.51.100.21"
	withInvite := func(user, proof, code string) response {
		return h.do("POST", "/v1/queues/"+h.queue+"/tickets", "", map[string]string{"X-User-Id": user, clientHeader: ip,
			pow.Header: proof, lineapi.HeaderInvite: code})
	}
	inv := h.do("POST", "/v1/admin/queues/"+h.queue+"/invites", `{"count": 1}`, adminAuth)
	code := inv.body["codes"].([]any)[0].(string)

	proof := solved(t, h.challengeFor(ip))
	if r := withInvite("guest", proof, "mistyped"); r.status != 403 || r.str("type") != "https://usher.dev/problems/invalid-invite" {
		t.Fatalf("join with an unknown invite = %d %s, want 403 invalid-invite", r.status, r.raw)
	}
	if r := withInvite("guest", proof, code); r.status != 202 {
		t.Fatalf("the same proof with the right invite = %d %s, want 202", r.status, r.raw)
	}
	if r := h.joinWithProof("someone-else", ip, proof); r.status != 428 || r.str("reason") != "reused" {
		t.Fatalf("the proof of a recorded join again = %d %s, want 428 reused", r.status, r.raw)
	}

	proof = solved(t, h.challengeFor(ip)) // solved before the maintenance, which asks for none
	h.putQueue(h.queue, `{"targetActive": 5, "rateLimit": `+limitsOff+`, "mode": "reject", "challenge": {"mode": "enforce", "difficulty": 6}}`, 200)
	if r := h.joinWithProof("patient", ip, proof); r.status != 503 || !isProblem(r) {
		t.Fatalf("join in maintenance = %d %s, want 503", r.status, r.raw)
	}
	h.putQueue(h.queue, `{"targetActive": 5, "rateLimit": `+limitsOff+`, "challenge": {"mode": "enforce", "difficulty": 6}}`, 200)
	if r := h.joinWithProof("patient", ip, proof); r.status != 202 {
		t.Fatalf("the same proof after the maintenance = %d %s, want 202", r.status, r.raw)
	}
}

// A join the stream recorded keeps its proof spent, even when the gateway
// cannot read its place afterwards and answers 503: the follower puts it
// in line all the same, so the proof bought a place. Given back with the
// 503, the same proof could buy a second place for another user from the
// same address.
func TestARecordedJoinKeepsItsProofSpentWhenItsPlaceCannotBeRead(t *testing.T) {
	h, _ := powHarness(t, `{"mode": "enforce", "difficulty": 6}`)
	const ip = "198.51.100.61"
	// The line says it belongs to another incarnation of the entries
	// stream: the gateway's own ingest of a join, after its publish,
	// answers stale (what a reset stream looks like until the follower
	// catches up).
	rdb := testenv.Redis(t)
	if err := rdb.HSet(context.Background(), keyspace.Of(h.queue).Cursor(), "entries.id", "an-older-stream").Err(); err != nil {
		t.Fatal(err)
	}
	proof := solved(t, h.challengeFor(ip))
	if r := h.joinWithProof("first", ip, proof); r.status != 503 {
		t.Fatalf("join while the line is behind = %d %s, want 503", r.status, r.raw)
	}
	if r := h.joinWithProof("second", ip, proof); r.status != 428 || r.str("reason") != "reused" {
		t.Fatalf("the proof of a recorded join again = %d %s, want 428 reused", r.status, r.raw)
	}
}

// A proof buys a new place in line; a join answered with the place the
// shopper already holds (a reload, a second tab, a double click) bought
// none, so its proof is given back. Spent, the same proof sent again would
// be a 428 "reused", and a phone already in line would solve a new
// challenge only to be shown its own place. Given back, the proof still
// buys one new place and no more, from the address it was issued to.
func TestARejoinGivesItsProofBack(t *testing.T) {
	h, _ := powHarness(t, `{"mode": "enforce", "difficulty": 6}`)
	const ip = "198.51.100.51"
	first := h.joinWithProof("alice", ip, solved(t, h.challengeFor(ip)))
	if first.status != 202 {
		t.Fatalf("join = %d %s, want 202", first.status, first.raw)
	}
	proof := solved(t, h.challengeFor(ip))
	for i := range 3 {
		if r := h.joinWithProof("alice", ip, proof); r.status != 200 || r.str("ticket") != first.str("ticket") {
			t.Fatalf("rejoin %d of a shopper in line with one fresh proof = %d %s; want 200 with the place already held, %s",
				i+1, r.status, r.raw, first.str("ticket"))
		}
	}
	if r := h.joinWithProof("bob", ip, proof); r.status != 202 {
		t.Fatalf("the proof a rejoin gave back, for a new place = %d %s, want 202", r.status, r.raw)
	}
	for _, user := range []string{"carol", "alice"} {
		if r := h.joinWithProof(user, ip, proof); r.status != 428 || r.str("reason") != "reused" {
			t.Errorf("%s's join with the proof of bob's place = %d %s, want 428 reused", user, r.status, r.raw)
		}
	}
	if st, err := h.line.Stats(context.Background(), h.queue); err != nil || st.Waiting != 2 {
		t.Errorf("line = %+v (%v), want alice and bob waiting", st, err)
	}
}

// A double click's second join — the stream took the first click's event
// and answered the second as a duplicate — is answered 200 with the first
// one's place: it bought none, so its proof, a different one, is given
// back, not left spent.
func TestADoubleClicksSecondProofIsGivenBack(t *testing.T) {
	h, _ := powHarness(t, `{"mode": "enforce", "difficulty": 6}`)
	h.gw.joins = lineapi.Grouping{Off: true} // the stream's own duplicate check answers the second click
	h.rebuild()
	const ip = "198.51.100.81"
	// The first click's event is in the stream and not yet in the line
	// (its own gateway is still on its way to the ingest), under the id
	// the second click's join uses too.
	id := h.queue + "/dana/0"
	body, err := event.Marshal(id, event.TypeJoined, "dana", time.Now(), event.Joined{Queue: h.queue, User: "dana", JoinedAt: time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.js.Publish(context.Background(), event.EnterSubject(h.queue), body, jetstream.WithMsgID(id)); err != nil {
		t.Fatal(err)
	}
	proof := solved(t, h.challengeFor(ip))
	if r := h.joinWithProof("dana", ip, proof); r.status != 200 {
		t.Fatalf("the second click = %d %s, want 200 with the first click's place", r.status, r.raw)
	}
	if r := h.joinWithProof("erin", ip, proof); r.status != 202 {
		t.Errorf("the second click's proof, for a new place = %d %s, want 202: it bought none", r.status, r.raw)
	}
}

// Before a scheduled drop opens every join is pre-queued, and so is a
// suspect's: its shadow answer was "WAITING at place 1", polled every half
// second, where every real join said PRE_QUEUE with the opening — a bot
// knew at once it was shadowed, at the very drop it came for. Now it is
// PRE_QUEUE like the rest until the draw, then a place among the drawn
// that never moves; a suspect's join between the opening and the draw is
// placed behind the pre-queue, as a real one is.
func TestAShadowJoinBeforeADropOpensIsPreQueuedLikeAnyOther(t *testing.T) {
	h, clk := powHarness(t, `{"mode": "enforce", "difficulty": 6, "suspects": "shadow"}`)
	sched := func(opens time.Time) {
		h.putQueue(h.queue, `{"targetActive": 2, "rateLimit": `+limitsOff+`, "opensAt": "`+rfc3339(opens)+
			`", "challenge": {"mode": "enforce", "difficulty": 6, "suspects": "shadow"}}`, 200)
	}
	sched(clk.Now().Add(time.Hour))
	const bot, shopper = "192.0.2.66", "198.51.100.7"
	real := h.joinWithProof("honest", shopper, solved(t, h.challengeFor(shopper)))
	if real.status != 202 || real.str("status") != "PRE_QUEUE" {
		t.Fatalf("a real join before the opening = %d %s", real.status, real.raw)
	}
	var r response
	for range door.ShadowAfter {
		r = h.joinWithProof("bot", bot, "")
	}
	if n := value(t, h.gw.metrics.pow.Shadowed.WithLabelValues(h.queue)); n != 1 {
		t.Fatalf("usher_pow_shadowed_total = %v, want 1 (the last join shadowed)", n)
	}
	same := func(what string, shadow, real response) {
		t.Helper()
		if shadow.status != real.status || shadow.str("status") != real.str("status") || shadow.str("opensAt") != real.str("opensAt") ||
			(shadow.body["position"] == nil) != (real.body["position"] == nil) || shadow.num("waiting") != real.num("waiting") {
			t.Fatalf("%s:\nshadow: %d %s\nreal:   %d %s\nwant them alike", what, shadow.status, shadow.raw, real.status, real.raw)
		}
		for k := range real.body {
			if _, ok := shadow.body[k]; !ok {
				t.Fatalf("%s: the shadow answer lacks %q:\nshadow: %s\nreal:   %s", what, k, shadow.raw, real.raw)
			}
		}
		if d := shadow.num("pollAfterMs") - real.num("pollAfterMs"); d < -2000 || d > 2000 {
			t.Fatalf("%s: pollAfterMs %d, a real one %d", what, shadow.num("pollAfterMs"), real.num("pollAfterMs"))
		}
	}
	same("a suspect's join before the opening", r, real)
	tkt := r.str("ticket")
	same("its poll before the opening", h.poll(tkt), h.poll(real.str("ticket")))

	// Opened, not drawn yet: the pre-queued still wait for the draw; a
	// suspect joining now is placed behind them.
	sched(clk.Now().Add(-time.Second))
	clk.Advance(2 * time.Second) // past the line figures' one-second cache
	same("its poll between the opening and the draw", h.poll(tkt), h.poll(real.str("ticket")))
	if late := h.joinWithProof("bot-2", bot, ""); late.status != 202 || late.str("status") != "WAITING" || late.num("position") != 2 || late.num("waiting") != 2 {
		t.Fatalf("a suspect's join between the opening and the draw = %d %s; want WAITING at 2 of 2, behind the pre-queued", late.status, late.raw)
	}

	// Drawn: a place among the drawn, the same at every poll.
	h.recordDraw(func(l *catalog.Lottery) { l.Entries = 1 })
	for range 2 {
		if p := h.poll(tkt); p.status != 200 || p.str("status") != "WAITING" || p.num("position") != 1 || p.str("ticket") != tkt {
			t.Fatalf("the shadow ticket's poll after the draw = %d %s; want WAITING at place 1 (of the 1 drawn), the same ticket", p.status, p.raw)
		}
	}
	if r := h.do("DELETE", "/v1/queues/"+h.queue+"/tickets/"+tkt, "", nil); r.status != 204 {
		t.Fatalf("leave of the pre-queued shadow ticket = %d %s, want 204", r.status, r.raw)
	}
}

// auto: a scheduled drop's pre-queue is where its crowd — and a botnet
// after lottery tickets — arrives, so its joins are pressure like any;
// the draw, which moves the pre-queue into the line at once, is none.
// Pressure counted waiting + admitted only: a pre-queue flood left the
// difficulty at min, and the draw read as thousands of joins in a second,
// raising it for the shoppers who came after the opening.
func TestAutoDifficultyCountsThePreQueueAndNotTheDraw(t *testing.T) {
	h, clk := powHarness(t, `{"mode": "log", "difficulty": "auto", "min": 2, "max": 12}`)
	sched := func(opens time.Time) {
		h.putQueue(h.queue, `{"targetActive": 5, "state": "paused", "rateLimit": `+limitsOff+`, "opensAt": "`+rfc3339(opens)+
			`", "challenge": {"mode": "log", "difficulty": "auto", "min": 2, "max": 12}}`, 200)
	}
	sched(clk.Now().Add(time.Hour))
	ask := h.difficultyAsker()
	if d := ask(); d != 2 {
		t.Fatalf("calm queue: difficulty %d, want min 2", d)
	}
	for i := range 40 {
		if r := h.joinWithProof(fmt.Sprintf("early-%d", i), fmt.Sprintf("10.%d.0.1", i), ""); r.status != 202 || r.str("status") != "PRE_QUEUE" {
			t.Fatalf("pre-queue join %d = %d %s", i, r.status, r.raw)
		}
	}
	clk.Advance(time.Second)
	// 40 joins/s against 1 admission/s: floor(log2 40) = 5 bits over min.
	if d := ask(); d != 7 {
		t.Fatalf("after 40 pre-queue joins in a second: difficulty %d, want 7", d)
	}
	// Quiet until the opening: back to min.
	for range 60 {
		clk.Advance(time.Second)
		ask()
	}
	if d := ask(); d != 2 {
		t.Fatalf("a minute after the burst: difficulty %d, want min 2", d)
	}
	// The draw places the 40 at once; nobody joins.
	sched(clk.Now().Add(-time.Second))
	ctx := context.Background()
	testenv.Applied(t, h.line, h.queue, h.gw.epoch(), 1<<40)
	entries, _, version, err := h.line.PreQueue(ctx, h.queue)
	if err != nil {
		t.Fatal(err)
	}
	order := make([]uint64, len(entries))
	for i, e := range entries {
		order[len(entries)-1-i] = e.Seq
	}
	if _, err := h.line.Draw(ctx, h.queue, h.gw.epoch(), version, order, "d"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		clk.Advance(time.Second)
		if d := ask(); d != 2 {
			t.Fatalf("after the draw, nobody joining: difficulty %d, want min 2", d)
		}
	}
}

// A queue in maintenance (mode reject) turns every join away with 503,
// and a suspect's too: its shadow answer was 202 WAITING at the back of
// the line, while every other client, with or without a proof, was told
// 503 maintenance — a bot knew it was shadowed, and an innocent client
// behind a failing address was shown a place in a line that was shut.
func TestAShadowJoinInMaintenanceIsRefusedLikeAnyOther(t *testing.T) {
	const challenge = `{"mode": "enforce", "difficulty": 6, "suspects": "shadow"}`
	h, _ := powHarness(t, challenge)
	const bot, shopper = "192.0.2.67", "198.51.100.8"
	// The bot fails until its next failure would be shadowed.
	for i := range door.ShadowAfter - 1 {
		if r := h.joinWithProof("bot", bot, ""); r.status != 428 {
			t.Fatalf("join %d of a failing client = %d %s, want 428", i+1, r.status, r.raw)
		}
	}
	h.putQueue(h.queue, `{"targetActive": 5, "rateLimit": `+limitsOff+`, "mode": "reject", "challenge": `+challenge+`}`, 200)
	real := h.joinWithProof("honest", shopper, solved(t, h.challengeFor(shopper)))
	if real.status != 503 || real.str("type") != "https://usher.dev/problems/maintenance" {
		t.Fatalf("a real join in maintenance = %d %s, want 503 maintenance", real.status, real.raw)
	}
	r := h.joinWithProof("bot", bot, "")
	if r.status != real.status || r.str("type") != real.str("type") || r.str("detail") != real.str("detail") || r.header.Get("Retry-After") != "60" {
		t.Fatalf("a suspect's join in maintenance = %d %s (Retry-After %q)\nreal: %d %s\nwant the same 503 maintenance, Retry-After 60",
			r.status, r.raw, r.header.Get("Retry-After"), real.status, real.raw)
	}
	if n := value(t, h.gw.metrics.pow.Shadowed.WithLabelValues(h.queue)); n != 0 {
		t.Errorf("usher_pow_shadowed_total = %v, want 0: nobody was given a shadow place", n)
	}
}

// A queue in maintenance turns a join away before asking for its proof,
// as a closed queue does: a join without one is told 503 maintenance at
// once. It was told 428 with a challenge, and the page solved it — up to
// minutes of a phone's work — to be told 503 maintenance after all.
// Nothing is checked, so nothing is counted: no challenge issued, no
// proof missing, no failure toward the shadow line.
func TestAJoinInMaintenanceIsRefusedBeforeItsProofIsAsked(t *testing.T) {
	const challenge = `{"mode": "enforce", "difficulty": 6, "suspects": "shadow"}`
	h, _ := powHarness(t, challenge)
	h.putQueue(h.queue, `{"targetActive": 5, "rateLimit": `+limitsOff+`, "mode": "reject", "challenge": `+challenge+`}`, 200)
	const ip = "198.51.100.31"
	for i, proof := range []string{"", "let me in", strings.Repeat("A", pow.ChallengeLen) + ":0", "", "", "", ""} {
		r := h.joinWithProof("early", ip, proof)
		if r.status != 503 || r.str("type") != "https://usher.dev/problems/maintenance" || r.header.Get("Retry-After") != "60" {
			t.Fatalf("join %d in maintenance with Usher-PoW %q = %d %s; want 503 maintenance, Retry-After 60, with no challenge to solve",
				i+1, proof, r.status, r.raw)
		}
	}
	m := h.gw.metrics.pow
	if n := value(t, m.Issued.WithLabelValues(h.queue)); n != 0 {
		t.Errorf("usher_pow_challenges_issued_total = %v, want 0", n)
	}
	for _, result := range []string{"missing", "malformed", "invalid"} {
		if n := value(t, m.Checks.WithLabelValues(h.queue, "enforce", result)); n != 0 {
			t.Errorf("usher_pow_checks_total{result=%s} = %v, want 0: nothing was checked", result, n)
		}
	}
	// Out of maintenance, the address has failed nothing: its proofless
	// join is a first failure (428), not a suspect's shadow place.
	h.putQueue(h.queue, `{"targetActive": 5, "rateLimit": `+limitsOff+`, "challenge": `+challenge+`}`, 200)
	if r := h.joinWithProof("early", ip, ""); r.status != 428 || r.str("reason") != "missing" {
		t.Errorf("the first proofless join after the maintenance = %d %s, want 428 missing", r.status, r.raw)
	}
}

// A queue that turns every join away — in maintenance, closed — asks the
// page for no work: its challenge has difficulty 0 and is not counted, so
// a phone does not solve seconds of work only to be told 503 or 410. The
// queue's difficulty (19 bits here: about a second of a phone's work,
// minutes at max) would buy a join refused whatever its proof.
func TestAQueueThatRefusesEveryJoinAsksForNoWork(t *testing.T) {
	const challenge = `{"mode": "enforce", "difficulty": 19}`
	h, _ := powHarness(t, challenge)
	const ip = "198.51.100.71"
	for _, c := range []struct{ name, cfg, want string }{
		{"maintenance", `"mode": "reject"`, "https://usher.dev/problems/maintenance"},
		{"closed", `"state": "closed"`, "https://usher.dev/problems/queue-closed"},
	} {
		h.putQueue(h.queue, `{"targetActive": 5, "rateLimit": `+limitsOff+`, `+c.cfg+`, "challenge": `+challenge+`}`, 200)
		ch := h.challengeFor(ip)
		if ch.Difficulty != 0 {
			t.Errorf("%s: challenge difficulty %d, want 0", c.name, ch.Difficulty)
		}
		if r := h.joinWithProof("early", ip, solved(t, ch)); r.str("type") != c.want {
			t.Errorf("%s: join with its proof = %d %s, want %s", c.name, r.status, r.raw, c.want)
		}
	}
	if n := value(t, h.gw.metrics.pow.Issued.WithLabelValues(h.queue)); n != 0 {
		t.Errorf("usher_pow_challenges_issued_total = %v, want 0", n)
	}
	h.putQueue(h.queue, `{"targetActive": 5, "rateLimit": `+limitsOff+`, "challenge": `+challenge+`}`, 200)
	if ch := h.challengeFor(ip); ch.Difficulty != 19 {
		t.Errorf("open again: challenge difficulty %d, want 19", ch.Difficulty)
	}
}

// A proof that is solved but too easy — its challenge was issued to this
// client before the queue asked for more — is never shadowed: it is an
// honest client's work, sent back for more with a 428. Behind an address
// other clients kept failing from (a carrier's NAT), it was answered 202
// WAITING in the shadow line, a place that never moves, for a shopper
// whose only fault was a difficulty raised while it solved.
func TestASolvedButTooEasyProofIsNeverShadowed(t *testing.T) {
	const easy, hard = `{"mode": "enforce", "difficulty": 4, "suspects": "shadow"}`, `{"mode": "enforce", "difficulty": 6, "suspects": "shadow"}`
	h, _ := powHarness(t, easy)
	const nat = "100.64.0.9"
	proof := solved(t, h.challengeFor(nat))
	for i := range door.ShadowAfter - 1 {
		if r := h.joinWithProof(fmt.Sprintf("bot-%d", i), nat, ""); r.status != 428 {
			t.Fatalf("proofless join %d = %d %s, want 428", i+1, r.status, r.raw)
		}
	}
	h.putQueue(h.queue, `{"targetActive": 5, "rateLimit": `+limitsOff+`, "challenge": `+hard+`}`, 200)
	r := h.joinWithProof("honest", nat, proof)
	if r.status != 428 || r.str("reason") != "too_easy" {
		t.Fatalf("a solved proof of the old difficulty, from an address others failed from = %d %s; want 428 too_easy", r.status, r.raw)
	}
	r = h.joinWithProof("honest", nat, solved(t, challengeOf(t, r)))
	if _, err := h.gw.tickets.Parse(r.str("ticket")); r.status != 202 || err != nil {
		t.Fatalf("the carried challenge solved = %d %s (a real ticket: %v); want 202 with a real place", r.status, r.raw, err)
	}
	if n := value(t, h.gw.metrics.pow.Shadowed.WithLabelValues(h.queue)); n != 0 {
		t.Errorf("usher_pow_shadowed_total = %v, want 0", n)
	}
}
