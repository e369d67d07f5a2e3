// Package clock gives every usher process one clock: Redis's.
//
// Every time decision that matters — when a token is READY, when it
// expires, when a slot frees, when an order's deadline passes, rate limits —
// is made on Redis TIME: the scripts read it directly, and processes read
// a Synced clock that follows it. A host whose own clock is minutes off
// therefore decides exactly what a correct one would. The offset is
// measured every second, halving the round trip, so the clock is as good as
// the host's monotonic clock between samples and off by at most half the
// round trip of the sample it uses. A sample whose round trip is long next
// to the recent ones (a Redis failover, a stalled connection, a busy host)
// is not used: halving 420 ms would put the clock up to 210 ms off, enough
// to show READY early or date an event after its effects.
package clock

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Which samples the clock takes (see Synced.Sync).
const (
	// recentSamples is how many round trips "recent" covers.
	recentSamples = 8
	// slowFactor and slowSlack: a round trip longer than slowFactor times
	// the shortest recent one plus slowSlack is slow.
	slowFactor = 2
	slowSlack  = 2 * time.Millisecond
)

// Source tells the reference time (Redis TIME).
type Source interface {
	Now(ctx context.Context) (time.Time, error)
}

// Synced is a clock that follows a Source. The zero offset applies until
// the first successful Sync. It is safe for concurrent use.
type Synced struct {
	src   Source
	local func() time.Time
	cur   atomic.Pointer[sample] // nil until the first successful Sync
	log   *slog.Logger

	mu   sync.Mutex
	rtts [recentSamples]time.Duration // the recent round trips, a ring
	n    int                          // samples taken
}

// sample is what one Sync measured: read together, so that a reader never
// pairs one sample's offset with another's spread.
type sample struct {
	offset time.Duration // what to add to local
	spread time.Duration // half the round trip the offset came from
}

// current is the sample in use: zero before the first.
func (c *Synced) current() sample {
	if s := c.cur.Load(); s != nil {
		return *s
	}
	return sample{}
}

// New returns a clock following src, measured against local (time.Now, or
// a skewed clock in fault tests).
func New(src Source, local func() time.Time, log *slog.Logger) *Synced {
	return &Synced{src: src, local: local, log: log}
}

// Now is the reference time as this process best knows it.
func (c *Synced) Now() time.Time { return c.local().Add(c.current().offset) }

// Earliest is the earliest the reference time can be now: Now less half
// the round trip of the sample the offset came from (the reference time was
// read somewhere within that round trip). A decision that must never come
// early on the reference clock — showing READY at readyAt — waits for
// Earliest, not Now: on one host, Now can run a millisecond ahead of the
// very clock Redis reads.
func (c *Synced) Earliest() time.Time {
	s := c.current()
	return c.local().Add(s.offset - s.spread)
}

// Offset is what Now adds to the local clock.
func (c *Synced) Offset() time.Duration { return c.current().offset }

// Sync measures the offset once. The first sample sets it; after that, a
// slow sample — a round trip longer than twice the shortest of the last
// recentSamples (itself included), plus 2 ms — keeps the offset as it was.
// When every round trip got slower (Redis moved further away), the recent
// ones are all slow and the clock follows them again within recentSamples
// samples.
func (c *Synced) Sync(ctx context.Context) error {
	t0 := c.local()
	ref, err := c.src.Now(ctx)
	if err != nil {
		return err
	}
	t1 := c.local()
	rtt := t1.Sub(t0)
	off := ref.Sub(t0.Add(rtt / 2))

	c.mu.Lock()
	c.rtts[c.n%recentSamples] = rtt
	c.n++
	shortest := rtt
	for i := range min(c.n, recentSamples) {
		shortest = min(shortest, c.rtts[i])
	}
	c.mu.Unlock()
	if c.cur.Load() != nil && rtt > slowFactor*shortest+slowSlack {
		return nil
	}
	if prev := c.cur.Swap(&sample{offset: off, spread: rtt / 2}); prev == nil || (off-prev.offset).Abs() > time.Second {
		c.log.Info("clock synced to redis", "offset", off.String(), "roundTrip", rtt.String())
	}
	return nil
}

// Run keeps the offset current every interval until ctx ends. A failed
// sample keeps the last offset (Redis down: nothing is decided meanwhile
// anyway).
func (c *Synced) Run(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		_ = c.Sync(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
