package main

import (
	"encoding/json"
	"testing"
	"time"

	"usher/gateway/admin"
	"usher/internal/adaptive"
	"usher/internal/adaptive/adaptivetest"
	"usher/internal/testenv"
)

// The admin view of an adaptive queue carries its adaptive setting and
// the limit its ticks use now with the reason (what usherctl queue get
// prints and the dashboard shows); a queue that is not adaptive has none.
func TestAdminViewShowsTheAdaptiveLimit(t *testing.T) {
	h := newHarness(t)
	st := adaptive.NewStore(testenv.Redis(t))
	h.gw.ops.limits = st
	h.rebuild()
	adminAuth := map[string]string{"Authorization": "Bearer secret-admin"}
	type view struct {
		TargetActive int `json:"targetActive"`
		Adaptive     *struct {
			Enabled  bool `json:"enabled"`
			Min, Max int
		} `json:"adaptive"`
		AdaptiveLimit *admin.AdaptiveView `json:"adaptiveLimit"`
	}
	get := func(path string) view {
		t.Helper()
		r := h.do("GET", path, "", adminAuth)
		if r.status != 200 {
			t.Fatalf("GET %s = %d %s", path, r.status, r.raw)
		}
		var v view
		if err := json.Unmarshal(r.raw, &v); err != nil {
			t.Fatal(err)
		}
		return v
	}

	if v := get("/v1/admin/queues/" + h.queue); v.Adaptive != nil || v.AdaptiveLimit != nil {
		t.Fatalf("a fixed queue's view has %+v / %+v, want no adaptive fields", v.Adaptive, v.AdaptiveLimit)
	}
	h.putQueue(h.queue, `{"targetActive": 5, "adaptive": {"enabled": true, "min": 2, "max": 40}, "rateLimit": `+limitsOff+`}`, 200)
	v := get("/v1/admin/queues/" + h.queue)
	if v.Adaptive == nil || !v.Adaptive.Enabled || v.Adaptive.Min != 2 || v.Adaptive.Max != 40 {
		t.Fatalf("adaptive setting %+v, want enabled within [2, 40]", v.Adaptive)
	}
	if a := v.AdaptiveLimit; a == nil || a.Limit != 5 || a.Reason != "start" {
		t.Fatalf("before any admitter: %+v, want the targetActive 5 (start)", a)
	}

	// An admitter decides a window: the view follows.
	p := adaptive.Params{Window: 100 * time.Millisecond, Bounds: adaptive.Bounds{Min: 2, Max: 40, Start: 5}, Lease: time.Second}
	adaptivetest.Decide(t, st, h.queue, p, adaptive.State{Limit: 9, BaselineMs: 240, LatencyMs: 251.26},
		adaptive.Decision{Limit: 9, Reason: adaptive.ReasonRaise}, 37)
	v = get("/v1/admin/queues/" + h.queue)
	if a := v.AdaptiveLimit; a == nil || a.Limit != 9 || a.Reason != "raise" || a.Orders != 37 || a.LatencyMs != 251.3 ||
		a.BaselineMs != 240 || a.DecidedAt == nil {
		t.Fatalf("after a decision: %+v, want 9 (raise) over 37 orders at 251.3 ms against 240 ms, with its time", a)
	}

	// The dashboard's snapshot shows the same.
	r := h.do("GET", "/v1/admin/ops", "", adminAuth)
	var snap struct{ Queues []view }
	if err := json.Unmarshal(r.raw, &snap); err != nil || r.status != 200 {
		t.Fatalf("GET /v1/admin/ops = %d %s", r.status, r.raw)
	}
	found := false
	for _, q := range snap.Queues {
		if q.AdaptiveLimit != nil && q.AdaptiveLimit.Limit == 9 {
			found = true
		}
	}
	if !found {
		t.Errorf("the ops snapshot has no queue with the adaptive limit 9: %s", r.raw)
	}

	// Narrower bounds apply to the view at once, before the next decision.
	h.putQueue(h.queue, `{"targetActive": 5, "adaptive": {"enabled": true, "min": 2, "max": 6}, "rateLimit": `+limitsOff+`}`, 200)
	if a := get("/v1/admin/queues/" + h.queue).AdaptiveLimit; a == nil || a.Limit != 6 {
		t.Fatalf("with max 6: %+v, want the limit clamped to 6", a)
	}
}

// An adaptive setting the controller could not start from is refused,
// every invalid field listed.
func TestAdaptiveSettingIsValidated(t *testing.T) {
	h := newHarness(t)
	r := h.putQueue(h.queue, `{"targetActive": 50, "adaptive": {"enabled": true, "min": 5, "max": 40, "windowMs": 20}}`, 400)
	params, _ := r.body["invalid-params"].([]any)
	var names []string
	for _, p := range params {
		m, _ := p.(map[string]any)
		n, _ := m["name"].(string)
		names = append(names, n)
	}
	if len(names) != 2 || names[0] != "adaptive" || names[1] != "adaptive.windowMs" {
		t.Fatalf("invalid params %v, want adaptive and adaptive.windowMs: %s", names, r.raw)
	}
}
