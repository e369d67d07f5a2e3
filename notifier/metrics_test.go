package main

import (
	"testing"
	"time"

	"usher/internal/testenv"
)

// After a shopper's READY went out, the notifier's /metrics has the
// names docs/operations.md lists (SSE connections, events, READY delivery
// latency) and no label carries the shopper, the ticket or the token. The notifier consumes no
// JetStream stream (admissions arrive by core NATS), so it has no consumer
// lag to report.
func TestMetricsAfterReady(t *testing.T) {
	w := newWorld(t)
	n := w.start()
	tk := w.join(1, "metrics-alice")
	s := open(t, n.url(w.queue, tk), "")
	s.until("position", 5*time.Second)
	ads := w.admit(1, 100*time.Millisecond)
	s.until("ready", 10*time.Second)

	m := testenv.Scrape(t, "http://"+n.addr+"/metrics")
	m.Check(t, []string{"usher_sse_connections", "usher_sse_events_sent_total", "usher_ready_delivery_seconds"},
		"metrics-alice", tk, ads[0].TokenID)
}
