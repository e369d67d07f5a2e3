package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"usher/gateway/lineapi"
	"usher/internal/catalog"
	"usher/internal/lottery"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
)

var adminAuth = map[string]string{"Authorization": "Bearer secret-admin"}

func (h *harness) publicQueue() lineapi.PublicView {
	h.t.Helper()
	r := h.do("GET", "/v1/queues/"+h.queue, "", nil)
	if r.status != 200 {
		h.t.Fatalf("GET /v1/queues/%s = %d %s", h.queue, r.status, r.raw)
	}
	var v lineapi.PublicView
	if err := json.Unmarshal(r.raw, &v); err != nil {
		h.t.Fatal(err)
	}
	return v
}

func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func TestBeforeOpensAtAJoinIsPreQueuedWithoutAPlace(t *testing.T) {
	h := newHarness(t)
	opens := time.Now().Add(time.Hour)
	h.putQueue(h.queue, `{"targetActive": 5, "rateLimit": `+limitsOff+`, "opensAt": "`+rfc3339(opens)+`"}`, 200)

	r := h.join("alice")
	if r.status != 202 || r.str("status") != "PRE_QUEUE" || r.str("opensAt") == "" || r.body["position"] != nil {
		t.Fatalf("join before opensAt = %d %s; want 202 PRE_QUEUE with opensAt and no position", r.status, r.raw)
	}
	if got, _ := time.Parse(time.RFC3339, r.str("opensAt")); !got.Equal(opens.Truncate(time.Nanosecond)) && got.Sub(opens).Abs() > time.Millisecond {
		t.Fatalf("opensAt = %s, want %s", r.str("opensAt"), opens)
	}
	// Refreshing or rejoining changes nothing: the same ticket, still
	// pre-queued.
	again := h.join("alice")
	if again.status != 200 || again.str("ticket") != r.str("ticket") || again.str("status") != "PRE_QUEUE" {
		t.Fatalf("rejoin = %d %s; want 200 with the same ticket", again.status, again.raw)
	}
	p := h.poll(r.str("ticket"))
	if p.status != 200 || p.str("status") != "PRE_QUEUE" || p.body["position"] != nil {
		t.Fatalf("poll = %d %s; want PRE_QUEUE, no position", p.status, p.raw)
	}
	// Come back around the opening, not every second.
	if ms := p.num("pollAfterMs"); ms < 29_000 || ms > 30_000 {
		t.Fatalf("pollAfterMs = %d an hour before the opening, want 30 s", ms)
	}
	// Nobody is admitted before the draw.
	h.join("bob")
	if res := h.admit(); res.Admitted != 0 {
		t.Fatalf("tick before the opening admitted %d", res.Admitted)
	}
	if v := h.publicQueue(); v.PreQueue != 2 || v.Waiting != 0 {
		t.Fatalf("public view = %+v, want 2 pre-queued", v)
	}
}

// A drop that opens further ahead than a time.Duration reaches (the year
// 9999) is polled every 30 s like any far one: the wait until it, saturated
// at the largest Duration, plus the jitter wrapped around to a negative one,
// and the answer said 1 s.
func TestAFarAwayOpeningIsPolledEveryThirtySeconds(t *testing.T) {
	h := newHarness(t)
	h.putQueue(h.queue, `{"targetActive": 5, "rateLimit": `+limitsOff+`, "opensAt": "9999-12-31T23:59:59Z"}`, 200)
	r := h.join("alice")
	if ms := r.num("pollAfterMs"); r.str("status") != "PRE_QUEUE" || ms < 29_000 || ms > 30_000 {
		t.Fatalf("join before an opening in 9999 = %d %s; want PRE_QUEUE, pollAfterMs 30 s", r.status, r.raw)
	}
}

// A PUT that drops opensAt before the draw stranded the pre-queue: nothing
// draws a drop without an opening, so its shoppers stayed PRE_QUEUE for
// good while the next join was READY at once. Refused; after the draw the
// schedule is the operator's to drop.
func TestAnUndrawnDropKeepsItsOpening(t *testing.T) {
	h := newHarness(t)
	h.putQueue(h.queue, `{"targetActive": 5, "rateLimit": `+limitsOff+`, "opensAt": "`+rfc3339(time.Now().Add(time.Hour))+`"}`, 200)
	if r := h.join("early"); r.str("status") != "PRE_QUEUE" {
		t.Fatalf("join before the opening = %s", r.raw)
	}
	r := h.putQueue(h.queue, `{"targetActive": 5, "rateLimit": `+limitsOff+`}`, 400)
	params, _ := r.body["invalid-params"].([]any)
	if !isProblem(r) || len(params) != 1 || !strings.Contains(string(r.raw), `"opensAt"`) {
		t.Fatalf("PUT without opensAt before the draw = %s; want 400 naming opensAt", r.raw)
	}
	if cfg, _ := h.gw.queues.Get(h.queue); cfg.OpensAt == nil {
		t.Fatal("the refused PUT dropped opensAt all the same")
	}
	// Moving the opening is fine, and keeps the commitment.
	h.putQueue(h.queue, `{"targetActive": 5, "rateLimit": `+limitsOff+`, "opensAt": "`+rfc3339(time.Now().Add(2*time.Hour))+`"}`, 200)
	if _, _, err := h.gw.queues.Update(context.Background(), h.queue, func(c *catalog.Config) bool {
		c.Lottery.Drawn = true
		return true
	}); err != nil {
		t.Fatal(err)
	}
	h.putQueue(h.queue, `{"targetActive": 5, "rateLimit": `+limitsOff+`}`, 200)
}

func TestTheLotteryIsCommittedToAndItsSeedKeptSecret(t *testing.T) {
	h := newHarness(t)
	opens := time.Now().Add(time.Hour)
	body := `{"targetActive": 5, "rateLimit": ` + limitsOff + `, "opensAt": "` + rfc3339(opens) + `"}`
	put := h.putQueue(h.queue, body, 200)
	if strings.Contains(string(put.raw), `"seed"`) {
		t.Fatalf("PUT answered the seed: %s", put.raw)
	}
	v := h.publicQueue()
	if v.Lottery == nil || len(v.Lottery.Commitment) != 64 || v.Lottery.Seed != "" {
		t.Fatalf("public lottery = %+v; want a 64-hex commitment and no seed", v.Lottery)
	}
	if v.Mode != "queue" || v.OpensAt == nil {
		t.Fatalf("public view = %+v", v)
	}
	// Neither the admin view nor the audit shows the seed before the draw.
	a := h.do("GET", "/v1/admin/queues/"+h.queue, "", adminAuth)
	if a.status != 200 || strings.Contains(string(a.raw), `"seed"`) || !strings.Contains(string(a.raw), v.Lottery.Commitment) {
		t.Fatalf("admin view = %d %s; want the commitment, no seed", a.status, a.raw)
	}
	// The seed cannot be changed once committed to: a PUT that moves
	// opensAt or carries a lottery of its own keeps the first one.
	later := `{"targetActive": 5, "rateLimit": ` + limitsOff + `, "opensAt": "` + rfc3339(opens.Add(time.Hour)) +
		`", "lottery": {"commitment": "` + lottery.Commitment(make([]byte, 32)) + `", "seed": "` + strings.Repeat("00", 32) + `"}}`
	h.putQueue(h.queue, later, 200)
	if got := h.publicQueue().Lottery; got == nil || got.Commitment != v.Lottery.Commitment {
		t.Fatalf("after a second PUT the commitment is %+v, want %s unchanged", got, v.Lottery.Commitment)
	}
	// The catalog, which every service follows, holds the commitment
	// alone; the seed waits in the seeds bucket, and opens it.
	cfg, _ := h.gw.queues.Get(h.queue)
	if cfg.Lottery.Seed != "" {
		t.Fatalf("the catalog holds the seed before the draw: %+v", cfg.Lottery)
	}
	seed, err := catalog.SeedOf(t.Context(), h.js, h.queue, *cfg.Lottery)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lottery.Reveal(seed, v.Lottery.Commitment); err != nil {
		t.Fatalf("the stored seed does not open the commitment: %v", err)
	}
}

func TestAfterClosesAtAJoinIsRefusedAsEnded(t *testing.T) {
	h := newHarness(t)
	past := time.Now().Add(-time.Minute)
	h.putQueue(h.queue, `{"targetActive": 5, "rateLimit": `+limitsOff+`, "opensAt": "`+rfc3339(past.Add(-time.Hour))+
		`", "closesAt": "`+rfc3339(past)+`"}`, 200)
	r := h.join("alice")
	if r.status != 410 || !isProblem(r) || r.str("reason") != "ended" {
		t.Fatalf("join after closesAt = %d %s; want 410 problem with reason ended", r.status, r.raw)
	}
	bad := h.do("PUT", "/v1/admin/queues/"+h.queue, `{"opensAt": "`+rfc3339(past)+`", "closesAt": "`+rfc3339(past.Add(-time.Hour))+`"}`, adminAuth)
	if bad.status != 400 || !strings.Contains(string(bad.raw), "closesAt") {
		t.Fatalf("closesAt before opensAt = %d %s; want 400 naming closesAt", bad.status, bad.raw)
	}
}

func TestRejectModeIsMaintenance(t *testing.T) {
	h := newHarness(t)
	h.putQueue(h.queue, `{"targetActive": 5, "rateLimit": `+limitsOff+`, "mode": "reject"}`, 200)
	r := h.join("alice")
	if r.status != 503 || !isProblem(r) || r.header.Get("Retry-After") == "" || !strings.Contains(r.str("detail"), "maintenance") {
		t.Fatalf("join in reject mode = %d %v %s; want 503 maintenance with Retry-After", r.status, r.header, r.raw)
	}
	if st, _ := h.line.Stats(t.Context(), h.queue); st.Waiting != 0 {
		t.Fatalf("a refused join is in line: %+v", st)
	}
	bad := h.do("PUT", "/v1/admin/queues/"+h.queue, `{"mode": "party"}`, adminAuth)
	if bad.status != 400 || !strings.Contains(string(bad.raw), "mode") {
		t.Fatalf("an unknown mode = %d %s; want 400", bad.status, bad.raw)
	}
	// Back to queue: joins are taken again.
	h.putQueue(h.queue, `{"targetActive": 5, "rateLimit": `+limitsOff+`, "mode": "queue"}`, 200)
	if r := h.join("alice"); r.status != 202 {
		t.Fatalf("join after maintenance = %d %s", r.status, r.raw)
	}
}

func TestAllowListAndInvitesPassTheLine(t *testing.T) {
	h := newHarness(t)
	h.putQueue(h.queue, `{"targetActive": 5, "rateLimit": `+limitsOff+`, "allow": ["vip"]}`, 200)
	for _, u := range []string{"a", "b", "c"} {
		h.join(u)
	}
	if r := h.join("vip"); r.num("position") != 1 {
		t.Fatalf("allow-listed join = %s; want position 1", r.raw)
	}

	inv := h.do("POST", "/v1/admin/queues/"+h.queue+"/invites", `{"count": 2, "ttlSeconds": 3600}`, adminAuth)
	if inv.status != 201 {
		t.Fatalf("POST invites = %d %s", inv.status, inv.raw)
	}
	codes, _ := inv.body["codes"].([]any)
	if len(codes) != 2 {
		t.Fatalf("invites = %s; want 2 codes", inv.raw)
	}
	code := codes[0].(string)
	withCode := func(user, code string) response {
		return h.do("POST", "/v1/queues/"+h.queue+"/tickets", "", map[string]string{"X-User-Id": user, "Usher-Invite": code})
	}
	if r := withCode("guest", code); r.status != 202 || r.num("position") != 2 {
		t.Fatalf("join with an invite = %d %s; want 202 at position 2 (behind the earlier allowed)", r.status, r.raw)
	}
	if r := withCode("other", code); r.status != 403 || !isProblem(r) {
		t.Fatalf("a used invite = %d %s; want 403", r.status, r.raw)
	}
	if r := withCode("other", "nope"); r.status != 403 {
		t.Fatalf("an unknown invite = %d %s; want 403", r.status, r.raw)
	}
	for _, body := range []string{`{"count": 0}`, `{"count": 10001}`, `{"count": 1, "x": 1}`, `[]`, ``} {
		if r := h.do("POST", "/v1/admin/queues/"+h.queue+"/invites", body, adminAuth); r.status != 400 || !isProblem(r) {
			t.Fatalf("POST invites %q = %d %s; want 400", body, r.status, r.raw)
		}
	}
	if r := h.do("POST", "/v1/admin/queues/"+h.queue+"/invites", `{"count": 1}`, nil); r.status != 401 {
		t.Fatalf("POST invites without the token = %d", r.status)
	}
	// Counted against targetActive: 5 slots, 5 admitted, the allowed first.
	if res := h.admit(); res.Admitted != 5 || res.Waiting != 0 {
		t.Fatalf("tick = %+v", res)
	}
}

// A batch of invites lives as long as it was asked to, whatever batches
// come after it: codes sharing one key whose EXPIRE each batch reset would
// let a batch of one second kill a day's codes a second later, and a
// ttlSeconds beyond a time.Duration (9300000000) must not wrap around to
// an expiry in 1737 that drops every code at once.
func TestEveryBatchOfInvitesLivesAsLongAsItWasAsked(t *testing.T) {
	h := newHarness(t)
	h.putQueue(h.queue, `{"targetActive": 5, "rateLimit": `+limitsOff+`}`, 200)
	invites := func(body string) []any {
		t.Helper()
		r := h.do("POST", "/v1/admin/queues/"+h.queue+"/invites", body, adminAuth)
		codes, _ := r.body["codes"].([]any)
		if r.status != 201 || len(codes) == 0 {
			t.Fatalf("POST invites %s = %d %s", body, r.status, r.raw)
		}
		return codes
	}
	day := invites(`{"count": 1, "ttlSeconds": 86400}`)
	second := invites(`{"count": 1, "ttlSeconds": 1}`)
	for _, body := range []string{`{"count": 1, "ttlSeconds": 9300000000}`, `{"count": 1, "ttlSeconds": 31536001}`, `{"count": 1, "ttlSeconds": -1}`} {
		if r := h.do("POST", "/v1/admin/queues/"+h.queue+"/invites", body, adminAuth); r.status != 400 || !isProblem(r) {
			t.Fatalf("POST invites %s = %d %s; want 400", body, r.status, r.raw)
		}
	}
	time.Sleep(2100 * time.Millisecond)
	withCode := func(user string, code any) response {
		return h.do("POST", "/v1/queues/"+h.queue+"/tickets", "", map[string]string{"X-User-Id": user, "Usher-Invite": code.(string)})
	}
	if r := withCode("late", second[0]); r.status != 403 || !isProblem(r) {
		t.Fatalf("a code of a batch of 1 s, 2 s on = %d %s; want 403", r.status, r.raw)
	}
	if r := withCode("guest", day[0]); r.status != 202 {
		t.Fatalf("a code of a day's batch, after a batch of 1 s expired = %d %s; want 202", r.status, r.raw)
	}
}

// In a scheduled drop's pre-queue an invite is what it is on an open
// queue: a valid code passes the line (a place at the head, no lottery),
// once; an unknown or used code is a 403. Nobody is admitted before the
// opening, the invited neither: they wait at the head for the draw.
func TestInAPreQueueAnInvitePassesTheLineOnce(t *testing.T) {
	h := newHarness(t)
	h.putQueue(h.queue, `{"targetActive": 5, "rateLimit": `+limitsOff+`, "opensAt": "`+rfc3339(time.Now().Add(time.Hour))+`"}`, 200)
	h.drawTick()
	pre := h.join("a")
	if pre.status != 202 || pre.str("status") != "PRE_QUEUE" {
		t.Fatalf("join without an invite = %d %s; want 202 PRE_QUEUE", pre.status, pre.raw)
	}
	inv := h.do("POST", "/v1/admin/queues/"+h.queue+"/invites", `{"count": 1}`, adminAuth)
	codes, _ := inv.body["codes"].([]any)
	if inv.status != 201 || len(codes) != 1 {
		t.Fatalf("POST invites = %d %s; want 1 code", inv.status, inv.raw)
	}
	code := codes[0].(string)
	withCode := func(user, code string) response {
		return h.do("POST", "/v1/queues/"+h.queue+"/tickets", "", map[string]string{"X-User-Id": user, "Usher-Invite": code})
	}

	if r := withCode("guest", "totally-bogus"); r.status != 403 || !isProblem(r) || r.str("type") != "https://usher.dev/problems/invalid-invite" {
		t.Fatalf("an unknown invite in the pre-queue = %d %s; want 403 invalid-invite", r.status, r.raw)
	}
	guest := withCode("guest", code)
	if guest.status != 202 || guest.str("status") != "WAITING" || guest.num("position") != 1 {
		t.Fatalf("a valid invite in the pre-queue = %d %s; want 202 WAITING at position 1 (past the line, no lottery)", guest.status, guest.raw)
	}
	if r := withCode("other", code); r.status != 403 || !isProblem(r) || r.str("type") != "https://usher.dev/problems/invalid-invite" {
		t.Fatalf("a used invite in the pre-queue = %d %s; want 403 invalid-invite", r.status, r.raw)
	}
	if v := h.publicQueue(); v.PreQueue != 1 || v.Waiting != 1 {
		t.Fatalf("public view = %+v; want 1 pre-queued (a), 1 waiting past the line (guest)", v)
	}
	// Before the opening a tick admits nobody: the invited shopper waits
	// at the head, the pre-queued for the draw.
	if res := h.drawTick(); res.Admitted != 0 {
		t.Fatalf("a tick before the opening admitted %d, want 0", res.Admitted)
	}
	if r := h.poll(guest.str("ticket")); r.str("status") != "WAITING" || r.num("position") != 1 {
		t.Fatalf("the invited shopper before the opening = %s; want WAITING at position 1", r.raw)
	}
	if r := h.poll(pre.str("ticket")); r.str("status") != "PRE_QUEUE" {
		t.Fatalf("the pre-queued shopper after a tick = %s; want PRE_QUEUE", r.raw)
	}
}

// Between the opening and the draw, a join is not admitted in its own
// request, however empty the line looks: the pre-queue, not in it yet, is
// drawn ahead of every join made after the opening.
func TestBeforeTheDrawNoJoinIsAdmittedAtOnce(t *testing.T) {
	h := newHarness(t)
	h.putQueue(h.queue, `{"targetActive": 5, "rateLimit": `+limitsOff+`, "opensAt": "`+rfc3339(time.Now().Add(time.Minute))+`"}`, 200)
	h.join("early")
	h.putQueue(h.queue, `{"targetActive": 5, "rateLimit": `+limitsOff+`, "opensAt": "`+rfc3339(time.Now().Add(-time.Second))+`"}`, 200)
	h.drawTick() // a tick that found the line current: admission at once may proceed, but for the draw
	if r := h.join("late"); r.status != 202 || r.str("status") != "WAITING" {
		t.Fatalf("a join after the opening, before the draw = %d %s; want 202 WAITING", r.status, r.raw)
	}
}

// drawTick is an admission tick of h's queue as the admitter runs it for a
// scheduled drop: nobody in the pre-queue admitted before the draw.
func (h *harness) drawTick() waitqueue.TickResult {
	h.t.Helper()
	testenv.Applied(h.t, h.line, h.queue, h.gw.epoch(), 1<<40)
	return testenv.Tick(h.t, h.line, h.queue, waitqueue.Tick{Epoch: h.gw.epoch(), TargetActive: 5,
		TickLength: 100 * time.Millisecond, TokenTTL: time.Minute, AwaitDraw: true})
}

func TestPassthroughIsCountedAsIfQueued(t *testing.T) {
	h := newHarness(t)
	h.putQueue(h.queue, `{"targetActive": 1, "rateLimit": `+limitsOff+`, "mode": "passthrough"}`, 200)
	if v := h.publicQueue(); v.Mode != "passthrough" {
		t.Fatalf("public mode = %q", v.Mode)
	}
	// With no follower here the join waits for the tick; the e2e tests
	// see READY in the join's own answer. Counted either way.
	for _, u := range []string{"a", "b", "c"} {
		if r := h.join(u); r.status != 202 {
			t.Fatalf("join = %d %s", r.status, r.raw)
		}
	}
	st, _ := h.line.Stats(t.Context(), h.queue)
	if st.Waiting+st.Active != 3 {
		t.Fatalf("stats = %+v, want 3 counted", st)
	}
}

// A passthrough join admitted in its own request is READY in its answer,
// with the token, even when this host's clock is a moment behind Redis's:
// its readyAt is Redis's time of the admission, which has passed.
func TestAJoinAdmittedAtOnceIsReadyWhateverThisHostsClockSays(t *testing.T) {
	h := newHarness(t)
	h.putQueue(h.queue, `{"targetActive": 1, "rateLimit": `+limitsOff+`, "mode": "passthrough"}`, 200)
	h.admit() // a tick that found the line current: admission at once may proceed
	h.gw.now = func() time.Time { return time.Now().Add(-200 * time.Millisecond) }
	h.rebuild()
	r := h.join("alice")
	if r.status != 202 || r.str("status") != "READY" || r.str("token") == "" {
		t.Fatalf("passthrough join with this host's clock 200 ms behind = %d %s; want 202 READY with a token", r.status, r.raw)
	}
}

// A drop's draw places its pre-queue at the head of the line: scheduling one
// over shoppers already waiting would move them — who joined first — back
// behind it. Refused while anyone waits; a drop starts on an empty line.
func TestADropIsNeverScheduledOverAWaitingLine(t *testing.T) {
	h := newHarness(t)
	first := h.join("first")
	if first.status != 202 || first.str("status") != "WAITING" {
		t.Fatalf("join = %d %s, want 202 WAITING", first.status, first.raw)
	}
	drop := `{"targetActive": 5, "rateLimit": ` + limitsOff + `, "opensAt": "` + rfc3339(time.Now().Add(time.Hour)) + `"}`
	r := h.putQueue(h.queue, drop, 409)
	if !isProblem(r) || !strings.HasSuffix(r.str("type"), "line-not-empty") || !strings.Contains(r.str("detail"), "1 shopper(s)") {
		t.Fatalf("scheduling a drop over a waiting line = %s; want 409 line-not-empty counting the one waiting", r.raw)
	}
	if cfg, _ := h.gw.queues.Get(h.queue); cfg.OpensAt != nil || cfg.Lottery != nil {
		t.Fatalf("the refused PUT stored %+v all the same", cfg)
	}
	if p := h.poll(first.str("ticket")); p.str("status") != "WAITING" || p.num("position") != 1 {
		t.Fatalf("the waiting shopper after the refusal = %s, want WAITING at position 1", p.raw)
	}
	// Once nobody waits, the drop is scheduled.
	if r := h.do("DELETE", "/v1/queues/"+h.queue+"/tickets/"+first.str("ticket"), "", nil); r.status != 204 {
		t.Fatalf("leave = %d %s", r.status, r.raw)
	}
	h.putQueue(h.queue, drop, 200)
	if r := h.join("early"); r.str("status") != "PRE_QUEUE" {
		t.Fatalf("a join after scheduling = %s, want PRE_QUEUE", r.raw)
	}
}

// Between the opening and the draw (a second or so, when most of a drop's
// crowd arrives) a join is told the place it will have: behind the whole
// pre-queue, which the draw puts ahead of every join since the opening.
// It was told "position 1 of 1" — the pre-queue not being in the line
// yet — and then, at the draw, a place as far back as the pre-queue is
// long. An invited shopper, who waits ahead of the pre-queue, keeps place
// 1. After the draw nobody's place has moved.
func TestAJoinBeforeTheDrawIsToldItsPlaceBehindThePreQueue(t *testing.T) {
	h := newHarness(t)
	h.putQueue(h.queue, `{"targetActive": 5, "state": "paused", "rateLimit": `+limitsOff+`, "opensAt": "`+rfc3339(time.Now().Add(time.Minute))+`"}`, 200)
	pre := map[string]string{}
	for _, u := range []string{"p1", "p2", "p3"} {
		pre[u] = h.join(u).str("ticket")
	}
	inv := h.do("POST", "/v1/admin/queues/"+h.queue+"/invites", `{"count": 1}`, adminAuth)
	guest := h.do("POST", "/v1/queues/"+h.queue+"/tickets", "", map[string]string{"X-User-Id": "guest",
		"Usher-Invite": inv.body["codes"].([]any)[0].(string)})
	h.putQueue(h.queue, `{"targetActive": 5, "state": "paused", "rateLimit": `+limitsOff+`, "opensAt": "`+rfc3339(time.Now().Add(-time.Second))+`"}`, 200)

	late := h.join("late")
	if late.status != 202 || late.str("status") != "WAITING" || late.num("position") != 5 || late.num("waiting") != 5 {
		t.Fatalf("a join after the opening, before the draw = %d %s; want WAITING at 5 of 5 (the invited, 3 pre-queued, then it)", late.status, late.raw)
	}
	testenv.Applied(t, h.line, h.queue, h.gw.epoch(), 1<<40)
	if r := h.poll(late.str("ticket")); r.num("position") != 5 || r.num("waiting") != 5 {
		t.Fatalf("its poll before the draw = %s; want position 5 of 5", r.raw)
	}
	if r := h.poll(guest.str("ticket")); r.num("position") != 1 || r.num("waiting") != 5 {
		t.Fatalf("the invited shopper's poll before the draw = %s; want position 1 of 5", r.raw)
	}

	ctx := context.Background()
	entries, _, version, err := h.line.PreQueue(ctx, h.queue)
	if err != nil || len(entries) != 3 {
		t.Fatalf("PreQueue = %v, %v", entries, err)
	}
	if _, err := h.line.Draw(ctx, h.queue, h.gw.epoch(), version, []uint64{entries[2].Seq, entries[0].Seq, entries[1].Seq}, "d"); err != nil {
		t.Fatal(err)
	}
	for tk, want := range map[string]int64{guest.str("ticket"): 1, pre["p3"]: 2, pre["p1"]: 3, pre["p2"]: 4, late.str("ticket"): 5} {
		if r := h.poll(tk); r.str("status") != "WAITING" || r.num("position") != want || r.num("waiting") != 5 {
			t.Fatalf("poll after the draw = %s; want WAITING at %d of 5", r.raw, want)
		}
	}
}

// A drawn drop has opened: its opening cannot move past the draw. A PUT
// that set a new opensAt an hour ahead on a drawn queue (a "next drop" on
// the same queue) was taken: the public view said the queue opens in an
// hour while a shopper arriving now was READY at once — no pre-queue, no
// lottery (the old one stays drawn), the drop open an hour early. Refused,
// naming opensAt; keeping it, moving it back or leaving it out is fine.
func TestADrawnDropsOpeningCannotMovePastTheDraw(t *testing.T) {
	h := newHarness(t)
	opens := time.Now().Add(-time.Minute)
	cfgWith := func(opens string) string {
		return `{"targetActive": 5, "rateLimit": ` + limitsOff + opens + `}`
	}
	h.putQueue(h.queue, cfgWith(`, "opensAt": "`+rfc3339(opens)+`"`), 200)
	drawnAt := opens.Add(time.Second)
	h.recordDraw(func(l *catalog.Lottery) { l.DrawnAt, l.Entries, l.OrderDigest = &drawnAt, 3, strings.Repeat("5e", 32) })

	later := time.Now().Add(time.Hour)
	r := h.putQueue(h.queue, cfgWith(`, "opensAt": "`+rfc3339(later)+`"`), 400)
	if !isProblem(r) || !strings.Contains(string(r.raw), `"opensAt"`) {
		t.Fatalf("PUT moving a drawn drop's opening an hour ahead = %s; want 400 naming opensAt", r.raw)
	}
	if v := h.publicQueue(); v.OpensAt == nil || v.OpensAt.Sub(opens).Abs() > time.Millisecond {
		t.Fatalf("public opensAt after the refused PUT = %v, want %s unchanged", v.OpensAt, opens)
	}
	h.putQueue(h.queue, cfgWith(`, "opensAt": "`+rfc3339(opens)+`"`), 200)                 // kept
	h.putQueue(h.queue, cfgWith(`, "opensAt": "`+rfc3339(opens.Add(-time.Hour))+`"`), 200) // moved back
	h.putQueue(h.queue, cfgWith(``), 200)                                                  // left out
	r = h.putQueue(h.queue, cfgWith(`, "opensAt": "`+rfc3339(later)+`"`), 400)
	if !strings.Contains(string(r.raw), `"opensAt"`) {
		t.Fatalf("PUT scheduling a drawn queue again = %s; want 400 naming opensAt", r.raw)
	}
	// The public view (checked against the API contract) shows the draw.
	if v := h.publicQueue(); v.Lottery == nil || v.Lottery.DrawnAt == nil || v.Lottery.Entries == nil || *v.Lottery.Entries != 3 || v.Lottery.OrderDigest != strings.Repeat("5e", 32) {
		t.Fatalf("public lottery = %+v; want the drawn one kept, with its entries and order digest", v.Lottery)
	}
}

// A draw with nobody pre-queued shows entries 0 in the public view, as it
// shows every other count: a verifier compares its list's length with
// lottery.entries (docs/events.md, "Verifying a draw"), and an empty list is
// length 0, not a missing field.
func TestAnEmptyDrawShowsZeroEntries(t *testing.T) {
	h := newHarness(t)
	opens := time.Now().Add(-time.Minute)
	h.putQueue(h.queue, `{"targetActive": 5, "rateLimit": `+limitsOff+`, "opensAt": "`+rfc3339(opens)+`"}`, 200)
	lot := func() (map[string]any, string) {
		t.Helper()
		h.publicQueue() // checked against the API contract
		r := h.do("GET", "/v1/queues/"+h.queue, "", nil)
		var v struct {
			Lottery map[string]any `json:"lottery"`
		}
		if err := json.Unmarshal(r.raw, &v); err != nil {
			t.Fatal(err)
		}
		return v.Lottery, string(r.raw)
	}
	if l, raw := lot(); l["entries"] != nil {
		t.Fatalf("public view before the draw = %s; want no entries", raw)
	}
	drawnAt := opens.Add(time.Second)
	h.recordDraw(func(l *catalog.Lottery) { l.DrawnAt, l.Entries, l.OrderDigest = &drawnAt, 0, lottery.Digest(nil) })
	if l, raw := lot(); l["entries"] != float64(0) {
		t.Fatalf("public view after an empty draw = %s; want lottery.entries 0", raw)
	}
}
