package main

import (
	"bytes"
	"context"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The adaptive admission's runs: a queue whose targetActive
// the admitter finds itself (-adaptive min:max), a payment gateway whose
// latency changes during the run (-pgsim-schedule), and a timeline of the
// admission limit, order latency and throughput for the report.

// adaptiveBounds parses -adaptive "min:max" ("" = off).
func adaptiveBounds(s string) (lo, hi int, err error) {
	if s == "" {
		return 0, 0, nil
	}
	a, b, ok := strings.Cut(s, ":")
	lo, err1 := strconv.Atoi(a)
	hi, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || lo < 1 || hi < lo {
		return 0, 0, fmt.Errorf("-adaptive %q: want min:max, 1 <= min <= max", s)
	}
	return lo, hi, nil
}

// withAdaptive adds the run's adaptive setting to a queue configuration.
func (o options) withAdaptive(cfg map[string]any) map[string]any {
	if lo, hi, _ := adaptiveBounds(o.adaptive); hi > 0 {
		cfg["adaptive"] = map[string]any{"enabled": true, "min": lo, "max": hi}
	}
	return cfg
}

// modeChange is one step of -pgsim-schedule: at At into the run, pgsim's
// mode becomes Mode (slow with SlowMs).
type modeChange struct {
	At     time.Duration
	Mode   string
	SlowMs int
}

// parseSchedule reads "20s=slow:1000,50s=normal".
func parseSchedule(s string) ([]modeChange, error) {
	if s == "" {
		return nil, nil
	}
	var out []modeChange
	for _, part := range strings.Split(s, ",") {
		at, mode, ok := strings.Cut(strings.TrimSpace(part), "=")
		d, err := time.ParseDuration(at)
		if !ok || err != nil || d < 0 {
			return nil, fmt.Errorf("-pgsim-schedule %q: want offset=mode[:slowMs],…", part)
		}
		c := modeChange{At: d, Mode: mode}
		if m, ms, ok := strings.Cut(mode, ":"); ok {
			n, err := strconv.Atoi(ms)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("-pgsim-schedule %q: bad slow ms", part)
			}
			c.Mode, c.SlowMs = m, n
		}
		switch c.Mode {
		case "normal", "slow", "outage", "capture-hang":
		default:
			return nil, fmt.Errorf("-pgsim-schedule %q: unknown mode %q", part, c.Mode)
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].At < out[j].At })
	return out, nil
}

// describe names the schedule for the report.
func describe(s []modeChange) string {
	var parts []string
	for _, c := range s {
		m := c.Mode
		if c.Mode == "slow" {
			m = fmt.Sprintf("slow (every payment %d ms)", c.SlowMs)
		}
		parts = append(parts, fmt.Sprintf("%s at %v", m, c.At))
	}
	return "pgsim " + strings.Join(parts, ", ")
}

// setMode puts pgsim in a mode through its admin API (loopback only).
func setMode(base, token string, c modeChange) error {
	u, err := url.Parse(base)
	if err != nil || (u.Hostname() != "localhost" && !strings.HasPrefix(u.Hostname(), "127.")) {
		return fmt.Errorf("pgsim %q: want a loopback URL", base)
	}
	body := fmt.Sprintf(`{"mode": %q, "slowMs": %d}`, c.Mode, c.SlowMs)
	req, err := http.NewRequest(http.MethodPut, strings.TrimSuffix(base, "/")+"/v1/admin/mode", bytes.NewReader([]byte(body)))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return fmt.Errorf("pgsim mode %s: %w", c.Mode, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		return fmt.Errorf("pgsim mode %s: %d %s", c.Mode, res.StatusCode, b)
	}
	return nil
}

// runSchedule applies the schedule from start until ctx ends, and puts
// pgsim back to normal when it changed anything.
func runSchedule(ctx context.Context, o options, s []modeChange, start time.Time, progress io.Writer) (stop func()) {
	if len(s) == 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, c := range s {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Until(start.Add(c.At))):
			}
			if err := setMode(o.pgsim, o.pgsimToken, c); err != nil {
				fmt.Fprintln(progress, "\nloadtest:", err)
			} else {
				fmt.Fprintf(progress, "\npgsim: %s %d ms at %v\n", c.Mode, c.SlowMs, time.Since(start).Round(time.Second))
			}
		}
	}()
	return func() {
		cancel()
		<-done
		if err := setMode(o.pgsim, o.pgsimToken, modeChange{Mode: "normal"}); err != nil {
			fmt.Fprintln(progress, "loadtest: pgsim back to normal:", err)
		}
	}
}

// timePoint is one second of a run: orders that finished in it, their
// order latency (submit → final), and the queue's limit as sampled.
type timePoint struct {
	At       float64 `json:"t"` // seconds since the run started, end of the second
	Orders   int     `json:"orders"`
	MeanMs   float64 `json:"meanMs"`
	P99Ms    float64 `json:"p99Ms"`
	Limit    int64   `json:"limit"`
	Active   int64   `json:"active"`
	Reason   string  `json:"reason,omitempty"`
	Failures int     `json:"failed"`
}

// timeline bins finished orders by the second they finished in. Safe for
// concurrent use.
type timeline struct {
	start time.Time
	mu    sync.Mutex
	bins  map[int][]time.Duration
	fails map[int]int
}

func newTimeline(start time.Time) *timeline {
	return &timeline{start: start, bins: map[int][]time.Duration{}, fails: map[int]int{}}
}

func (tl *timeline) add(t journeyTimes) {
	if tl == nil {
		return
	}
	i := int(time.Since(tl.start) / time.Second)
	tl.mu.Lock()
	tl.bins[i] = append(tl.bins[i], t.orderTime)
	if t.status == "FAILED" {
		tl.fails[i]++
	}
	tl.mu.Unlock()
}

// points is the timeline, each second with the last sample taken in it.
func (tl *timeline) points(samples []sample) []timePoint {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	last := 0
	for i := range tl.bins {
		last = max(last, i)
	}
	out := make([]timePoint, 0, last+1)
	for i := 0; i <= last; i++ {
		p := timePoint{At: float64(i + 1), Orders: len(tl.bins[i]), Failures: tl.fails[i]}
		if lat := slices.Clone(tl.bins[i]); len(lat) > 0 {
			slices.Sort(lat)
			var sum time.Duration
			for _, d := range lat {
				sum += d
			}
			p.MeanMs = float64(sum.Microseconds()) / 1000 / float64(len(lat))
			p.P99Ms = float64(lat[int(0.99*float64(len(lat)-1))].Microseconds()) / 1000
		}
		for _, s := range samples {
			if s.At <= float64(i+1) {
				p.Limit, p.Active, p.Reason = s.limit(), s.Active, s.Reason
			}
		}
		out = append(out, p)
	}
	return out
}

// limit is the targetActive in effect when the sample was taken.
func (s sample) limit() int64 {
	if s.Limit > 0 {
		return s.Limit
	}
	return s.TargetActive
}

// overAdmission is the sampled over-admission: how far active rose above
// the limit in effect. A cut of an adaptive limit leaves active above the
// new limit until orders finish (nobody is admitted meanwhile), so a
// sample counts only when active is above both this sample's and the
// previous sample's limit and rose since the previous sample.
func overAdmission(samples []sample) int64 {
	over := int64(0)
	for i, s := range samples {
		limit := s.limit()
		if i > 0 {
			prev := samples[i-1]
			limit = max(limit, prev.limit())
			if s.Active <= prev.Active {
				continue
			}
		}
		over = max(over, s.Active-limit)
	}
	return over
}

// timelineCharts are the report's charts of a timeline: the limit with
// active slots, order latency, and orders per second, over the same time.
func timelineCharts(tl []timePoint) []template.HTML {
	var limit, active, mean, p99, rate []point
	for _, p := range tl {
		limit = append(limit, point{p.At, float64(p.Limit)})
		active = append(active, point{p.At, float64(p.Active)})
		if p.Orders > 0 {
			mean = append(mean, point{p.At, p.MeanMs})
			p99 = append(p99, point{p.At, p.P99Ms})
		}
		rate = append(rate, point{p.At, float64(p.Orders)})
	}
	return []template.HTML{
		chart("Admission limit (targetActive in effect) and active slots over time", "slots",
			[]series{{"limit", "#2ca02c", limit}, {"active", "#d62728", active}}),
		chart("Order latency over time (submit → final), per second", "ms",
			[]series{{"mean", "#1f77b4", mean}, {"p99", "#ff7f0e", p99}}),
		chart("Orders finished per second", "/s", []series{{"orders/s", "#9467bd", rate}}),
	}
}
