package testenv

import (
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Values are metric families with their values, as a scrape or a gather
// found them, for tests that check what was counted (Series keeps labels
// only).
type Values map[string]*dto.MetricFamily

// ScrapeValues reads a /metrics endpoint with its values.
func ScrapeValues(t testing.TB, url string) Values {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: status %d", url, res.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(res.Body)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	return Values(mfs)
}

// GatherValues reads a registry with its values.
func GatherValues(t testing.TB, g prometheus.Gatherer) Values {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := Values{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// Value adds up the samples of a counter or gauge whose labels include
// match (nil: all of them); for a histogram, it adds up their counts.
func (v Values) Value(name string, match map[string]string) float64 {
	var sum float64
	for _, m := range v.matching(name, match) {
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		case m.Untyped != nil:
			sum += m.Untyped.GetValue()
		}
	}
	return sum
}

// HistogramSum adds up the sums of a histogram's samples whose labels
// include match.
func (v Values) HistogramSum(name string, match map[string]string) float64 {
	var sum float64
	for _, m := range v.matching(name, match) {
		sum += m.GetHistogram().GetSampleSum()
	}
	return sum
}

// Bucket adds up the cumulative counts of a histogram's bucket with upper
// bound le, over the samples whose labels include match.
func (v Values) Bucket(name string, match map[string]string, le float64) float64 {
	var sum float64
	for _, m := range v.matching(name, match) {
		for _, b := range m.GetHistogram().GetBucket() {
			if b.GetUpperBound() == le {
				sum += float64(b.GetCumulativeCount())
			}
		}
	}
	return sum
}

// Labels lists the label sets of a family's samples.
func (v Values) Labels(name string) []map[string]string {
	mf := v[name]
	if mf == nil {
		return nil
	}
	return labelSets(mf)
}

func (v Values) matching(name string, match map[string]string) []*dto.Metric {
	mf := v[name]
	if mf == nil {
		return nil
	}
	var out []*dto.Metric
next:
	for _, m := range mf.GetMetric() {
		have := map[string]string{}
		for _, lp := range m.GetLabel() {
			have[lp.GetName()] = lp.GetValue()
		}
		for k, want := range match {
			if have[k] != want {
				continue next
			}
		}
		out = append(out, m)
	}
	return out
}
