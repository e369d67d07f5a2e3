package main

import (
	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"usher/gateway/httpapi"
	"usher/internal/analytics"
)

// metrics are the gateway's Prometheus metrics, on its own registry. Labels
// are route templates and status codes, never user ids or tickets.
type metrics struct {
	reg     *prometheus.Registry
	http    *httpapi.Metrics
	joins   prometheus.Counter
	polls   prometheus.Counter
	limited *prometheus.CounterVec
	pow     *powMetrics // proof of work at the door (challenge.go)
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
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "usher_rate_limited_total", Help: "Requests refused with 429, by the policy that refused them.",
		}, []string{"policy"}),
	}
	m.http = httpapi.NewMetrics(m.reg)
	m.pow = newPowMetrics(m.reg)
	m.outcomes = analytics.NewOutcomes()
	m.reg.MustRegister(m.outcomes)
	m.reg.MustRegister(m.joins, m.polls, m.limited,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) handler() fiber.Handler {
	return adaptor.HTTPHandler(promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg}))
}
