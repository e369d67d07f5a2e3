package opshttp_test

import (
	"runtime"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"usher/internal/opshttp"
)

// Every service's registry carries the live heap beside the usual go_*
// series: the figure a leak moves.
func TestTheGoCollectorExportsTheLiveHeap(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(opshttp.GoCollector())
	runtime.GC()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			got[f.GetName()] = m.GetGauge().GetValue()
		}
	}
	if got["go_gc_heap_live_bytes"] <= 0 {
		t.Errorf("go_gc_heap_live_bytes = %v, want the live heap", got["go_gc_heap_live_bytes"])
	}
	if _, ok := got["go_goroutines"]; !ok {
		t.Error("go_goroutines missing")
	}
}
