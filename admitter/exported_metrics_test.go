package main

import (
	"testing"

	"usher/internal/testenv"
)

// deploy/grafana/metrics/admitter.txt, which the Grafana dashboard's test
// checks every query against, names only metric families the admitter's
// registry, built as run builds it, exports (a vector without samples
// too), each of its kind.
func TestExportedMetricsAreListed(t *testing.T) {
	m := newMetrics()
	am := newAdaptiveMetrics(m.reg) // run registers the adaptive limits' metrics on it too
	fams := testenv.ExportedFamilies(t, m.reg, m, am)
	testenv.CheckMetricList(t, "../deploy/grafana/metrics/admitter.txt", "admitter", fams)
}
