package main

import (
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestArrivalScheduleMatchesTheRate(t *testing.T) {
	tests := []struct {
		name         string
		from, to     float64
		dur          float64
		wantRequests float64
	}{
		{"steady 1000/s for 2 s", 1000, 1000, 2, 2000},
		{"ramp 100→10,000/s over 2 s", 100, 10000, 2, (100 + 10000) / 2 * 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			slope := (tt.to - tt.from) / tt.dur
			// The last request due within the phase arrives at its end.
			last := arrivalTime(int(tt.wantRequests)-1, tt.from, slope)
			if math.Abs(last-tt.dur) > 0.01 {
				t.Fatalf("request %v arrives at %.3fs, want ~%.3fs", tt.wantRequests-1, last, tt.dur)
			}
			if arrivalTime(0, tt.from, slope) != 0 {
				t.Fatal("the first request is not due at once")
			}
		})
	}
}

// The load is open loop: every scheduled arrival is sent, however few the
// senders, and an arrival that waited for a free sender counts the wait.
func TestOpenLoopSendsTheScheduleAndCountsTheWait(t *testing.T) {
	const senders, each = 2, 5 * time.Millisecond
	var fired atomic.Int64
	steps := openLoop(t.Context(), steady(1000, 200*time.Millisecond), senders, io.Discard,
		func(_ int64, intended time.Time, rec *recorder) {
			fired.Add(1)
			time.Sleep(each)
			rec.add(time.Since(intended), 202, nil)
		})
	if n := fired.Load(); len(steps) != 1 || n != 200 || steps[0].Requests != 200 {
		t.Fatalf("fired %d, steps %+v; want the 200 arrivals of 200 ms at 1000/s", n, steps)
	}
	// Two senders take at least 500 ms for 200 requests of 5 ms: the last
	// arrival, due at 200 ms, waited 300 ms and more.
	if got := time.Duration(steps[0].Max * float64(time.Millisecond)); got < 300*time.Millisecond {
		t.Errorf("the longest latency is %v, want the wait for a sender (300 ms and more) in it", got)
	}
}

func TestRecorderSummary(t *testing.T) {
	r := newRecorder()
	for i := 1; i <= 100; i++ {
		r.add(time.Duration(i)*time.Millisecond, 202, nil)
	}
	r.add(0, 0, io.EOF)
	s := r.summary("x", time.Second)
	if s.Requests != 101 || s.Codes["202"] != 100 || s.Codes["error"] != 1 || s.P50 != 50 || s.Max != 100 {
		t.Fatalf("summary = %+v", s)
	}
	sum := 0
	for _, n := range s.Histogram {
		sum += n
	}
	if sum != 101 {
		t.Fatalf("histogram holds %d requests, want 101", sum)
	}
}

func TestTheLoadToolOnlyTargetsLoopback(t *testing.T) {
	for _, u := range []string{"http://10.0.0.1:8080", "http://example.com", "https://127.0.0.1"} {
		if _, err := newClient(u, "", 1); err == nil {
			t.Errorf("newClient(%q) accepted a non-loopback target", u)
		}
	}
	if _, err := newClient("http://127.0.0.1:8080", "", 1); err != nil {
		t.Error(err)
	}
}

func TestReportIsWritten(t *testing.T) {
	res := result{Scenario: "steady", Started: time.Now(),
		Steps:   []step{{Name: "steady", Requests: 10, Histogram: []int{5, 5}, Codes: map[string]int{"202": 10}}},
		Samples: []sample{{At: 0, Waiting: 10, Active: 2, TargetActive: 5}, {At: 1, Waiting: 5, Active: 5, TargetActive: 5, Admitted: 7}},
		DBHold:  []holdBucket{{1, 10}, {5, 2}}}
	path := filepath.Join(t.TempDir(), "r.html")
	if err := writeReport(path, res); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	for _, want := range []string{"<svg", "Active against targetActive", "Admissions per second", "202×10", "DB connection hold time"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

func TestReadEventsFollowsTheFraming(t *testing.T) {
	stream := "retry: 2000\n\nid: 1\nevent: position\ndata: {\"position\":2}\n\n: heartbeat\n\nid: 2\nevent: ready\ndata: {\"token\":\"t\"}\n\nid: 3\nevent: closed\ndata: {}\n\n"
	var got []string
	err := readEvents(strings.NewReader(stream), func(event, data string) bool {
		got = append(got, event+" "+data)
		return event != "ready"
	})
	if err != nil || strings.Join(got, "|") != `position {"position":2}|ready {"token":"t"}` {
		t.Fatalf("readEvents = %q, %v; want position then ready, stopping there", got, err)
	}
}
