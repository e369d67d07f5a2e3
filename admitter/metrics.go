package main

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"usher/internal/analytics"
	"usher/internal/catalog"
	"usher/internal/opshttp"
	"usher/internal/waitqueue"
)

// metrics are the admitter's Prometheus metrics, on its own registry. The
// queue label is bounded by what ops configure.
type metrics struct {
	reg          *prometheus.Registry
	tickDuration *prometheus.HistogramVec
	admitted     *prometheus.CounterVec
	expired      *prometheus.CounterVec
	abandoned    *prometheus.CounterVec
	waiting      *prometheus.GaugeVec
	active       *prometheus.GaugeVec
	target       *prometheus.GaugeVec
	rate         *prometheus.GaugeVec
	breakerOpen  prometheus.Gauge
	announced    prometheus.Counter
	// The followers (per queue and stream: entries, admissions, orders).
	applied *prometheus.CounterVec // events applied to the line
	behind  *prometheus.GaugeVec   // events in the stream not yet delivered to this follower
	stalled *prometheus.GaugeVec   // seconds the follower has been unable to apply its next batch
	rewinds *prometheus.CounterVec // times Redis turned out to have lost writes and the gap was replayed
	// behindTicks counts ticks that admitted nobody because the line had
	// not applied every admission or order the streams hold.
	behindTicks *prometheus.CounterVec
	// Stock-aware queues: the units that could go to the next in line, and
	// the stock state (1 for the current one).
	sellable   *prometheus.GaugeVec
	stockState *prometheus.GaugeVec
	// The journey (package analytics): time in line of the admissions
	// this admitter stored, and the tokens its ticks expired.
	timeInLine *prometheus.HistogramVec
	outcomes   *prometheus.CounterVec
}

func newMetrics() *metrics {
	q := []string{"queue"}
	qs := []string{"queue", "stream"}
	m := &metrics{
		reg: prometheus.NewRegistry(),
		tickDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "usher_admission_tick_duration_seconds", Help: "Time one admission tick takes.",
			Buckets: []float64{.0002, .0005, .001, .0025, .005, .01, .025, .05, .1},
		}, q),
		admitted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "usher_admitted_total", Help: "Shoppers admitted."}, q),
		expired:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "usher_tokens_expired_total", Help: "Entry tokens that expired unused."}, q),
		abandoned: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "usher_abandoned_total",
			Help: "Waiting shoppers who left the line because they were gone (no poll, no stream) for the queue's abandonAfterSeconds."}, q),
		waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "usher_waiting", Help: "Shoppers waiting in line."}, q),
		active:  prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "usher_active", Help: "Admission slots held."}, q),
		target:  prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "usher_target_active", Help: "Configured targetActive."}, q),
		rate: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "usher_admission_rate_per_second", Help: "Measured admissions per second over the last minute (what ETAs use).",
		}, q),
		breakerOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "usher_payment_breaker_shared_open", Help: "1 while the shared payment breaker is open and admission is held back.",
		}),
		announced: prometheus.NewCounter(prometheus.CounterOpts{Name: "usher_admissions_announced_total", Help: "Admission events stored in USHER_ADMISSIONS."}),
		applied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "usher_projection_applied_total", Help: "Stream events applied to the Redis line by this admitter's followers.",
		}, qs),
		behind: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "usher_projection_pending_events", Help: "Events of the queue in the stream not yet delivered to this admitter's follower.",
		}, qs),
		stalled: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "usher_projection_stalled_seconds", Help: "How long the follower has been unable to apply its next events (what holds admission back).",
		}, qs),
		rewinds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "usher_projection_rewinds_total", Help: "Times Redis turned out to have lost writes and the follower replayed the gap.",
		}, qs),
		sellable: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "usher_stock_sellable_units", Help: "Units of a stock-aware queue that could still go to the next in line.",
		}, q),
		stockState: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "usher_stock_state", Help: "1 for a stock-aware queue's current stock state (available, held, sold_out, unknown).",
		}, []string{"queue", "state"}),
		behindTicks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "usher_admission_ticks_behind_total", Help: "Ticks that admitted nobody because the line had not applied every admission and order the streams hold.",
		}, q),
		timeInLine: analytics.NewTimeInLine(),
		outcomes:   analytics.NewOutcomes(),
	}
	m.reg.MustRegister(m.timeInLine, m.outcomes)
	m.reg.MustRegister(m.tickDuration, m.admitted, m.expired, m.abandoned, m.waiting, m.active, m.target, m.rate, m.breakerOpen,
		m.announced, m.applied, m.behind, m.stalled, m.rewinds, m.behindTicks, m.sellable, m.stockState,
		opshttp.GoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// forget drops every series of a deleted queue: its gauges would say its
// last line and slots for as long as the admitter runs, and each queue
// ever deleted would stay in memory and in every scrape.
func (m *metrics) forget(q string) {
	opshttp.ForgetQueue(q,
		m.tickDuration, m.admitted, m.expired, m.abandoned, m.waiting, m.active, m.target, m.rate,
		m.applied, m.behind, m.stalled, m.rewinds, m.sellable, m.stockState, m.behindTicks,
		m.timeInLine, m.outcomes)
}

func (m *metrics) observeTick(cfg catalog.Config, r waitqueue.TickResult, d time.Duration) {
	m.tickDuration.WithLabelValues(cfg.Name).Observe(d.Seconds())
	m.admitted.WithLabelValues(cfg.Name).Add(float64(r.Admitted))
	m.expired.WithLabelValues(cfg.Name).Add(float64(r.Expired))
	m.outcomes.WithLabelValues(cfg.Name, analytics.Expired).Add(float64(r.Expired))
	m.abandoned.WithLabelValues(cfg.Name).Add(float64(r.Abandoned))
	m.waiting.WithLabelValues(cfg.Name).Set(float64(r.Waiting))
	m.active.WithLabelValues(cfg.Name).Set(float64(r.Active))
	m.target.WithLabelValues(cfg.Name).Set(float64(cfg.TargetActive))
	m.rate.WithLabelValues(cfg.Name).Set(r.AdmitRatePerSec)
	if r.Behind {
		m.behindTicks.WithLabelValues(cfg.Name).Inc()
	}
	if r.Stock != "" {
		m.sellable.WithLabelValues(cfg.Name).Set(float64(r.Sellable))
		for _, st := range []string{waitqueue.StockAvailable, waitqueue.StockHeld, waitqueue.StockSoldOut, waitqueue.StockUnknown} {
			v := 0.0
			if st == r.Stock {
				v = 1
			}
			m.stockState.WithLabelValues(cfg.Name, st).Set(v)
		}
	}
}

func (m *metrics) observeBreaker(open bool) {
	v := 0.0
	if open {
		v = 1
	}
	m.breakerOpen.Set(v)
}
