package testenv

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Series is what a Prometheus scrape exposed: each metric family's name
// and the label sets of its series.
type Series map[string][]map[string]string

// Scrape reads a service's /metrics page at url.
func Scrape(t testing.TB, url string) Series {
	t.Helper()
	out := Series{}
	for name, mf := range ScrapeValues(t, url) {
		out[name] = labelSets(mf)
	}
	return out
}

// QueueSeries counts the series labelled queue q on the /metrics page at
// url, of the metrics named (none: of every one): -1 while the page cannot
// be read (a service starting).
func QueueSeries(url, q string, names ...string) int {
	res, err := http.Get(url)
	if err != nil {
		return -1
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		return -1
	}
	if len(names) == 0 {
		return strings.Count(string(b), `queue="`+q+`"`)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		name, labels, ok := strings.Cut(line, "{")
		if ok && slices.Contains(names, name) && strings.Contains(labels, `queue="`+q+`"`) {
			n++
		}
	}
	return n
}

// Gather reads a registry as a scrape would.
func Gather(t testing.TB, g prometheus.Gatherer) Series {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := Series{}
	for _, mf := range mfs {
		out[mf.GetName()] = labelSets(mf)
	}
	return out
}

func labelSets(mf *dto.MetricFamily) []map[string]string {
	var sets []map[string]string
	for _, m := range mf.GetMetric() {
		ls := map[string]string{}
		for _, lp := range m.GetLabel() {
			ls[lp.GetName()] = lp.GetValue()
		}
		sets = append(sets, ls)
	}
	return sets
}

// Check fails t for every name in want that s lacks, and for every label
// value that contains one of forbidden (the user ids, tickets and token
// ids a test used): labels are route templates and bounded names, never
// a shopper's identifiers, or every shopper becomes a series.
func (s Series) Check(t testing.TB, want []string, forbidden ...string) {
	t.Helper()
	for _, name := range want {
		if _, ok := s[name]; !ok {
			t.Errorf("metric %s is missing", name)
		}
	}
	names := make([]string, 0, len(s))
	for name := range s {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		for _, ls := range s[name] {
			for k, v := range ls {
				for _, f := range forbidden {
					if f != "" && strings.Contains(v, f) {
						t.Errorf("%s{%s=%q} carries %q: labels must not name shoppers", name, k, v, f)
					}
				}
			}
		}
	}
}
