package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"
)

// recorder collects latencies and status codes of one step. Safe for
// concurrent use.
type recorder struct {
	mu     sync.Mutex
	lat    []time.Duration
	codes  map[string]int
	byCode map[string][]time.Duration
}

func newRecorder() *recorder {
	return &recorder{codes: map[string]int{}, byCode: map[string][]time.Duration{}}
}

func (r *recorder) add(d time.Duration, code int, err error) {
	key := strconv.Itoa(code)
	if err != nil {
		key = "error"
	}
	r.mu.Lock()
	r.lat = append(r.lat, d)
	r.codes[key]++
	r.byCode[key] = append(r.byCode[key], d)
	r.mu.Unlock()
}

// step is the summary of one phase of a scenario.
type step struct {
	Name       string         `json:"name"`
	Seconds    float64        `json:"seconds"`
	Requests   int            `json:"requests"`
	Throughput float64        `json:"throughputPerSec"`
	P50        float64        `json:"p50Ms"`
	P95        float64        `json:"p95Ms"`
	P99        float64        `json:"p99Ms"`
	Max        float64        `json:"maxMs"`
	Codes      map[string]int `json:"codes"`
	// CodeP99 is the p99 latency of each status's requests alone: under
	// overload the accepted joins' and the shed ones' apart.
	CodeP99 map[string]float64 `json:"codeP99Ms"`
	// Histogram counts requests by latency bucket: bucket i holds those
	// under 2^i ms (bucket 0: under 1 ms).
	Histogram []int `json:"histogram"`
}

func (r *recorder) summary(name string, elapsed time.Duration) step {
	r.mu.Lock()
	defer r.mu.Unlock()
	lat := slices.Clone(r.lat)
	slices.Sort(lat)
	q := func(p float64) float64 { return quantileMs(lat, p) }
	codes := map[string]int{}
	codeP99 := map[string]float64{}
	for k, v := range r.codes {
		codes[k] = v
		l := slices.Clone(r.byCode[k])
		slices.Sort(l)
		codeP99[k] = quantileMs(l, 0.99)
	}
	var hist []int
	for _, d := range lat {
		i := 0
		for ms := d.Milliseconds(); ms >= 1<<i && i < 20; i++ {
		}
		for len(hist) <= i {
			hist = append(hist, 0)
		}
		hist[i]++
	}
	return step{Name: name, Seconds: elapsed.Seconds(), Requests: len(lat), Histogram: hist,
		Throughput: float64(len(lat)) / elapsed.Seconds(),
		P50:        q(0.50), P95: q(0.95), P99: q(0.99), Max: q(1), Codes: codes, CodeP99: codeP99}
}

// quantileMs is the p quantile of sorted latencies, in milliseconds.
func quantileMs(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return float64(sorted[int(p*float64(len(sorted)-1))].Microseconds()) / 1000
}

// result is a whole run.
type result struct {
	Scenario   string             `json:"scenario"`
	Started    time.Time          `json:"started"`
	Steps      []step             `json:"steps"`
	Figures    map[string]float64 `json:"figures"`
	Invariants map[string]int64   `json:"invariants"` // each expected to be 0
	Samples    []sample           `json:"samples,omitempty"`
	// DBHold is the order worker's connection hold-time histogram over the
	// run: observations per bucket (not cumulative), by upper bound in ms.
	DBHold []holdBucket `json:"dbHoldHistogram,omitempty"`
	// Timeline is the run second by second: orders finished, their
	// latency, the limit in effect (journey).
	Timeline []timePoint `json:"timeline,omitempty"`
	// Notes are one-line summaries printed after the figures (drop).
	Notes []string `json:"notes,omitempty"`
	// Drop is what a drop run's figures rest on (drop).
	Drop *dropDetail `json:"drop,omitempty"`
}

// holdBucket is one bucket of the DB connection hold-time histogram.
type holdBucket struct {
	LeMs  float64 `json:"leMs"`
	Count float64 `json:"count"`
}

func (res result) print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "step\tseconds\trequests\tper sec\tp50 ms\tp95 ms\tp99 ms\tmax ms\tcodes\t\n")
	for _, s := range res.Steps {
		fmt.Fprintf(tw, "%s\t%.1f\t%d\t%.0f\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t\n",
			s.Name, s.Seconds, s.Requests, s.Throughput, s.P50, s.P95, s.P99, s.Max, codeString(s.Codes))
	}
	tw.Flush()
	for _, s := range res.Steps {
		if len(s.CodeP99) > 1 {
			fmt.Fprintf(w, "%s: p99 by status:", s.Name)
			for _, k := range sortedKeys(s.CodeP99) {
				fmt.Fprintf(w, " %s %.2f ms", k, s.CodeP99[k])
			}
			fmt.Fprintln(w)
		}
	}
	for _, k := range sortedKeys(res.Figures) {
		fmt.Fprintf(w, "%s: %.2f\n", k, res.Figures[k])
	}
	for _, k := range sortedKeys(res.Invariants) {
		verdict := "ok"
		if res.Invariants[k] != 0 {
			verdict = "VIOLATED"
		}
		fmt.Fprintf(w, "invariant %s: %d (%s)\n", k, res.Invariants[k], verdict)
	}
	for _, n := range res.Notes {
		fmt.Fprintln(w, n)
	}
}

func (res result) save(path string) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

func codeString(m map[string]int) string {
	out := ""
	for _, k := range sortedKeys(m) {
		out += fmt.Sprintf("%s×%d ", k, m[k])
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
