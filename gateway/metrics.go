package main

import (
	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"usher/gateway/door"
	"usher/gateway/httpapi"
	"usher/gateway/throttle"
	"usher/internal/analytics"
)

// metrics are the gateway's Prometheus metrics, on its own registry. Labels
// are route templates and status codes, never user ids or tickets.
type metrics struct {
	reg     *prometheus.Registry
	http    *httpapi.Metrics
	joins   prometheus.Counter
	polls   prometheus.Counter
	limited *throttle.Metrics
	pow     *door.Metrics // proof of work at the door
	// outcomes counts the admitted shoppers who left (package analytics):
	// the leave that freed their slot.
	outcomes *prometheus.CounterVec
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		joins: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "usher_joins_total", Help: "Joins stored in JetStream.",
		}),
		polls: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "usher_polls_total", Help: "Polls answered.",
		}),
	}
	m.http = httpapi.NewMetrics(m.reg)
	m.limited = throttle.NewMetrics(m.reg)
	m.pow = door.NewMetrics(m.reg)
	m.outcomes = analytics.NewOutcomes()
	m.reg.MustRegister(m.outcomes)
	m.reg.MustRegister(m.joins, m.polls,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) handler() fiber.Handler {
	return adaptor.HTTPHandler(promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg}))
}
