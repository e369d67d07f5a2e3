package lineapi

import (
	"testing"
	"time"
)

func TestPollAfterIsShortNearTheHeadAndCapped(t *testing.T) {
	tests := []struct {
		name     string
		position int64
		eta      int64
		known    bool
		min, max time.Duration
	}{
		{"head of the line", 1, 0, true, 400 * time.Millisecond, 600 * time.Millisecond},
		{"eight seconds away", 1000, 8, true, 1600 * time.Millisecond, 2400 * time.Millisecond},
		{"an hour away", 100000, 3600, true, 4 * time.Second, 6 * time.Second},
		{"rate unknown, far back", 100000, 0, false, 4 * time.Second, 6 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lo := pollAfter(tt.position, tt.eta, tt.known, 0)
			hi := pollAfter(tt.position, tt.eta, tt.known, 0.999999)
			if lo < tt.min || hi > tt.max || hi <= lo {
				t.Fatalf("pollAfter range = [%v, %v], want within [%v, %v] with jitter", lo, hi, tt.min, tt.max)
			}
			if hi > 6*time.Second {
				t.Fatalf("pollAfter = %v exceeds the 5 s cap plus jitter", hi)
			}
		})
	}
}
