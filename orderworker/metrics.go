package main

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"usher/internal/analytics"
	"usher/internal/event"
	"usher/internal/opshttp"
	"usher/internal/orders"
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
	// The journey (package analytics), per queue: READY → order and
	// order → final of the orders this worker finished, and the admitted
	// shoppers who ordered.
	readyToOrder *prometheus.HistogramVec
	orderToFinal *prometheus.HistogramVec
	outcomes     *prometheus.CounterVec
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
		readyToOrder: analytics.NewReadyToOrder(),
		orderToFinal: analytics.NewOrderToFinal(),
		outcomes:     analytics.NewOutcomes(),
	}
	m.reg.MustRegister(m.readyToOrder, m.orderToFinal, m.outcomes)
	m.reg.MustRegister(m.hold, m.orders, m.latency, m.payments, m.payTime, m.deferred, m.breaker,
		opshttp.GoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// forget drops every series of a deleted queue: each queue ever deleted
// would otherwise stay in memory and in every scrape for as long as the
// worker runs.
func (m *metrics) forget(q string) {
	opshttp.ForgetQueue(q, m.readyToOrder, m.orderToFinal, m.outcomes)
}

func (m *metrics) observeHold(d time.Duration) { m.hold.Observe(d.Seconds()) }

// observeFinal records the journey of an order this worker finished at
// now: from its request to its final status and, for an order the
// shopper's token could place (not one refused for the token itself:
// expired, left, never confirmed — those count elsewhere, or are no
// admission at all), from the shopper's READY to the request, and the
// admitted shopper's outcome "ordered". The durable consumer hands each
// request to one worker at a time and this runs once its order is final,
// so an order counts once (a crash between here and the ack would count
// it again on redelivery, as usher_orders_total).
func (m *metrics) observeFinal(req event.OrderRequested, o orders.Order, now time.Time) {
	m.orderToFinal.WithLabelValues(o.Queue, string(o.Status)).Observe(max(now.Sub(req.RequestedAt), 0).Seconds())
	switch o.Reason {
	case orders.ReasonTokenExpired, orders.ReasonTokenLeft, orders.ReasonTokenUnconfirmed:
		return
	}
	if !req.TokenReadyAt.IsZero() {
		m.readyToOrder.WithLabelValues(o.Queue).Observe(max(req.RequestedAt.Sub(req.TokenReadyAt), 0).Seconds())
	}
	m.outcomes.WithLabelValues(o.Queue, analytics.Ordered).Inc()
}

func (m *metrics) observePayment(outcome string, d time.Duration) {
	m.payTime.WithLabelValues(outcome).Observe(d.Seconds())
}
