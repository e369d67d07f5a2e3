package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// phase is a stretch of the arrival schedule; the rate moves linearly from
// from to to over the phase.
type phase struct {
	name     string
	dur      time.Duration
	from, to float64
}

func steady(rate int, d time.Duration) []phase {
	return []phase{{"steady", d, float64(rate), float64(rate)}}
}

// spike is the seeds' Black Friday: calm traffic, a steep ramp, then the
// peak held for the rest of the run.
func spike(rate int, d time.Duration) []phase {
	calm, ramp := 3*time.Second, 2*time.Second
	hold := max(d-calm-ramp, time.Second)
	return []phase{
		{"calm 100/s", calm, 100, 100},
		{"ramp", ramp, 100, float64(rate)},
		{fmt.Sprintf("hold %d/s", rate), hold, float64(rate), float64(rate)},
	}
}

// overload offers the rate the stack answers (rate), then three times it,
// then the rate again: a stack that sheds keeps the accepted joins'
// latency through the middle step and is back to full speed in the last.
func overload(rate int, d time.Duration) []phase {
	r := float64(rate)
	return []phase{
		{fmt.Sprintf("at %d/s", rate), d, r, r},
		{fmt.Sprintf("3x: %d/s", 3*rate), d, 3 * r, 3 * r},
		{fmt.Sprintf("back at %d/s", rate), d, r, r},
	}
}

// openLoop fires requests on the schedule through senders, long-lived
// goroutines sending one request at a time each: the arrivals wait in a queue
// for a free sender, and fire gets the intended start time, so latency
// counts from it and the wait is latency too. Senders, not a goroutine a
// request: under overload the tool's own CPU (a new stack grown for every
// request) was its backlog, counted as the stack's latency.
func openLoop(ctx context.Context, phases []phase, senders int, progress io.Writer, fire func(n int64, intended time.Time, rec *recorder)) []step {
	var n atomic.Int64
	var steps []step
	for _, ph := range phases {
		rec := newRecorder()
		arrivals := make(chan time.Time, 1<<16)
		var wg sync.WaitGroup
		for range senders {
			wg.Go(func() {
				for intended := range arrivals {
					fire(n.Add(1), intended, rec)
				}
			})
		}
		start := time.Now()
		sent := 0
		tick := time.NewTicker(time.Millisecond)
		lastReport := start
		slope := (ph.to - ph.from) / ph.dur.Seconds()
		for now := start; ctx.Err() == nil; now = <-tick.C {
			// Arrivals due so far: the integral of a linear rate. The last
			// reading is at the phase's end, however late the ticker was,
			// so every arrival of the phase is sent.
			el := min(now.Sub(start), ph.dur).Seconds()
			for due := int(ph.from*el + slope*el*el/2 + 1e-9); sent < due; sent++ {
				arrivals <- start.Add(time.Duration(float64(time.Second) * arrivalTime(sent, ph.from, slope)))
			}
			if now.Sub(start) >= ph.dur {
				break
			}
			if now.Sub(lastReport) >= time.Second {
				lastReport = now
				fmt.Fprintf(progress, "\r%-14s %5.1fs  sent %8d  waiting for a sender %5d ", ph.name, el, sent, len(arrivals))
			}
		}
		tick.Stop()
		close(arrivals)
		wg.Wait()
		steps = append(steps, rec.summary(ph.name, time.Since(start)))
		fmt.Fprintln(progress)
	}
	return steps
}

// arrivalTime inverts the arrival integral: when the i-th request is due.
func arrivalTime(i int, from, slope float64) float64 {
	if slope == 0 {
		return float64(i) / from
	}
	// slope/2 t² + from t − i = 0
	disc := from*from + 2*slope*float64(i)
	return (-from + sqrt(disc)) / slope
}

func sqrt(x float64) float64 {
	if x <= 0 {
		return 0
	}
	z := x
	for range 30 {
		z -= (z*z - x) / (2 * z)
	}
	return z
}

// joins runs a join scenario against a paused queue (nobody is admitted, so
// every accepted shopper must still be in line at the end) and checks that
// no accepted shopper was lost.
func joins(ctx context.Context, c *client, o options, phases []phase, progress io.Writer) (result, error) {
	res := result{Scenario: o.scenario, Started: time.Now(), Figures: map[string]float64{}, Invariants: map[string]int64{}}
	if err := c.admin("PUT", "/v1/admin/queues/"+o.queue, o.queueConfig(map[string]any{"targetActive": 1, "state": "paused"}), nil); err != nil {
		return res, err
	}
	cpu0, _ := c.processCPU()
	samples := startSampler(ctx, c, o.queue, 500*time.Millisecond)
	var accepted atomic.Int64
	prefix := fmt.Sprintf("lt%d-", time.Now().UnixNano()%1e9)
	// A new user per join across the steps (openLoop counts each step's
	// requests from 1).
	var users atomic.Int64
	fire := func(_ int64, intended time.Time, rec *recorder) {
		code, err := c.do("POST", "/v1/queues/"+o.queue+"/tickets", map[string]string{"X-User-Id": prefix + strconv.FormatInt(users.Add(1), 10)}, nil, nil)
		rec.add(time.Since(intended), code, err)
		if code == 202 {
			accepted.Add(1)
		}
	}
	// Step by step, with the gateway's own account of each: from its
	// read of a join to its answer, which the load tool's own queueing
	// (on the same cores, under overload) does not count.
	for _, ph := range phases {
		before, _ := scrape(c.base + "/metrics")
		res.Steps = append(res.Steps, openLoop(ctx, []phase{ph}, o.conns, progress, fire)...)
		after, err := scrape(c.base + "/metrics")
		if err != nil || before == nil {
			continue
		}
		for _, code := range []string{"202", "503"} {
			h := histogram(before, after, "usher_http_request_duration_seconds", `route="/v1/queues/:queue/tickets"`, `method="POST"`, `code="`+code+`"`)
			if h.count > 0 {
				res.Figures[fmt.Sprintf("%s: the gateway's own p99 of its %s answers, ms (bucket bound)", ph.name, code)] = h.quantile(0.99) * 1000
			}
		}
	}
	cpu1, _ := c.processCPU()
	res.Samples = samples.Stop()
	total := 0
	for _, s := range res.Steps {
		total += s.Requests
	}
	if total > 0 && cpu1 > cpu0 {
		res.Figures["gateway CPU µs per join"] = (cpu1 - cpu0) * 1e6 / float64(total)
	}
	// Every accepted shopper must end up in line: wait for the admitter to
	// catch up, then compare.
	var st queueStats
	deadline := time.Now().Add(60 * time.Second)
	for {
		if err := c.admin("GET", "/v1/admin/queues/"+o.queue, nil, &st); err != nil {
			return res, err
		}
		if st.Waiting >= accepted.Load() || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	res.Figures["accepted joins"] = float64(accepted.Load())
	res.Invariants["lost shoppers"] = accepted.Load() - st.Waiting
	return res, nil
}

// processCPU reads the gateway's own CPU seconds from its /metrics.
func (c *client) processCPU() (float64, error) {
	code, body, err := c.raw("GET", "/metrics")
	if err != nil || code != 200 {
		return 0, fmt.Errorf("metrics: %d %v", code, err)
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "process_cpu_seconds_total "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("metrics: no process_cpu_seconds_total")
}
