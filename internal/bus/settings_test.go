package bus_test

import (
	"strings"
	"testing"

	"usher/internal/bus"
	"usher/internal/config"
)

// USHER_STREAM_REPLICAS is 1 to 5, what JetStream keeps: anything else
// stops the start naming the variable, instead of a start that retries
// declaring streams the server refuses.
func TestStreamReplicasOutOfRangeAreRefusedAtStartUp(t *testing.T) {
	tests := []struct {
		value   string
		want    int    // the replicas read, when accepted
		wantErr string // in the error, when refused
	}{
		{"", 1, ""},
		{"1", 1, ""},
		{"3", 3, ""},
		{"5", 5, ""},
		{"0", 0, `USHER_STREAM_REPLICAS="0"`},
		{"6", 0, "USHER_STREAM_REPLICAS=6: JetStream keeps at most 5 replicas"},
		{"9", 0, "USHER_STREAM_REPLICAS=9: JetStream keeps at most 5 replicas"},
		{"three", 0, `USHER_STREAM_REPLICAS="three"`},
	}
	for _, tt := range tests {
		env := config.New(func(k string) string {
			if k == "USHER_STREAM_REPLICAS" {
				return tt.value
			}
			return ""
		})
		s := bus.LoadSettings(env)
		err := env.Err()
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("USHER_STREAM_REPLICAS=%q: error %v, want one saying %q", tt.value, err, tt.wantErr)
			}
			continue
		}
		if err != nil || s.Replicas != tt.want {
			t.Errorf("USHER_STREAM_REPLICAS=%q: Replicas = %d, error %v; want %d, nil", tt.value, s.Replicas, err, tt.want)
		}
	}
}
