// Package adaptivetest commits the adaptive controller's decisions for
// tests that show them (the admin view, the ops dashboard) without an
// admitter: a real controller's figures are latencies it measures, which
// no test can name beforehand.
package adaptivetest

import (
	"context"
	"testing"
	"time"

	"usher/internal/adaptive"
	"usher/internal/testenv"
)

// Decide commits one decision for q as an admitter would, in the first
// window due.
func Decide(t testing.TB, st *adaptive.Store, q string, p adaptive.Params, next adaptive.State, d adaptive.Decision, orders int64) {
	t.Helper()
	ctx := context.Background()
	var s adaptive.Step
	var err error
	testenv.Eventually(t, 5*time.Second, func() bool {
		s, err = st.Step(ctx, q, p)
		return err == nil && s.Due
	}, "a window due")
	if err := st.Commit(ctx, q, p, s, next, d, adaptive.Window{Sample: adaptive.Sample{Orders: orders}}, s.EventLimit); err != nil {
		t.Fatal(err)
	}
}
