package main

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"usher/internal/opshttp"
)

// metrics are the notifier's Prometheus metrics, on its own registry.
type metrics struct {
	reg          *prometheus.Registry
	connections  prometheus.Gauge
	refused      prometheus.Counter
	events       *prometheus.CounterVec
	dropped      *prometheus.CounterVec
	readyLatency prometheus.Histogram
	eventLag     prometheus.Histogram
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "usher_sse_connections", Help: "Open Server-Sent Events streams.",
		}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "usher_sse_streams_refused_total", Help: "Streams refused because the notifier held USHER_NOTIFIER_MAX_STREAMS already.",
		}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "usher_sse_events_sent_total", Help: "Events written to streams, by event type.",
		}, []string{"type"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "usher_sse_clients_dropped_total", Help: "Streams ended by a failed write: slow (missed the write deadline) or dead.",
		}, []string{"reason"}),
		readyLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "usher_ready_delivery_seconds",
			Help:    "From a shopper's readyAt to the write of their ready event (a stream opened later counts from readyAt too).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
	}
	m.eventLag = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "usher_admission_event_lag_seconds",
		Help:    "From a shopper's readyAt to the arrival of its admission event at this notifier (early arrivals count as 0).",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
	})
	m.reg.MustRegister(m.connections, m.refused, m.events, m.dropped, m.readyLatency, m.eventLag,
		opshttp.GoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
