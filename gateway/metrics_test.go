package main

import (
	"testing"

	"usher/internal/testenv"
)

// After a join, polls and an admin call, the gateway's /metrics has the
// names docs/operations.md lists (join and poll latency by route
// template) and no label carries a user id or a ticket: paths are
// recorded as their templates.
func TestMetricsAfterJoinsAndPolls(t *testing.T) {
	h := newHarness(t)
	user := "metrics-shopper-7"
	j := h.join(user)
	tkt := j.str("ticket")
	if j.status != 202 || tkt == "" {
		t.Fatalf("join = %d %s", j.status, j.raw)
	}
	h.poll(tkt)
	h.poll("not-a-ticket-" + user)
	h.do("GET", "/v1/admin/queues", "", map[string]string{"Authorization": "Bearer secret-admin"})
	base := h.serve()

	s := testenv.Scrape(t, base+"/metrics")
	s.Check(t, []string{"usher_http_request_duration_seconds", "usher_joins_total", "usher_polls_total"}, user, tkt, "not-a-ticket")
	routes := map[string]bool{}
	for _, ls := range s["usher_http_request_duration_seconds"] {
		routes[ls["route"]] = true
	}
	for _, want := range []string{"/v1/queues/:queue/tickets", "/v1/queues/:queue/tickets/:ticket", "/v1/admin/queues"} {
		if !routes[want] {
			t.Errorf("usher_http_request_duration_seconds has routes %v, want %s among them", routes, want)
		}
	}
}
