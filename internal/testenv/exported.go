package testenv

import (
	"bufio"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Family is a metric family a registry exports, and its kind: counter,
// gauge, histogram, summary, or unknown.
type Family struct{ Name, Kind string }

// fqName finds a descriptor's name in its String(), the one place the
// client library shows it.
var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// ExportedFamilies lists every family reg exports, by its collectors'
// descriptors: a vector that has no sample yet too (a scrape shows only
// the families with samples, so it cannot tell what a service exports).
// A family's kind comes from a gather where it has samples, else from the
// collector in owners (the service's metrics structs, walked field by
// field, unexported fields too) that describes it.
func ExportedFamilies(t testing.TB, reg *prometheus.Registry, owners ...any) []Family {
	t.Helper()
	kinds := map[string]string{}
	for _, o := range owners {
		v := reflect.ValueOf(o)
		if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
			t.Fatalf("ExportedFamilies: owner %T is not a pointer to a struct", o)
		}
		collectorKinds(v.Elem(), kinds)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		kinds[mf.GetName()] = strings.ToLower(mf.GetType().String())
	}
	var out []Family
	for _, name := range describedNames(reg) {
		k := kinds[name]
		if k == "" {
			k = "unknown"
		}
		out = append(out, Family{name, k})
	}
	return out
}

func describedNames(c prometheus.Collector) []string {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	seen := map[string]bool{}
	var names []string
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil && !seen[m[1]] {
			seen[m[1]] = true
			names = append(names, m[1])
		}
	}
	sort.Strings(names)
	return names
}

// collectorKinds records the kind of every collector among s's fields
// (and the fields of the structs they point to).
func collectorKinds(s reflect.Value, kinds map[string]string) {
	for i := range s.NumField() {
		f := s.Field(i)
		f = reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem() // unexported too
		if (f.Kind() == reflect.Pointer || f.Kind() == reflect.Interface) && f.IsNil() {
			continue
		}
		if c, ok := f.Interface().(prometheus.Collector); ok {
			if k := kindOf(c); k != "" {
				for _, name := range describedNames(c) {
					kinds[name] = k
				}
			}
			continue
		}
		switch {
		case f.Kind() == reflect.Struct:
			collectorKinds(f, kinds)
		case f.Kind() == reflect.Pointer && f.Elem().Kind() == reflect.Struct:
			collectorKinds(f.Elem(), kinds)
		}
	}
}

func kindOf(c prometheus.Collector) string {
	switch c := c.(type) {
	case *prometheus.HistogramVec:
		return "histogram"
	case *prometheus.SummaryVec:
		return "summary"
	case *prometheus.GaugeVec:
		return "gauge"
	case *prometheus.CounterVec:
		return "counter"
	case prometheus.Metric:
		var m dto.Metric
		if c.Write(&m) != nil {
			return ""
		}
		switch {
		case m.Histogram != nil:
			return "histogram"
		case m.Summary != nil:
			return "summary"
		case m.Gauge != nil:
			return "gauge"
		case m.Counter != nil:
			return "counter"
		}
	}
	return ""
}

// CheckMetricList checks the list at path (one "name kind" a line, # for
// comments) against what a service exports: every family listed must be
// exported, of that kind. The list may lag behind a new metric (nothing
// reads it but the dashboard's test), never name one that is gone. With
// USHER_UPDATE_METRICS=1 it is rewritten from fams.
func CheckMetricList(t testing.TB, path, service string, fams []Family) {
	t.Helper()
	if os.Getenv("USHER_UPDATE_METRICS") == "1" {
		var b strings.Builder
		fmt.Fprintf(&b, "# The metric families %s exports, and their kinds (go test ./%s -run TestExportedMetricsAreListed\n", service, service)
		fmt.Fprintf(&b, "# checks it; with USHER_UPDATE_METRICS=1 it rewrites it). deploy's dashboard test reads it.\n")
		for _, f := range fams {
			fmt.Fprintf(&b, "%s %s\n", f.Name, f.Kind)
		}
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	listed, err := ReadMetricList(path)
	if err != nil {
		t.Fatalf("%v (USHER_UPDATE_METRICS=1 writes it)", err)
	}
	have := map[string]string{}
	for _, f := range fams {
		have[f.Name] = f.Kind
	}
	for _, f := range listed {
		switch k, ok := have[f.Name]; {
		case !ok:
			t.Errorf("%s lists %s, which %s no longer exports: run this test with USHER_UPDATE_METRICS=1 (and fix the dashboard)", path, f.Name, service)
		case k != f.Kind:
			t.Errorf("%s lists %s as a %s; %s exports a %s: run this test with USHER_UPDATE_METRICS=1", path, f.Name, f.Kind, service, k)
		}
	}
}

// ReadMetricList reads a list CheckMetricList keeps.
func ReadMetricList(path string) ([]Family, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Family
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, kind, ok := strings.Cut(line, " ")
		if !ok {
			return nil, fmt.Errorf("%s: bad line %q", path, line)
		}
		out = append(out, Family{name, kind})
	}
	return out, sc.Err()
}
