package main

import (
	"context"
	"fmt"
	"html/template"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// sample is the queue as the admin API saw it at one moment.
type sample struct {
	At           float64 `json:"t"` // seconds since the run started
	Waiting      int64   `json:"waiting"`
	Active       int64   `json:"active"`
	TargetActive int64   `json:"targetActive"`
	Admitted     int64   `json:"admittedTotal"`
	// Limit and Reason are an adaptive queue's limit in effect and why.
	Limit  int64  `json:"limit,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// sampler polls the queue's figures every interval until stopped, so the
// report can show waiting and active over time against targetActive.
type sampler struct {
	mu      sync.Mutex
	samples []sample
	stop    context.CancelFunc
	done    chan struct{}
}

func startSampler(ctx context.Context, c *client, queue string, every time.Duration) *sampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &sampler{stop: cancel, done: make(chan struct{})}
	start := time.Now()
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			var st queueStats
			if err := c.admin("GET", "/v1/admin/queues/"+queue, nil, &st); err == nil {
				s.mu.Lock()
				smp := sample{At: time.Since(start).Seconds(), Waiting: st.Waiting, Active: st.Active, TargetActive: st.TargetActive, Admitted: st.AdmittedTotal}
				if a := st.AdaptiveLimit; a != nil {
					smp.Limit, smp.Reason = a.Limit, a.Reason
				}
				s.samples = append(s.samples, smp)
				s.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// Stop ends sampling and returns the samples.
func (s *sampler) Stop() []sample {
	s.stop()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples
}

// series is one line of a chart.
type series struct {
	Name   string
	Color  string
	Points []point
}

type point struct{ X, Y float64 }

// chart renders series as an inline SVG line chart: no scripts, no
// dependencies, readable offline.
func chart(title, yUnit string, ss []series) template.HTML {
	const w, h, pad = 640.0, 220.0, 40.0
	maxX, maxY := 1e-9, 1e-9
	for _, s := range ss {
		for _, p := range s.Points {
			maxX, maxY = max(maxX, p.X), max(maxY, p.Y)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<figure><figcaption>%s</figcaption><svg viewBox="0 0 %.0f %.0f" role="img" aria-label="%s">`, template.HTMLEscapeString(title), w, h, template.HTMLEscapeString(title))
	fmt.Fprintf(&b, `<line x1="%v" y1="%v" x2="%v" y2="%v" stroke="#999"/><line x1="%v" y1="%v" x2="%v" y2="%v" stroke="#999"/>`, pad, h-pad, w-10, h-pad, pad, 10, pad, h-pad)
	fmt.Fprintf(&b, `<text x="%v" y="20" font-size="11">%.0f %s</text><text x="%v" y="%v" font-size="11">%.0f s</text>`, pad+4, maxY, template.HTMLEscapeString(yUnit), w-60, h-pad+16, maxX)
	for i, s := range ss {
		var pts []string
		for _, p := range s.Points {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", pad+p.X/maxX*(w-pad-10), h-pad-p.Y/maxY*(h-pad-10)))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`, s.Color, strings.Join(pts, " "))
		fmt.Fprintf(&b, `<text x="%v" y="%v" font-size="11" fill="%s">%s</text>`, pad+10+float64(i)*150, h-8, s.Color, template.HTMLEscapeString(s.Name))
	}
	b.WriteString(`</svg></figure>`)
	return template.HTML(b.String())
}

var reportTmpl = template.Must(template.New("report").Parse(`<!doctype html>
<html lang="en"><meta charset="utf-8"><title>usher loadtest: {{.Res.Scenario}}</title>
<style>body{font:14px system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.25rem .5rem;text-align:right;font-variant-numeric:tabular-nums}
figure{margin:1rem 0}figcaption{font-weight:600}svg{width:100%;height:auto;background:#fafafa}</style>
<h1>usher loadtest: {{.Res.Scenario}}</h1>
<p>Started {{.Res.Started.Format "2006-01-02 15:04:05 MST"}}.</p>
<table><tr><th>step</th><th>seconds</th><th>requests</th><th>per sec</th><th>p50 ms</th><th>p95 ms</th><th>p99 ms</th><th>max ms</th><th>codes</th></tr>
{{range .Res.Steps}}<tr><td>{{.Name}}</td><td>{{printf "%.1f" .Seconds}}</td><td>{{.Requests}}</td><td>{{printf "%.0f" .Throughput}}</td><td>{{printf "%.2f" .P50}}</td><td>{{printf "%.2f" .P95}}</td><td>{{printf "%.2f" .P99}}</td><td>{{printf "%.2f" .Max}}</td><td>{{range $k, $v := .Codes}}{{$k}}×{{$v}} {{end}}</td></tr>
{{end}}</table>
<h2>Figures</h2><ul>{{range $k, $v := .Res.Figures}}<li>{{$k}}: {{printf "%.2f" $v}}</li>{{end}}</ul>
<h2>Invariants (each expected 0)</h2><ul>{{range $k, $v := .Res.Invariants}}<li>{{$k}}: {{$v}}</li>{{end}}</ul>
{{range .Charts}}{{.}}{{end}}
</html>`))

// writeReport writes the HTML report with the queue's time series and a
// latency histogram per step.
func writeReport(path string, res result) error {
	var charts []template.HTML
	if len(res.Samples) > 0 {
		var waiting, active, target, rate []point
		for i, s := range res.Samples {
			waiting = append(waiting, point{s.At, float64(s.Waiting)})
			active = append(active, point{s.At, float64(s.Active)})
			target = append(target, point{s.At, float64(s.limit())})
			if i > 0 {
				prev := res.Samples[i-1]
				if dt := s.At - prev.At; dt > 0 {
					rate = append(rate, point{s.At, float64(s.Admitted-prev.Admitted) / dt})
				}
			}
		}
		charts = append(charts,
			chart("Waiting", "shoppers", []series{{"waiting", "#1f77b4", waiting}}),
			chart("Active against targetActive", "slots", []series{{"active", "#d62728", active}, {"targetActive", "#2ca02c", target}}),
			chart("Admissions per second", "/s", []series{{"admitted/s", "#9467bd", rate}}))
	}
	if len(res.Timeline) > 0 {
		charts = append(charts, timelineCharts(res.Timeline)...)
	}
	if len(res.DBHold) > 0 {
		var pts []point
		for i, b := range res.DBHold {
			pts = append(pts, point{float64(i), b.Count})
		}
		var bounds []string
		for _, b := range res.DBHold {
			bounds = append(bounds, strconv.FormatFloat(b.LeMs, 'g', 4, 64))
		}
		charts = append(charts, chart("DB connection hold time (x: buckets ≤ "+strings.Join(bounds, ", ")+" ms)", "holds", []series{{"holds", "#8c564b", pts}}))
	}
	for _, st := range res.Steps {
		var pts []point
		for i, n := range st.Histogram {
			pts = append(pts, point{float64(i), float64(n)})
		}
		charts = append(charts, chart("Latency histogram: "+st.Name+" (x: bucket, 2^i ms)", "requests", []series{{"requests", "#ff7f0e", pts}}))
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return reportTmpl.Execute(f, struct {
		Res    result
		Charts []template.HTML
	}{res, charts})
}
