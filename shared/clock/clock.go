// Package clock gives every usher process one clock: Redis's.
//
// Every time decision that matters — when a token is READY, when it
// expires, when a slot frees, when an order's deadline passes, rate limits —
// is made on Redis TIME: the scripts read it directly, and processes read
// a Synced clock that follows it. A host whose own clock is minutes off
// therefore decides exactly what a correct one would. The offset is
// measured every second, halving the round trip, so the clock is as good as
// the host's monotonic clock between samples and a loopback or datacenter
// round trip off at most.
package clock

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"
)

// Source tells the reference time (Redis TIME).
type Source interface {
	Now(ctx context.Context) (time.Time, error)
}

// Synced is a clock that follows a Source. The zero offset applies until
// the first successful Sync. It is safe for concurrent use.
type Synced struct {
	src    Source
	local  func() time.Time
	offset atomic.Int64 // nanoseconds to add to local
	synced atomic.Bool
	log    *slog.Logger
}

// New returns a clock following src, measured against local (time.Now, or
// a skewed clock in fault tests).
func New(src Source, local func() time.Time, log *slog.Logger) *Synced {
	return &Synced{src: src, local: local, log: log}
}

// Now is the reference time as this process best knows it.
func (c *Synced) Now() time.Time { return c.local().Add(time.Duration(c.offset.Load())) }

// Offset is what Now adds to the local clock.
func (c *Synced) Offset() time.Duration { return time.Duration(c.offset.Load()) }

// Sync measures the offset once.
func (c *Synced) Sync(ctx context.Context) error {
	t0 := c.local()
	ref, err := c.src.Now(ctx)
	if err != nil {
		return err
	}
	t1 := c.local()
	mid := t0.Add(t1.Sub(t0) / 2)
	off := ref.Sub(mid)
	if prev := time.Duration(c.offset.Swap(int64(off))); !c.synced.Swap(true) || (off-prev).Abs() > time.Second {
		c.log.Info("clock synced to redis", "offset", off.String())
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
