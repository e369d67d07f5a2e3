package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"usher/internal/testenv"
	"usher/internal/ticket"
	"usher/internal/waitqueue"
)

func TestConcurrentJoinsGetDistinctPlaces(t *testing.T) {
	h := newHarness(t)
	tickets := make([]string, 100)
	var wg sync.WaitGroup
	for i := range tickets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := h.join(fmt.Sprintf("shopper-%d", i))
			if r.status != 202 || r.str("status") != "WAITING" || r.num("position") < 1 || r.num("position") > 100 {
				t.Errorf("join %d = %d %s, want 202 WAITING at 1..100", i, r.status, r.raw)
			}
			tickets[i] = r.str("ticket")
		}()
	}
	wg.Wait()
	type placed struct {
		seq uint64
		pos int64
	}
	var got []placed
	for _, tk := range tickets {
		r := h.poll(tk)
		parsed, err := h.gw.tickets.Parse(r.str("ticket"))
		if err != nil {
			t.Fatalf("poll = %s: %v", r.raw, err)
		}
		got = append(got, placed{parsed.Seq, r.num("position")})
	}
	sort.Slice(got, func(i, j int) bool { return got[i].seq < got[j].seq })
	for i, p := range got {
		if p.pos != int64(i+1) {
			t.Fatalf("shopper with the %d-th sequence is at %d, want %d (distinct places in join order)", i+1, p.pos, i+1)
		}
	}
}

func TestJoiningAgainKeepsThePlace(t *testing.T) {
	h := newHarness(t)
	first := h.join("alice")
	h.join("bob")
	again := h.join("alice")
	if again.status != 200 || again.str("ticket") != first.str("ticket") || again.num("position") != 1 {
		t.Fatalf("second join = %d %s, want 200 with the same ticket at position 1", again.status, again.raw)
	}
	if loc := again.header.Get("Location"); loc != "/v1/queues/"+h.queue+"/tickets/"+first.str("ticket") {
		t.Errorf("Location = %q", loc)
	}
}

// A shopper whose join the line has not seen yet (the first seed lost 7% of
// polls to this gap) is told WAITING with an estimate, never "unknown".
func TestPollBeforeTheLineHasSeenTheJoin(t *testing.T) {
	h := newHarness(t)
	h.join("alice")
	tk := h.gw.tickets.Issue(ticket.Ticket{Queue: h.queue, User: "bob", Epoch: h.gw.epoch(), Seq: 1 << 40})
	r := h.poll(tk)
	if r.status != 200 || r.str("status") != "WAITING" || r.num("position") != 2 || r.num("pollAfterMs") == 0 {
		t.Fatalf("poll = %d %s, want WAITING at position 2 (behind alice)", r.status, r.raw)
	}
}

func TestReadyOnlyOnceReadyAtHasPassed(t *testing.T) {
	h := newHarness(t)
	tk := h.join("alice").str("ticket")
	h.admit()
	cur, _ := h.line.Lookup(context.Background(), h.queue, "alice")
	seq := cur.Seq
	e, _ := h.line.Poll(context.Background(), h.queue, seq)
	// The gateway's clock a moment before readyAt, then a moment after.
	h.gw.now = func() time.Time { return e.ReadyAt.Add(-time.Millisecond) }
	h.rebuild()
	if r := h.poll(tk); r.str("status") != "WAITING" || r.num("position") != 1 || r.body["token"] != nil {
		t.Fatalf("poll before readyAt = %s, want WAITING at 1 without a token", r.raw)
	}
	after := e.ReadyAt.Add(time.Second)
	h.gw.now = func() time.Time { return after }
	h.rebuild()
	r := h.poll(tk)
	if r.str("status") != "READY" || r.str("token") == "" || r.str("readyAt") == "" || r.str("expiresAt") == "" {
		t.Fatalf("poll after readyAt = %s, want READY with token", r.raw)
	}
	c, err := h.gw.keys.Verify(r.str("token"), after)
	if err != nil || c.User != "alice" || c.Queue != h.queue || c.ID == "" {
		t.Fatalf("token claims = %+v, %v", c, err)
	}
	// Polling again hands out the same token.
	if again := h.poll(tk); again.str("token") != r.str("token") {
		t.Error("a second poll returned a different token")
	}
}

func TestExpiredTokenThenJoinAgainGoesToTheBack(t *testing.T) {
	h := newHarness(t)
	tk := h.join("alice").str("ticket")
	h.join("bob")
	h.putQueue(h.queue, `{"targetActive": 1, "tokenTtlSeconds": 1}`, 200)
	h.admit()
	time.Sleep(1100 * time.Millisecond)
	h.admit() // alice's token expires (Redis time), bob admitted
	if r := h.poll(tk); r.str("status") != "EXPIRED" {
		t.Fatalf("poll = %s, want EXPIRED", r.raw)
	}
	h.join("carol")
	again := h.join("alice")
	if again.status != 202 || again.str("ticket") == tk || again.num("position") != 2 {
		t.Fatalf("join after expiry = %d %s, want 202 with a new ticket behind carol", again.status, again.raw)
	}
}

func TestLeave(t *testing.T) {
	h := newHarness(t)
	tk := h.join("alice").str("ticket")
	bob := h.join("bob").str("ticket")
	r := h.do("DELETE", "/v1/queues/"+h.queue+"/tickets/"+tk, "", nil)
	if r.status != 204 {
		t.Fatalf("DELETE = %d %s, want 204", r.status, r.raw)
	}
	if r := h.poll(tk); r.str("status") != "LEFT" {
		t.Errorf("poll after leaving = %s, want LEFT", r.raw)
	}
	if r := h.poll(bob); r.num("position") != 1 {
		t.Errorf("bob = %s, want position 1 once alice left", r.raw)
	}
	if r := h.do("DELETE", "/v1/queues/"+h.queue+"/tickets/"+tk, "", nil); r.status != 204 {
		t.Errorf("second DELETE = %d, want 204 (idempotent)", r.status)
	}
}

func TestClosedQueueRefusesJoinsAndTellsTheLine(t *testing.T) {
	h := newHarness(t)
	tk := h.join("alice").str("ticket")
	h.putQueue(h.queue, `{"state": "closed"}`, 200)
	if r := h.join("bob"); r.status != 410 || !isProblem(r) || r.str("reason") != "closed" {
		t.Errorf("join closed = %d %s, want 410 problem with reason closed", r.status, r.raw)
	}
	// A closed queue has no line to tell of: the answer says why, as the
	// stream's closed event does, and no waiting figure.
	if r := h.poll(tk); r.str("status") != "CLOSED" || r.str("reason") != "closed" || r.body["waiting"] != nil {
		t.Errorf("poll = %s, want CLOSED (closed) without waiting", r.raw)
	}
}

func TestPausedQueueAcceptsJoinsAndAdmitsNobody(t *testing.T) {
	h := newHarness(t)
	h.putQueue(h.queue, `{"state": "paused"}`, 200)
	tk := h.join("alice").str("ticket")
	if r := h.admit(); r.Admitted != 0 {
		t.Fatalf("tick while paused admitted %d", r.Admitted)
	}
	if r := h.poll(tk); r.str("status") != "WAITING" {
		t.Fatalf("poll = %s", r.raw)
	}
}

func TestClientErrorsAreProblems(t *testing.T) {
	h := newHarness(t)
	good := h.join("alice").str("ticket")
	otherTk := h.gw.tickets.Issue(ticket.Ticket{Queue: h.queue + "-other", User: "alice", Epoch: h.gw.epoch(), Seq: 1})
	q := "/v1/queues/" + h.queue
	admin := map[string]string{"Authorization": "Bearer secret-admin"}
	tests := []struct {
		name, method, path, body string
		header                   map[string]string
		want                     int
	}{
		{"join without user", "POST", q + "/tickets", "", nil, 400},
		{"join with a bad user", "POST", q + "/tickets", "", map[string]string{"X-User-Id": "a b"}, 400},
		{"join with a long user", "POST", q + "/tickets", "", map[string]string{"X-User-Id": strings.Repeat("a", 65)}, 400},
		{"join unknown queue", "POST", "/v1/queues/nope/tickets", "", map[string]string{"X-User-Id": "u"}, 404},
		{"poll garbled ticket", "GET", q + "/tickets/garbage", "", nil, 401},
		{"poll forged ticket", "GET", q + "/tickets/" + good[:len(good)-3] + "AAA", "", nil, 401},
		{"poll another queue's ticket", "GET", q + "/tickets/" + otherTk, "", nil, 404},
		{"leave forged ticket", "DELETE", q + "/tickets/x", "", nil, 401},
		{"admin without token", "GET", "/v1/admin/queues/" + h.queue, "", nil, 401},
		{"admin with a wrong token", "GET", "/v1/admin/queues/" + h.queue, "", map[string]string{"Authorization": "Bearer nope"}, 401},
		{"admin unknown queue", "GET", "/v1/admin/queues/nope", "", admin, 404},
		{"admin bad json", "PUT", "/v1/admin/queues/q1", "{", admin, 400},
		{"admin unknown field", "PUT", "/v1/admin/queues/q1", `{"targetActiv": 3}`, admin, 400},
		{"admin bad name", "PUT", "/v1/admin/queues/bad.name", `{}`, admin, 400},
		{"unknown route", "GET", "/v2/nothing", "", nil, 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := h.do(tt.method, tt.path, tt.body, tt.header)
			if r.status != tt.want || !isProblem(r) {
				t.Fatalf("%s %s = %d %s %s, want %d problem+json", tt.method, tt.path, r.status, r.header.Get("Content-Type"), r.raw, tt.want)
			}
		})
	}
}

func TestAdminListsEveryInvalidField(t *testing.T) {
	h := newHarness(t)
	r := h.do("PUT", "/v1/admin/queues/q2", `{"targetActive":0,"maxAdmitPerTick":-1,"tickMs":5,"tokenTtlSeconds":0,"state":"maybe"}`,
		map[string]string{"Authorization": "Bearer secret-admin"})
	params, _ := r.body["invalid-params"].([]any)
	if r.status != 400 || len(params) != 5 {
		t.Fatalf("PUT = %d %s, want 400 listing 5 fields", r.status, pretty(r.raw))
	}
}

// A token's lifetime or a tick too long for a time.Duration would wrap
// around (tokenTtlSeconds 99999999999: tokens expiring in 2273): refused.
func TestAdminRefusesFiguresBeyondTheirBounds(t *testing.T) {
	h := newHarness(t)
	r := h.do("PUT", "/v1/admin/queues/q2", `{"targetActive":1000001,"maxAdmitPerTick":1000001,"tickMs":10000000000000,"tokenTtlSeconds":99999999999}`,
		map[string]string{"Authorization": "Bearer secret-admin"})
	params, _ := r.body["invalid-params"].([]any)
	if r.status != 400 || !isProblem(r) || len(params) != 4 {
		t.Fatalf("PUT = %d %s, want 400 listing 4 fields", r.status, pretty(r.raw))
	}
}

func TestAdminQueueLifecycle(t *testing.T) {
	h := newHarness(t)
	name := h.queue + "-x"
	created := h.putQueue(name, `{"targetActive": 7, "maxAdmitPerTick": 3}`, 201)
	if created.num("targetActive") != 7 || created.num("tickMs") != 100 || created.str("state") != "open" {
		t.Fatalf("PUT echo = %s, want the config with defaults filled in", created.raw)
	}
	h.putQueue(name, `{"targetActive": 8}`, 200)
	r := h.do("GET", "/v1/admin/queues/"+name, "", map[string]string{"Authorization": "Bearer secret-admin"})
	if r.status != 200 || r.num("targetActive") != 8 || r.body["waiting"] == nil || r.body["admitRatePerSec"] == nil {
		t.Fatalf("GET = %d %s", r.status, r.raw)
	}
}

func TestJWKS(t *testing.T) {
	h := newHarness(t)
	r := h.do("GET", "/.well-known/jwks.json", "", nil)
	keys, _ := r.body["keys"].([]any)
	if r.status != 200 || len(keys) != 1 {
		t.Fatalf("JWKS = %d %s", r.status, r.raw)
	}
}

// Fiber's in-memory test transport refuses large bodies itself, so this one
// goes over a real socket.
func TestOversizedBodyIs413(t *testing.T) {
	h := newHarness(t)
	base := h.serve()
	req, _ := http.NewRequest("PUT", base+"/v1/admin/queues/q1", strings.NewReader(`{"state":"`+strings.Repeat("x", 20<<10)+`"}`))
	req.Header.Set("Authorization", "Bearer secret-admin")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	wantProblemResponse(t, "PUT oversized", res, 413)
}

// Metrics carry route templates, never tickets or users, and stay
// scrapable after every kind of request.
func TestMetricsUseRouteTemplates(t *testing.T) {
	h := newHarness(t)
	tk := h.join("alice").str("ticket")
	h.poll(tk)
	h.do("PUT", "/v1/admin/queues/"+h.queue, `{}`, map[string]string{"Authorization": "Bearer secret-admin"})
	h.do("GET", "/nope", "", nil)
	r := h.do("GET", "/metrics", "", nil)
	if r.status != 200 {
		t.Fatalf("GET /metrics = %d %s", r.status, r.raw)
	}
	body := string(r.raw)
	for _, want := range []string{`route="/v1/queues/:queue/tickets/:ticket"`, `method="PUT"`, "usher_joins_total 1", "process_cpu_seconds_total"} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(body, tk) || strings.Contains(body, "alice") {
		t.Error("metrics contain a ticket or a user id")
	}
}

// A Redis or broker failure on the request path is a 503 problem with
// Retry-After, logged once with its cause (never a silent 503, never a 500).
func TestAFailedDependencyIsA503LoggedOnceWithItsCause(t *testing.T) {
	h := newHarness(t)
	tk := h.join("alice").str("ticket")
	url, stop := testenv.RedisServer(t)
	rdb, err := waitqueue.DialURL(url, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	var logs testenv.Buffer
	h.gw.line = waitqueue.NewClient(rdb)
	h.gw.log = slog.New(slog.NewJSONHandler(&logs, nil))
	h.rebuild()
	stop() // Redis is gone

	r := h.poll(tk)
	if r.status != 503 || !isProblem(r) || r.header.Get("Retry-After") == "" {
		t.Fatalf("poll with Redis down = %d %s, want a 503 problem with Retry-After", r.status, r.raw)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "dependency unavailable") || !strings.Contains(lines[0], "connect") {
		t.Fatalf("log = %q, want one line naming the failure and its cause", logs.String())
	}
}
