package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// metricsSnapshot is one scrape of a Prometheus text endpoint: series key
// (name with its labels, as written) → value.
type metricsSnapshot map[string]float64

// scrape reads a /metrics endpoint over loopback.
func scrape(url string) (metricsSnapshot, error) {
	if url == "" {
		return nil, fmt.Errorf("no metrics URL")
	}
	hc := http.Client{Timeout: 5 * time.Second}
	res, err := hc.Get(url)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	return parseMetrics(res.Body)
}

func parseMetrics(r io.Reader) (metricsSnapshot, error) {
	out := metricsSnapshot{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// histogramDelta is what a histogram observed between two scrapes.
type histogramDelta struct {
	count, sum float64
	buckets    []bucket // cumulative, by upper bound
}

type bucket struct{ le, count float64 }

// histogram extracts the named histogram (summed over its label sets)
// between before and after.
func histogram(before, after metricsSnapshot, name string, labels ...string) histogramDelta {
	var h histogramDelta
	byLE := map[float64]float64{}
next:
	for k, v := range after {
		for _, l := range labels {
			if !strings.Contains(k, l) {
				continue next
			}
		}
		d := v - before[k]
		switch {
		case strings.HasPrefix(k, name+"_count"):
			h.count += d
		case strings.HasPrefix(k, name+"_sum"):
			h.sum += d
		case strings.HasPrefix(k, name+"_bucket"):
			j := strings.Index(k, `le="`)
			if j < 0 {
				continue
			}
			leStr := k[j+4:]
			leStr = leStr[:strings.IndexByte(leStr, '"')]
			le, err := strconv.ParseFloat(leStr, 64)
			if leStr == "+Inf" {
				le, err = math.Inf(1), nil
			}
			if err == nil {
				byLE[le] += d
			}
		}
	}
	for le, c := range byLE {
		h.buckets = append(h.buckets, bucket{le, c})
	}
	sort.Slice(h.buckets, func(i, j int) bool { return h.buckets[i].le < h.buckets[j].le })
	return h
}

func (h histogramDelta) mean() float64 {
	if h.count == 0 {
		return 0
	}
	return h.sum / h.count
}

// quantile is the upper bound of the bucket holding the q-th observation:
// an upper estimate, as precise as the buckets.
func (h histogramDelta) quantile(q float64) float64 {
	want := q * h.count
	for _, b := range h.buckets {
		if b.count >= want && b.count > 0 {
			return b.le
		}
	}
	return math.NaN()
}

// value sums every series of a metric in a snapshot.
func (m metricsSnapshot) value(name string) float64 {
	total := 0.0
	for k, v := range m {
		if k == name || strings.HasPrefix(k, name+"{") {
			total += v
		}
	}
	return total
}
