package httpapi

import (
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics measure every request. Labels are route templates and status
// codes, never user ids or tickets.
type Metrics struct {
	requests *prometheus.HistogramVec
}

// NewMetrics registers the request metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "usher_http_request_duration_seconds",
		Help:    "Gateway request latency by route template, method and status.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
	}, []string{"route", "method", "code"})}
	reg.MustRegister(m.requests)
	return m
}

// Measure is the middleware that times a request.
func (m *Metrics) Measure(c *fiber.Ctx) error {
	start := time.Now()
	err := c.Next()
	code := c.Response().StatusCode()
	if err != nil {
		// The error handler has not run yet: take the status it will write.
		code = StatusOf(err)
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
