package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"usher/gateway/admin"
	"usher/internal/catalog"
	"usher/internal/testenv"
)

// DELETE /v1/admin/queues/{q} takes a queue out for good, and only one
// that has ended: closed, seen closed by an admitter (so nobody more is
// admitted), and with no admitted shopper left who may still order. Until
// then it is a 409 that says what is missing, and nothing changes. After
// it the queue is unknown everywhere, its deletion is on the ops stream,
// and its name — under which the streams keep its events — is not used
// again.
func TestOnlyAnEndedQueueIsDeletedAndItsNameIsRetired(t *testing.T) {
	h := newHarness(t)
	adminAuth := map[string]string{"Authorization": "Bearer secret-admin", "X-Admin-User": "ops-ann"}
	del := func() response {
		t.Helper()
		return h.do("DELETE", "/v1/admin/queues/"+h.queue, "", adminAuth)
	}
	refused := func(r response, slug string) {
		t.Helper()
		if r.status != 409 || !isProblem(r) || !strings.HasSuffix(r.str("type"), "/"+slug) {
			t.Fatalf("DELETE = %d %s, want 409 %s", r.status, r.raw, slug)
		}
		if _, ok := h.gw.queues.Get(h.queue); !ok {
			t.Fatalf("a refused DELETE (%s) took the queue out", slug)
		}
	}

	alice := h.join("alice")
	if res := h.admit(); res.Admitted != 1 {
		t.Fatalf("the tick admitted %+v, want alice", res)
	}
	refused(del(), "queue-open")

	h.putQueue(h.queue, `{"targetActive": 5, "state": "closed", "rateLimit": `+limitsOff+`}`, 200)
	r := del()
	refused(r, "queue-closing") // no admitter has recorded the closing yet
	if r.header.Get("Retry-After") == "" {
		t.Errorf("queue-closing without Retry-After: %v", r.header)
	}
	if _, err := h.line.ClosedSince(context.Background(), h.queue, true); err != nil { // as the admitter records it
		t.Fatal(err)
	}
	time.Sleep(admin.CloseSettle + 100*time.Millisecond)
	r = del()
	refused(r, "queue-in-use") // alice may still order
	if !strings.Contains(r.str("detail"), "1 admitted shopper") {
		t.Errorf("queue-in-use detail = %q, want the shoppers counted", r.str("detail"))
	}

	if left := h.do("DELETE", "/v1/queues/"+h.queue+"/tickets/"+alice.str("ticket"), "", nil); left.status != 204 {
		t.Fatalf("alice leaves = %d %s", left.status, left.raw)
	}
	if r := del(); r.status != 204 {
		t.Fatalf("DELETE of an ended queue = %d %s, want 204", r.status, r.raw)
	}

	if r := h.do("GET", "/v1/admin/queues/"+h.queue, "", adminAuth); r.status != 404 {
		t.Errorf("GET after the deletion = %d %s, want 404", r.status, r.raw)
	}
	if r := h.poll(alice.str("ticket")); r.status != 404 || !strings.HasSuffix(r.str("type"), "/unknown-queue") {
		t.Errorf("a poll after the deletion = %d %s, want 404 unknown-queue", r.status, r.raw)
	}
	if r := del(); r.status != 404 {
		t.Errorf("DELETE again = %d %s, want 404", r.status, r.raw)
	}
	r = h.do("PUT", "/v1/admin/queues/"+h.queue, `{"targetActive": 5}`, adminAuth)
	if r.status != 409 || !strings.HasSuffix(r.str("type"), "/queue-retired") {
		t.Errorf("PUT of the deleted queue's name = %d %s, want 409 queue-retired", r.status, r.raw)
	}
	if _, ok := h.gw.queues.Get(h.queue); ok {
		t.Error("the refused PUT made the queue again")
	}

	events := h.configEvents()
	last := events[len(events)-1]
	var prev struct {
		State string `json:"state"`
	}
	if string(last.Config) != "null" || last.By != "ops-ann" || json.Unmarshal(last.Previous, &prev) != nil || prev.State != "closed" {
		t.Errorf("the last config change = by %q, config %s, previous %s; want by ops-ann, config null, previous the closed queue",
			last.By, last.Config, last.Previous)
	}
}

// A deleted queue's series leave the gateway's /metrics: each queue ever
// deleted would otherwise stay in memory and in every scrape for as long
// as the gateway runs.
func TestADeletedQueuesSeriesLeaveTheGateway(t *testing.T) {
	h := newHarness(t)
	alice := h.join("alice")
	if res := h.admit(); res.Admitted != 1 {
		t.Fatalf("the tick admitted %+v, want alice", res)
	}
	if left := h.do("DELETE", "/v1/queues/"+h.queue+"/tickets/"+alice.str("ticket"), "", nil); left.status != 204 {
		t.Fatalf("alice leaves = %d %s", left.status, left.raw) // an outcome, counted by queue
	}
	base := h.serve()
	series := func() int { return testenv.QueueSeries(base+"/metrics", h.queue) }
	if series() == 0 {
		t.Fatal("no series of the queue before its deletion: the test shows nothing")
	}
	if _, err := h.gw.queues.Delete(context.Background(), h.queue, time.Now(), func(catalog.Config) error { return nil }); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return series() == 0 }, "series of the deleted queue left on /metrics")
}
