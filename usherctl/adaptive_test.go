package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"usher/internal/event"
	"usher/internal/testenv"
)

// An adaptive queue's limit moves within its bounds without every move
// recorded: the audit holds it to its adaptive max, not to targetActive.
func TestAuditBoundsAnAdaptiveQueueByItsMax(t *testing.T) {
	w := newWorld(t)
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	ms := func(n int) time.Time { return base.Add(time.Duration(n) * time.Millisecond) }
	for _, tt := range []struct {
		name     string
		admitted int
		wantCode int
		want     string
	}{
		{"three slots under a max of 3 (targetActive 1)", 3, exitOK, "ok       slots held <= targetActive"},
		{"a fourth slot", 4, exitFailure, "4 slots held, targetActive 3"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			q := testenv.Name(t)
			cfg := map[string]any{"name": q, "targetActive": 1, "adaptive": map[string]any{"enabled": true, "min": 1, "max": 3}}
			w.publish(event.ConfigChangedSubject, fmt.Sprintf("config/%s/%d", q, time.Now().UnixNano()), event.TypeConfigChanged, time.Now(),
				map[string]any{"queue": q, "by": "tester", "config": cfg})
			for i := range tt.admitted {
				seq := w.join(q, fmt.Sprintf("u%d", i))
				w.admit(q, seq, fmt.Sprintf("u%d", i), ms(i*10), ms(5000))
			}
			r := w.usherctl("audit", "--queue", q)
			if r.code != tt.wantCode || !strings.Contains(r.stdout, tt.want) {
				t.Errorf("audit exit %d, printed\n%s\nwant exit %d and %q", r.code, r.stdout, tt.wantCode, tt.want)
			}
		})
	}
}

// replay --stream ops shows every ops event of the queue: its
// configuration changes and its adaptive limit's moves.
func TestReplayOfOpsShowsLimitMoves(t *testing.T) {
	w := newWorld(t)
	q := testenv.Name(t)
	w.configured(q, 20, 0)
	id, _, err := event.NewLimitChanged(event.LimitChanged{Queue: q, Limit: 10, Previous: 20, Reason: "latency", Window: 42}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	w.publish(event.LimitChangedSubject, id, event.TypeLimitChanged, time.Now(),
		event.LimitChanged{Queue: q, Limit: 10, Previous: 20, Reason: "latency", Window: 42})
	w.publish(event.LimitChangedSubject, "limit/other/42", event.TypeLimitChanged, time.Now(),
		event.LimitChanged{Queue: q + "-other", Limit: 10, Previous: 20, Reason: "latency", Window: 42})
	r := w.usherctl("replay", "--stream", "ops", "--queue", q)
	if r.code != exitOK || strings.Count(r.stdout, "\n") != 2 || !strings.Contains(r.stdout, event.TypeConfigChanged) ||
		!strings.Contains(r.stdout, event.TypeLimitChanged) || strings.Contains(r.stdout, q+"-other") {
		t.Fatalf("replay printed (exit %d)\n%s\nwant the config change and the limit move of %s only", r.code, r.stdout, q)
	}
}
