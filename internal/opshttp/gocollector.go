package opshttp

import (
	"regexp"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// GoCollector is the Go runtime's collector as every service registers
// it: the usual go_* series, and the live heap (go_gc_heap_live_bytes:
// what the last collection marked live). The heap in use
// (go_memstats_heap_inuse_bytes) also holds what became garbage since and
// is not swept yet, so it rises and falls with the collector's cycle; a
// leak shows in the live heap.
func GoCollector() prometheus.Collector {
	return collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
		collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/heap/live:bytes$`)}))
}
