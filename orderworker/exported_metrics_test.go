package main

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"usher/internal/bus"
	"usher/internal/event"
	"usher/internal/testenv"
)

// lagStub answers the lag collector as a consumer with nothing pending.
type lagStub struct{}

func (lagStub) Info(context.Context) (*jetstream.ConsumerInfo, error) {
	return &jetstream.ConsumerInfo{}, nil
}

// deploy/grafana/metrics/orderworker.txt, which the Grafana dashboard's
// test checks every query against, names only metric families the order
// worker's registry, built as run builds it (with the consumer's lag
// collector), exports (a vector without samples too), each of its kind.
func TestExportedMetricsAreListed(t *testing.T) {
	m := newMetrics()
	m.reg.MustRegister(bus.NewLagCollector(event.StreamOrders, consumerName, lagStub{}, time.Second))
	fams := testenv.ExportedFamilies(t, m.reg, m)
	testenv.CheckMetricList(t, "../deploy/grafana/metrics/orderworker.txt", "orderworker", fams)
}
