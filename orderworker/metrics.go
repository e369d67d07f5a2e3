package main

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the order worker's Prometheus metrics, on its own registry.
type metrics struct {
	reg      *prometheus.Registry
	hold     prometheus.Histogram
	orders   *prometheus.CounterVec
	latency  prometheus.Histogram
	payments *prometheus.CounterVec
	payTime  *prometheus.HistogramVec
	deferred prometheus.Counter
	breaker  prometheus.Gauge
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		hold: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "usher_db_connection_hold_seconds",
			Help:    "How long a database connection is held, from acquire to release (the seed's hikaricp_connections_usage_seconds).",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .02, .05, .1, .2, .5, 1, 2.5},
		}),
		orders: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "usher_orders_total", Help: "Orders finished, by final status.",
		}, []string{"status"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "usher_order_duration_seconds", Help: "From the order request to its final status.",
			Buckets: prometheus.ExponentialBuckets(.01, 2, 14),
		}),
		payments: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "usher_payment_attempts_total", Help: "Payment gateway calls, by outcome.",
		}, []string{"outcome"}),
		payTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "usher_payment_duration_seconds",
			Help:    "One HTTP call to the payment gateway, by outcome (ok, declined, unavailable).",
			Buckets: []float64{.005, .01, .025, .05, .1, .2, .5, 1, 2, 5},
		}, []string{"outcome"}),
		deferred: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "usher_orders_deferred_total", Help: "Orders put back to wait for the payment gateway.",
		}),
		breaker: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "usher_payment_breaker_open", Help: "1 while this worker's payment breaker is open.",
		}),
	}
	m.reg.MustRegister(m.hold, m.orders, m.latency, m.payments, m.payTime, m.deferred, m.breaker,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) observeHold(d time.Duration) { m.hold.Observe(d.Seconds()) }

func (m *metrics) observePayment(outcome string, d time.Duration) {
	m.payTime.WithLabelValues(outcome).Observe(d.Seconds())
}
