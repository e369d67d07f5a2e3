package main

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"usher/internal/adaptive"
	"usher/internal/catalog"
	"usher/internal/event"
	"usher/internal/opshttp"
)

// limitStore is where the adaptive limits live (adaptive.Store).
type limitStore interface {
	Step(ctx context.Context, q string, p adaptive.Params) (adaptive.Step, error)
	Commit(ctx context.Context, q string, p adaptive.Params, s adaptive.Step, next adaptive.State, d adaptive.Decision, w adaptive.Window, eventLimit int) error
}

// opsPublisher records events on USHER_OPS.
type opsPublisher interface {
	Publish(ctx context.Context, subj string, data []byte, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error)
}

// claimLease is how long an admitter's claim on a window's decision lasts:
// if it dies before committing, another admitter decides the window.
const claimLease = 2 * time.Second

// adaptiveLimits gives every admission tick of an adaptive queue its
// targetActive: the controller's current limit, read from Redis each tick
// (so every admitter uses the same one, and a cut applies from the next
// tick of any of them). Once per decision window the admitter whose step
// claims the window decides it (adaptive.Decide on the last finished
// window and the payment breaker) and commits the new limit; a large move
// is recorded on USHER_OPS. It is safe for concurrent use by the queues'
// loops.
type adaptiveLimits struct {
	store   limitStore
	breaker breakerState // nil: never open
	events  opsPublisher
	log     *slog.Logger
	now     func() time.Time
	metrics *adaptiveMetrics

	mu   sync.Mutex
	last map[string]int // the limit each adaptive queue's last tick used
}

func newAdaptiveLimits(store limitStore, breaker breakerState, events opsPublisher, log *slog.Logger, now func() time.Time, reg prometheus.Registerer) *adaptiveLimits {
	return &adaptiveLimits{store: store, breaker: breaker, events: events, log: log, now: now,
		metrics: newAdaptiveMetrics(reg), last: map[string]int{}}
}

// targetActive is the targetActive of this tick of cfg's queue: the
// configured one, or the adaptive limit.
func (a *admitter) targetActive(ctx context.Context, cfg catalog.Config) int {
	if a.adaptive == nil {
		return cfg.TargetActive
	}
	return a.adaptive.target(ctx, cfg)
}

// paramsOf is the controller's settings from a queue's configuration.
func paramsOf(cfg catalog.Config) adaptive.Params {
	b := adaptive.Bounds{Min: cfg.TargetActive, Max: cfg.TargetActive, Start: cfg.TargetActive}
	if cfg.Adaptive != nil {
		b.Min, b.Max = cfg.Adaptive.Min, cfg.Adaptive.Max
	}
	return adaptive.Params{Window: time.Duration(cfg.AdaptiveWindow()) * time.Millisecond, Bounds: b, Lease: claimLease}
}

// retire drops every trace of deleted queue q: its last limit and all
// its series, counters included.
func (l *adaptiveLimits) retire(q string) {
	l.mu.Lock()
	delete(l.last, q)
	l.mu.Unlock()
	l.metrics.drop(q)
}

// target is the adaptive limit for one tick. When Redis cannot say, the
// queue keeps the limit its last tick used (or the configured one): the
// admission step itself will fail the same way.
func (l *adaptiveLimits) target(ctx context.Context, cfg catalog.Config) int {
	q := cfg.Name
	if !cfg.AdaptiveOn() {
		l.mu.Lock()
		_, was := l.last[q]
		delete(l.last, q)
		l.mu.Unlock()
		if was {
			l.metrics.forget(q)
		}
		return cfg.TargetActive
	}
	p := paramsOf(cfg)
	s, err := l.store.Step(ctx, q, p)
	if err != nil {
		if ctx.Err() == nil {
			l.log.Warn("read the adaptive limit", "queue", q, "err", err)
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		if n, ok := l.last[q]; ok {
			return n
		}
		return cfg.TargetActive
	}
	limit, reason := s.Limit, s.Reason
	if s.Started {
		l.log.Info("adaptive admission started", "queue", q, "limit", limit, "min", p.Bounds.Min, "max", p.Bounds.Max)
	}
	if s.Due {
		limit, reason = l.decide(ctx, cfg, p, s)
	}
	l.metrics.observe(q, limit, reason)
	l.mu.Lock()
	l.last[q] = limit
	l.mu.Unlock()
	return limit
}

// decide makes the decision of the window s claimed and commits it. It
// returns the limit and reason in effect afterwards.
func (l *adaptiveLimits) decide(ctx context.Context, cfg catalog.Config, p adaptive.Params, s adaptive.Step) (int, adaptive.Reason) {
	q, w := cfg.Name, s.Last
	if l.breaker != nil {
		open, err := l.breaker.Open(ctx)
		if err != nil {
			l.log.Warn("read the payment breaker for the adaptive limit", "queue", q, "err", err)
			return s.Limit, s.Reason // the claim lapses; the next window decides
		}
		w.BreakerOpen = open
	}
	next, d := adaptive.Decide(p.Bounds, s.State, w)
	recorded := s.EventLimit
	large := isLarge(recorded, d.Limit)
	if large {
		recorded = d.Limit
	}
	switch err := l.store.Commit(ctx, q, p, s, next, d, w, recorded); {
	case errors.Is(err, adaptive.ErrNotDecided):
		return s.Limit, s.Reason // another admitter decided; its limit holds from the next tick
	case err != nil:
		if ctx.Err() == nil {
			l.log.Warn("commit the adaptive limit", "queue", q, "err", err)
		}
		return s.Limit, s.Reason
	}
	l.metrics.decided(q, d, next)
	// Every decision with what it was made from, as the simulation tests
	// print it: a run on the real stack can be read window by window.
	l.log.Debug("adaptive decision", "queue", q, "window", s.Window-1, "from", s.Limit,
		"trace", adaptive.Trace{Window: w, Before: s.State, After: next, Decision: d})
	if large {
		l.record(ctx, cfg, p, s, next, d, w)
	}
	return d.Limit, d.Reason
}

// isLarge reports whether a move from the limit last recorded to limit is
// large enough to record: a quarter of it, and at least 2 slots.
func isLarge(recorded, limit int) bool {
	diff := limit - recorded
	if diff < 0 {
		diff = -diff
	}
	return diff >= max(2, (recorded+3)/4)
}

// record publishes a large move as usher.ops.limit_changed. The move is
// made either way: a failure here only loses its record, and is logged.
func (l *adaptiveLimits) record(ctx context.Context, cfg catalog.Config, p adaptive.Params, s adaptive.Step, next adaptive.State, d adaptive.Decision, w adaptive.Window) {
	l.log.Info("adaptive limit moved", "queue", cfg.Name, "from", s.EventLimit, "to", d.Limit, "reason", d.Reason,
		"latencyMs", next.LatencyMs, "baselineMs", next.BaselineMs)
	id, body, err := event.NewLimitChanged(event.LimitChanged{
		Queue: cfg.Name, Limit: d.Limit, Previous: s.EventLimit, Reason: string(d.Reason), Min: p.Bounds.Min, Max: p.Bounds.Max,
		Window: s.Window, WindowMs: int(p.Window.Milliseconds()), Orders: w.Orders, LatencyMs: round1(next.LatencyMs),
		BaselineMs: round1(next.BaselineMs), Timeouts: w.Timeouts, Failed: w.Failed, Deferred: w.Deferred,
		SlowHolds: w.SlowHolds, Holds: w.Holds, BreakerOpen: w.BreakerOpen,
	}, l.now())
	if err == nil {
		_, err = l.events.Publish(ctx, event.LimitChangedSubject, body, jetstream.WithMsgID(id))
	}
	if err != nil && ctx.Err() == nil {
		l.metrics.unrecorded.WithLabelValues(cfg.Name).Inc()
		l.log.Error("adaptive limit change not recorded on the ops stream", "queue", cfg.Name, "err", err)
	}
}

func round1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }

// adaptiveMetrics are the adaptive admission's metrics. Labels: the queue
// (named by ops) and the reason (a fixed set, adaptive.Reasons).
type adaptiveMetrics struct {
	limit      *prometheus.GaugeVec
	reason     *prometheus.GaugeVec
	decisions  *prometheus.CounterVec
	latency    *prometheus.GaugeVec
	baseline   *prometheus.GaugeVec
	unrecorded *prometheus.CounterVec
}

func newAdaptiveMetrics(reg prometheus.Registerer) *adaptiveMetrics {
	q := []string{"queue"}
	m := &adaptiveMetrics{
		limit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "usher_adaptive_limit", Help: "The adaptive targetActive the admission ticks use.",
		}, q),
		reason: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "usher_adaptive_limit_reason", Help: "1 for the reason the adaptive limit is what it is.",
		}, []string{"queue", "reason"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "usher_adaptive_decisions_total", Help: "Decision windows this admitter decided, by reason.",
		}, []string{"queue", "reason"}),
		latency: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "usher_adaptive_order_latency_seconds", Help: "Smoothed order latency (request to final) the last decision judged.",
		}, q),
		baseline: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "usher_adaptive_baseline_latency_seconds", Help: "No-load order latency the last decision judged against.",
		}, q),
		unrecorded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "usher_adaptive_changes_unrecorded_total", Help: "Large limit moves whose usher.ops.limit_changed event could not be stored.",
		}, q),
	}
	reg.MustRegister(m.limit, m.reason, m.decisions, m.latency, m.baseline, m.unrecorded)
	return m
}

// observe sets the limit in effect and its reason.
func (m *adaptiveMetrics) observe(q string, limit int, reason adaptive.Reason) {
	m.limit.WithLabelValues(q).Set(float64(limit))
	for _, r := range adaptive.Reasons {
		v := 0.0
		if r == reason {
			v = 1
		}
		m.reason.WithLabelValues(q, string(r)).Set(v)
	}
}

// decided counts a decision this admitter made.
func (m *adaptiveMetrics) decided(q string, d adaptive.Decision, s adaptive.State) {
	m.decisions.WithLabelValues(q, string(d.Reason)).Inc()
	if s.LatencyMs > 0 {
		m.latency.WithLabelValues(q).Set(s.LatencyMs / 1000)
		m.baseline.WithLabelValues(q).Set(s.BaselineMs / 1000)
	}
}

// drop drops every series of a deleted queue.
func (m *adaptiveMetrics) drop(q string) {
	opshttp.ForgetQueue(q, m.limit, m.reason, m.decisions, m.latency, m.baseline, m.unrecorded)
}

// forget drops the gauges of a queue that is no longer adaptive; its
// counters go on counting what it decided while it was.
func (m *adaptiveMetrics) forget(q string) {
	m.limit.DeleteLabelValues(q)
	m.latency.DeleteLabelValues(q)
	m.baseline.DeleteLabelValues(q)
	for _, r := range adaptive.Reasons {
		m.reason.DeleteLabelValues(q, string(r))
	}
}
