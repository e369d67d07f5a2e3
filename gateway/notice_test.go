package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"usher/internal/event"

	"github.com/nats-io/nats.go/jetstream"
)

func TestANoticeIsShownToTheLineAndAudited(t *testing.T) {
	h := newHarness(t)
	tkt := h.join("alice").str("ticket")
	path := "/v1/admin/queues/" + h.queue + "/notice"

	r := h.do("PUT", path, `{"message": "Restock at 10:30: stay in line.", "level": "warning"}`, adminAuth)
	if r.status != 200 || r.str("message") != "Restock at 10:30: stay in line." || r.str("level") != "warning" || r.str("since") == "" {
		t.Fatalf("PUT notice = %d %s", r.status, r.raw)
	}
	p := h.poll(tkt)
	n, _ := p.body["notice"].(map[string]any)
	if n == nil || n["message"] != "Restock at 10:30: stay in line." || n["level"] != "warning" {
		t.Fatalf("poll = %s; want the notice", p.raw)
	}
	// A PUT of the queue that says nothing of the notice keeps it.
	h.putQueue(h.queue, `{"targetActive": 6, "rateLimit": `+limitsOff+`}`, 200)
	if p := h.poll(tkt); p.body["notice"] == nil {
		t.Fatalf("poll after a PUT of the queue = %s; want the notice kept", p.raw)
	}
	// Nor does one that says something else: the notice endpoint alone sets
	// it, and dates it (a body's since would be the client's word).
	h.putQueue(h.queue, `{"targetActive": 6, "rateLimit": `+limitsOff+`, "notice": {"message": "forged", "level": "info", "since": "1999-01-01T00:00:00Z"}}`, 200)
	if n, _ := h.poll(tkt).body["notice"].(map[string]any); n == nil || n["message"] != "Restock at 10:30: stay in line." {
		t.Fatalf("notice after a PUT of the queue with another = %v; want the one PUT …/notice set", n)
	}
	if r := h.do("DELETE", path, "", adminAuth); r.status != 204 {
		t.Fatalf("DELETE notice = %d %s", r.status, r.raw)
	}
	if p := h.poll(tkt); p.body["notice"] != nil {
		t.Fatalf("poll after DELETE = %s; want no notice", p.raw)
	}
	if r := h.do("DELETE", path, "", adminAuth); r.status != 204 {
		t.Fatalf("DELETE of no notice = %d, want 204", r.status)
	}

	for _, body := range []string{
		``, `{}`, `{"message": ""}`, `{"message": "   "}`, `{"message": "x", "level": "loud"}`,
		`{"message": "` + strings.Repeat("a", 501) + `"}`, `{"message": "bell\u0007"}`, `{"message": "x", "extra": 1}`, `{"message": "x"} {}`,
	} {
		if r := h.do("PUT", path, body, adminAuth); r.status != 400 || !isProblem(r) {
			t.Errorf("PUT notice %q = %d %s; want 400 problem", body, r.status, r.raw)
		}
	}
	if r := h.do("PUT", path, `{"message": "x"}`, nil); r.status != 401 {
		t.Errorf("PUT notice without the token = %d, want 401", r.status)
	}
	if r := h.do("PUT", "/v1/admin/queues/nope-"+h.queue+"/notice", `{"message": "x"}`, adminAuth); r.status != 404 {
		t.Errorf("PUT notice of an unknown queue = %d, want 404", r.status)
	}
	// Every change is on the ops stream, who made it included.
	changes := h.configChanges()
	var withNotice, without int
	for _, c := range changes {
		if strings.Contains(c, "Restock at 10:30") {
			withNotice++
		} else {
			without++
		}
	}
	if withNotice < 2 || without < 1 {
		t.Fatalf("config changes: %d with the notice, %d without; want the put, the queue PUT keeping it, and the delete", withNotice, without)
	}
}

// configChanges reads the harness queue's config_changed events from
// USHER_OPS: the configuration each one recorded, as JSON.
func (h *harness) configChanges() []string {
	h.t.Helper()
	var out []string
	for _, c := range h.configEvents() {
		out = append(out, string(c.Config))
	}
	return out
}

// configChange is a config_changed event as a test reads it.
type configChange struct {
	Queue    string          `json:"queue"`
	By       string          `json:"by"`
	Config   json.RawMessage `json:"config"`
	Previous json.RawMessage `json:"previous"`
}

// configEvents reads the harness queue's config_changed events from
// USHER_OPS.
func (h *harness) configEvents() []configChange {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := h.js.OrderedConsumer(ctx, event.StreamOps, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{event.ConfigChangedSubject}})
	if err != nil {
		h.t.Fatal(err)
	}
	var out []configChange
	for {
		batch, err := cons.FetchNoWait(100)
		if err != nil {
			h.t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			var c configChange
			if _, err := event.Unmarshal(m.Data(), event.TypeConfigChanged, &c); err == nil && c.Queue == h.queue {
				out = append(out, c)
			}
		}
		if n == 0 {
			return out
		}
	}
}
