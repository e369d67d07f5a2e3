package bus

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// consumerInfo is the part of a JetStream consumer the lag collector reads.
type consumerInfo interface {
	Info(ctx context.Context) (*jetstream.ConsumerInfo, error)
}

// LagCollector exports a durable consumer's backlog as it stands at each
// scrape: usher_consumer_pending_messages (stored, not yet delivered to any
// member) and usher_consumer_ack_pending_messages (delivered, not yet
// acknowledged). Reading on scrape costs one request to the server per
// scrape and is never stale; a scrape that cannot reach the server leaves
// the two series out rather than reporting a wrong zero.
type LagCollector struct {
	cons    consumerInfo
	timeout time.Duration
	pending *prometheus.Desc
	acks    *prometheus.Desc
}

// NewLagCollector returns the collector of consumer (of stream), asking
// the server for at most timeout per scrape.
func NewLagCollector(stream, consumer string, cons consumerInfo, timeout time.Duration) *LagCollector {
	labels := prometheus.Labels{"stream": stream, "consumer": consumer}
	return &LagCollector{
		cons:    cons,
		timeout: timeout,
		pending: prometheus.NewDesc("usher_consumer_pending_messages",
			"Messages of the stream not yet delivered to this durable consumer.", nil, labels),
		acks: prometheus.NewDesc("usher_consumer_ack_pending_messages",
			"Messages delivered to this durable consumer and not yet acknowledged.", nil, labels),
	}
}

// Describe implements prometheus.Collector.
func (l *LagCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- l.pending
	ch <- l.acks
}

// Collect implements prometheus.Collector.
func (l *LagCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
	defer cancel()
	info, err := l.cons.Info(ctx)
	if err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(l.pending, prometheus.GaugeValue, float64(info.NumPending))
	ch <- prometheus.MustNewConstMetric(l.acks, prometheus.GaugeValue, float64(info.NumAckPending))
}
