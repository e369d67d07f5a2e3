package main

import (
	"math"
	"time"
)

// eta estimates how long the shopper at position waits, from the admission
// rate measured over the last minute. It is unknown (ok false) until the
// queue has admitted anyone: a configured rate would be a promise, not an
// estimate.
func eta(position int64, ratePerSec float64) (seconds int64, ok bool) {
	if position <= 0 {
		return 0, true
	}
	if ratePerSec <= 0 {
		return 0, false
	}
	return int64(math.Ceil(float64(position) / ratePerSec)), true
}

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
