package main

import (
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"usher/internal/analytics"
)

// metrics are the gateway's Prometheus metrics, on its own registry. Labels
// are route templates and status codes, never user ids or tickets.
type metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.HistogramVec
	joins    prometheus.Counter
	polls    prometheus.Counter
	limited  *prometheus.CounterVec
	pow      *powMetrics // proof of work at the door (challenge.go)
	// outcomes counts the admitted shoppers who left (package analytics):
	// the leave that freed their slot.
	outcomes *prometheus.CounterVec
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "usher_http_request_duration_seconds",
			Help:    "Gateway request latency by route template, method and status.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"route", "method", "code"}),
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
	m.pow = newPowMetrics(m.reg)
	m.outcomes = analytics.NewOutcomes()
	m.reg.MustRegister(m.outcomes)
	m.reg.MustRegister(m.requests, m.joins, m.polls, m.limited,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) middleware(c *fiber.Ctx) error {
	start := time.Now()
	err := c.Next()
	code := c.Response().StatusCode()
	if err != nil {
		// The error handler has not run yet: take the status it will write.
		code = statusOf(err)
	}
	// fiber's strings point into reused buffers: label values must be
	// copies (or constants), or the registry's keys change under it.
	m.requests.WithLabelValues(strings.Clone(c.Route().Path), methodLabel(c.Method()), strconv.Itoa(code)).Observe(time.Since(start).Seconds())
	return err
}

func methodLabel(m string) string {
	switch m {
	case "GET":
		return "GET"
	case "POST":
		return "POST"
	case "PUT":
		return "PUT"
	case "DELETE":
		return "DELETE"
	case "HEAD":
		return "HEAD"
	}
	return "other"
}

func (m *metrics) handler() fiber.Handler {
	return adaptor.HTTPHandler(promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg}))
}
