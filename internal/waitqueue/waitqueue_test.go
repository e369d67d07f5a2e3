package waitqueue_test

import (
	"os"
	"testing"

	"usher/internal/testenv"
	"usher/internal/waitqueue"
)

const epoch = testenv.Epoch

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Stop()
	os.Exit(code)
}

func TestETAUsesTheMeasuredRate(t *testing.T) {
	tests := []struct {
		position  int64
		rate      float64
		want      int64
		wantKnown bool
	}{
		{1, 140, 1, true},
		{1400, 140, 10, true},
		{1401, 140, 11, true},
		{10, 0, 0, false}, // nothing admitted yet: no promise
		{0, 0, 0, true},
	}
	for _, tt := range tests {
		got, known := waitqueue.ETA(tt.position, tt.rate)
		if got != tt.want || known != tt.wantKnown {
			t.Errorf("ETA(%d, %v) = %d, %v; want %d, %v", tt.position, tt.rate, got, known, tt.want, tt.wantKnown)
		}
	}
}
