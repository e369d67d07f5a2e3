package main

import (
	"testing"

	"usher/internal/testenv"
)

// deploy/grafana/metrics/gateway.txt, which the Grafana dashboard's test
// checks every query against, names only metric families the gateway's
// registry, built as run builds it, exports (a vector without samples
// too), each of its kind.
func TestExportedMetricsAreListed(t *testing.T) {
	m := newMetrics()
	fams := testenv.ExportedFamilies(t, m.reg, m)
	testenv.CheckMetricList(t, "../deploy/grafana/metrics/gateway.txt", "gateway", fams)
}
