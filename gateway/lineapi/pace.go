package lineapi

import "time"

// Poll pacing: short near the head, growing with the distance, never above
// the cap, with ±20% jitter so that pollers do not synchronise.
const (
	pollMin = 500 * time.Millisecond
	pollMax = 5 * time.Second
)

// pollAfter says when a shopper should poll next. jitter is uniform in [0,1).
func pollAfter(position int64, etaSec int64, etaKnown bool, jitter float64) time.Duration {
	var d time.Duration
	if etaKnown {
		// A quarter of the remaining wait: several updates before the turn comes.
		d = time.Duration(etaSec) * time.Second / 4
	} else {
		d = time.Duration(position) * 10 * time.Millisecond
	}
	d = min(max(d, pollMin), pollMax)
	d = time.Duration(float64(d) * (0.8 + 0.4*jitter))
	return d.Round(time.Millisecond)
}
