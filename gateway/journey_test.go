package main

import (
	"testing"

	"usher/internal/analytics"
	"usher/internal/testenv"
)

// An admitted shopper who leaves is counted once as the outcome "left"
// (the leave that freed the slot); leaving again, or leaving while still
// waiting, counts nothing. The labels are the queue and the outcome.
func TestAnAdmittedShopperWhoLeavesIsCountedOnce(t *testing.T) {
	h := newHarness(t)
	h.putQueue(h.queue, `{"targetActive": 1}`, 200)
	alice := h.join("journey-alice").str("ticket")
	bob := h.join("journey-bob").str("ticket")
	h.admit()
	if r := h.poll(alice); r.str("status") != "READY" {
		t.Fatalf("alice = %s, want READY", r.raw)
	}
	for _, tk := range []string{alice, alice, bob} { // alice twice; bob still waits
		if r := h.do("DELETE", "/v1/queues/"+h.queue+"/tickets/"+tk, "", nil); r.status != 204 {
			t.Fatalf("DELETE = %d %s", r.status, r.raw)
		}
	}
	v := testenv.GatherValues(t, h.gw.metrics.reg)
	if n := v.Value(analytics.Outcomes, map[string]string{"queue": h.queue, "outcome": analytics.Left}); n != 1 {
		t.Errorf("%s{outcome=left} = %v, want 1", analytics.Outcomes, n)
	}
	for _, ls := range v.Labels(analytics.Outcomes) {
		if len(ls) != 2 || ls["queue"] != h.queue || ls["outcome"] != analytics.Left {
			t.Errorf("%s labelled %v, want the queue and the outcome", analytics.Outcomes, ls)
		}
	}
}
