package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"usher/shared/event"
	"usher/shared/testenv"
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
