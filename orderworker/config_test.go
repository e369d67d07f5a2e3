package main

import (
	"strings"
	"testing"
	"time"

	"usher/internal/config"
)

// USHER_ORDER_ACK_WAIT below a second stops the start naming it: a
// worker signals progress every third of it, and USHER_ORDER_ACK_WAIT=2ns
// started a worker that panicked at its first order ("non-positive
// interval for NewTicker") after setting the shared consumer's ack wait
// to 2ns for every worker.
func TestAnAckWaitTooShortToWorkIsRefusedAtStart(t *testing.T) {
	for _, tt := range []struct {
		value string
		want  time.Duration // 0: refused
	}{
		{"", 30 * time.Second}, {"1s", time.Second}, {"90s", 90 * time.Second},
		{"2ns", 0}, {"999ms", 0}, {"1us", 0},
	} {
		env := config.New(func(k string) string {
			if k == "USHER_ORDER_ACK_WAIT" {
				return tt.value
			}
			return ""
		})
		s, err := loadSettings(env)
		if tt.want == 0 {
			if err == nil || !strings.Contains(err.Error(), "USHER_ORDER_ACK_WAIT=") || !strings.Contains(err.Error(), ": want at least 1s") {
				t.Errorf("USHER_ORDER_ACK_WAIT=%s: %v, want a configuration error naming it", tt.value, err)
			}
			continue
		}
		if err != nil || s.ackWait != tt.want {
			t.Errorf("USHER_ORDER_ACK_WAIT=%q: ackWait %v, error %v; want %v, nil", tt.value, s.ackWait, err, tt.want)
		}
	}
}
