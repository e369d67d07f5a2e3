package main

import (
	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"usher/gateway/door"
	"usher/gateway/gate"
	"usher/gateway/httpapi"
	"usher/gateway/lineapi"
	"usher/gateway/throttle"
	"usher/internal/opshttp"
)

// metrics are the gateway's Prometheus metrics, on its own registry. Labels
// are route templates and status codes, never user ids or tickets.
type metrics struct {
	reg     *prometheus.Registry
	http    *httpapi.Metrics
	line    *lineapi.Metrics
	limited *throttle.Metrics
	pow     *door.Metrics // proof of work at the door
	gate    *gate.Metrics // the proxy gate's decisions
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
	}
	m.http = httpapi.NewMetrics(m.reg)
	m.limited = throttle.NewMetrics(m.reg)
	m.pow = door.NewMetrics(m.reg)
	m.line = lineapi.NewMetrics(m.reg)
	m.gate = gate.NewMetrics(m.reg)
	m.reg.MustRegister(
		opshttp.GoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// forget drops every series of a deleted queue: each queue ever deleted
// would otherwise stay in memory and in every scrape for as long as the
// gateway runs.
func (m *metrics) forget(q string) {
	m.pow.Forget(q)
	m.line.Forget(q)
	m.gate.Forget(q)
}

func (m *metrics) handler() fiber.Handler {
	return adaptor.HTTPHandler(promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg}))
}
