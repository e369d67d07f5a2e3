package main

import (
	"fmt"
	"testing"
	"time"

	"usher/internal/testenv"
	"usher/internal/waitqueue"
)

// After shoppers are admitted, the admitter's /metrics has the names
// docs/operations.md lists (waiting, active, admitted, admission rate,
// tick duration, breaker state, what the followers applied and have still
// to apply) labelled by queue (and stream) only, never by shopper.
func TestMetricsAfterAdmissions(t *testing.T) {
	w := newWorld(t, cfg(5, 20, 300))
	addr := freeAddr(t)
	w.startAt(addr)

	users := []string{"metrics-alice", "metrics-bob"}
	var seqs []uint64
	for _, u := range users {
		seqs = append(seqs, w.join(u))
	}
	for _, seq := range seqs {
		testenv.Eventually(t, 10*time.Second, func() bool { return w.status(seq) == waitqueue.Admitted }, "seq %d admitted", seq)
	}
	var s testenv.Series
	testenv.Eventually(t, 10*time.Second, func() bool {
		s = testenv.Scrape(t, "http://"+addr+"/metrics")
		_, ok := s["usher_projection_pending_events"]
		return ok
	}, "usher_projection_pending_events never appeared")
	forbidden := append([]string{fmt.Sprintf("%s:", w.queue) + fmt.Sprint(seqs[0])}, users...)
	s.Check(t, []string{
		"usher_waiting", "usher_active", "usher_target_active", "usher_admitted_total",
		"usher_admission_rate_per_second", "usher_admission_tick_duration_seconds",
		"usher_payment_breaker_shared_open", "usher_admissions_announced_total",
		"usher_projection_applied_total", "usher_projection_pending_events",
	}, forbidden...)
	for _, ls := range s["usher_projection_applied_total"] {
		if ls["queue"] != w.queue || (ls["stream"] != "entries" && ls["stream"] != "admissions") {
			t.Errorf("projection metric labelled %v, want the queue and a stream", ls)
		}
	}
}
