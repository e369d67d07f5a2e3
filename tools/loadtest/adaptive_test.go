package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestScheduleAndBoundsParse(t *testing.T) {
	s, err := parseSchedule("50s=normal, 20s=slow:1000")
	if err != nil || len(s) != 2 || s[0] != (modeChange{20 * time.Second, "slow", 1000}) || s[1] != (modeChange{50 * time.Second, "normal", 0}) {
		t.Fatalf("parseSchedule = %+v, %v; want slow 1000 ms at 20 s, then normal at 50 s", s, err)
	}
	for _, bad := range []string{"20s", "x=slow", "20s=fast", "20s=slow:-1"} {
		if _, err := parseSchedule(bad); err == nil {
			t.Errorf("parseSchedule(%q) accepted it", bad)
		}
	}
	if lo, hi, err := adaptiveBounds("5:160"); err != nil || lo != 5 || hi != 160 {
		t.Errorf("adaptiveBounds(5:160) = %d, %d, %v", lo, hi, err)
	}
	for _, bad := range []string{"5", "0:10", "10:5", "a:b"} {
		if _, _, err := adaptiveBounds(bad); err == nil {
			t.Errorf("adaptiveBounds(%q) accepted it", bad)
		}
	}
}

// Active above a limit that was just cut is no over-admission; active
// rising above the limit in effect is.
func TestOverAdmissionAgainstTheLimitInEffect(t *testing.T) {
	tests := []struct {
		name    string
		samples []sample
		want    int64
	}{
		{"fixed, within", []sample{{Active: 4, TargetActive: 5}, {Active: 5, TargetActive: 5}}, 0},
		{"fixed, over", []sample{{Active: 5, TargetActive: 5}, {Active: 7, TargetActive: 5}}, 2},
		{"adaptive cut, draining", []sample{{Active: 40, TargetActive: 20, Limit: 40}, {Active: 38, TargetActive: 20, Limit: 20},
			{Active: 30, TargetActive: 20, Limit: 20}}, 0},
		{"adaptive, rising past the limit", []sample{{Active: 18, TargetActive: 20, Limit: 20}, {Active: 23, TargetActive: 20, Limit: 20}}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := overAdmission(tt.samples); got != tt.want {
				t.Errorf("overAdmission = %d, want %d", got, tt.want)
			}
		})
	}
}

// The timeline bins finished orders by second with the limit sampled in
// that second, and the report charts it.
func TestTimelineAndItsCharts(t *testing.T) {
	start := time.Now().Add(-1500 * time.Millisecond)
	tl := newTimeline(start)
	tl.bins[0] = []time.Duration{100 * time.Millisecond, 300 * time.Millisecond}
	tl.bins[1] = []time.Duration{200 * time.Millisecond}
	tl.fails[1] = 1
	pts := tl.points([]sample{{At: 0.5, Active: 3, TargetActive: 5, Limit: 8, Reason: "raise"}, {At: 1.5, Active: 6, TargetActive: 5, Limit: 4, Reason: "latency"}})
	if len(pts) != 2 || pts[0].Orders != 2 || pts[0].MeanMs != 200 || pts[0].Limit != 8 || pts[1].Limit != 4 || pts[1].Reason != "latency" || pts[1].Failures != 1 {
		t.Fatalf("points = %+v", pts)
	}
	path := filepath.Join(t.TempDir(), "r.html")
	if err := writeReport(path, result{Scenario: "journey", Started: start, Timeline: pts}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	for _, want := range []string{"Admission limit (targetActive in effect)", "Order latency over time", "Orders finished per second"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("report lacks %q", want)
		}
	}
}
