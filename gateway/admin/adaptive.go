package admin

import (
	"context"
	"time"

	"usher/internal/adaptive"
	"usher/internal/catalog"
)

// Limits reads a queue's adaptive limit (adaptive.Store).
type Limits interface {
	Status(ctx context.Context, q string) (adaptive.Status, error)
}

// AdaptiveView is an adaptive queue's admission limit as the admitters'
// last decision left it: the targetActive its ticks use now, and why.
type AdaptiveView struct {
	Limit      int        `json:"limit"`
	Reason     string     `json:"reason"`
	DecidedAt  *time.Time `json:"decidedAt,omitempty"`
	LatencyMs  float64    `json:"latencyMs"`  // the smoothed order latency it judged
	BaselineMs float64    `json:"baselineMs"` // the no-load latency it judged against
	Orders     int64      `json:"orders"`     // orders finished in the window it judged
}

// adaptiveOf is cfg's adaptive limit for the admin views: nil for a queue
// that is not adaptive (or with no limits to read); the configured targetActive (reason start) until
// an admitter has started the controller.
func adaptiveOf(ctx context.Context, limits Limits, cfg catalog.Config) (*AdaptiveView, error) {
	if !cfg.AdaptiveOn() || limits == nil {
		return nil, nil
	}
	st, err := limits.Status(ctx, cfg.Name)
	if err != nil {
		return nil, err
	}
	b := adaptive.Bounds{Min: cfg.Adaptive.Min, Max: cfg.Adaptive.Max, Start: cfg.TargetActive}
	if !st.Found {
		return &AdaptiveView{Limit: b.Clamp(float64(cfg.TargetActive)), Reason: string(adaptive.ReasonStart)}, nil
	}
	v := &AdaptiveView{Limit: b.Clamp(float64(st.Limit)), Reason: string(st.Reason), LatencyMs: round1(st.LatencyMs),
		BaselineMs: round1(st.BaselineMs), Orders: st.Orders}
	if !st.DecidedAt.IsZero() {
		at := st.DecidedAt.UTC()
		v.DecidedAt = &at
	}
	return v, nil
}

func round1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }
