package main

import (
	"strings"
	"testing"
)

// The fuzzer's find: a queue configuration with a field in the wrong case
// is a 400, as the document says, not a 200 that ignores the case.
func TestQueueConfigFieldNamesAreCaseSensitive(t *testing.T) {
	h := newHarness(t)
	r := h.do("PUT", "/v1/admin/queues/"+h.queue+"-case", `{"tiCkMs": 100, "stAte": "open"}`, map[string]string{"Authorization": "Bearer secret-admin"})
	if r.status != 400 || !isProblem(r) || !strings.Contains(string(r.raw), "tiCkMs") {
		t.Fatalf("PUT with tiCkMs = %d %s, want a 400 problem naming the field", r.status, r.raw)
	}
	if _, ok := h.gw.queues.Get(h.queue + "-case"); ok {
		t.Fatal("the refused configuration is in the catalog")
	}
}

// A key twice in one object of a body is a 400 naming it, and nothing
// changes: encoding/json would apply the last value, where a validating
// proxy in front, a reviewer or the integrator's template meant the first.
// (An order's body: orderapi's TestADuplicatedKeyInAnOrderBodyIsRefused.)
func TestADuplicatedKeyInABodyIsRefused(t *testing.T) {
	h := newHarness(t)
	admin := map[string]string{"Authorization": "Bearer secret-admin"}
	q := h.queue + "-dup"
	tests := []struct {
		path, body, name string
	}{
		{"/v1/admin/queues/" + q, `{"targetActive": 10, "targetActive": 100000}`, "targetActive"},
		{"/v1/admin/queues/" + q, `{"targetActive": 10, "rateLimit": {"perIpBurst": 5, "perIpBurst": 500000}}`, "rateLimit.perIpBurst"},
		{"/v1/admin/queues/" + q, `{"challenge": {"mode": "enforce", "difficulty": 8, "mode": "off"}}`, "challenge.mode"},
		{"/v1/admin/queues/" + q, `{"adaptive": {"enabled": true, "min": 1, "max": 50}, "adaptive": {"enabled": false}}`, "adaptive"},
		{"/v1/admin/queues/" + h.queue + "/notice", `{"message": "back at 10", "message": "<script>"}`, "message"},
	}
	for _, tt := range tests {
		r := h.do("PUT", tt.path, tt.body, admin)
		if r.status != 400 || !isProblem(r) || !strings.Contains(r.str("detail"), `"`+tt.name+`" appears twice`) {
			t.Errorf("PUT %s %s = %d %s, want a 400 problem naming %q", tt.path, tt.body, r.status, r.raw, tt.name)
		}
	}
	if _, ok := h.gw.queues.Get(q); ok {
		t.Error("a refused configuration is in the catalog")
	}
}
