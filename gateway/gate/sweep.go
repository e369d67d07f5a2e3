package gate

import (
	"context"
	"time"
)

// sweepBatch is the most idle passes of a queue one sweep frees.
const sweepBatch = 500

// SweepEvery is how often RunSweeper looks for idle passes, at most: a
// quarter of the shortest passIdle, so a pass is freed within 1.25 ×
// passIdle of its last use.
func (g *Gate) SweepEvery() time.Duration {
	every := time.Minute
	for _, r := range g.cfg.Rules {
		every = min(every, r.PassIdle/4)
	}
	return max(every, 10*time.Millisecond)
}

// RunSweeper frees the slots of passes idle longer than their rule's
// passIdle, every interval, until ctx ends. Any number of gateways sweep
// at once: each idle pass is taken by one of them (sweep.lua).
func (g *Gate) RunSweeper(ctx context.Context, every time.Duration) error {
	if !g.On() {
		return nil
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			g.Sweep(ctx)
		}
	}
}

// Sweep frees, once, the slots of the passes idle longer than their
// rule's passIdle (the shortest of a queue's rules), as a leave frees
// them, and returns how many it freed. Idleness is judged on Redis's
// clock. A queue the line cannot be read for is tried again next time.
func (g *Gate) Sweep(ctx context.Context) int {
	idle := map[string]time.Duration{}
	var order []string
	for _, r := range g.cfg.Rules {
		if d, ok := idle[r.Queue]; !ok || r.PassIdle < d {
			if !ok {
				order = append(order, r.Queue)
			}
			idle[r.Queue] = r.PassIdle
		}
	}
	freed := 0
	for _, q := range order {
		found, err := g.passes.Sweep(ctx, q, idle[q], sweepBatch)
		if err != nil {
			g.log.Warn("gate: sweep of idle passes failed", "queue", q, "err", err)
			continue
		}
		for _, p := range found {
			// A leave the line could not take leaves the slot to the
			// admission's expiry (the pass is out of the set already);
			// one taken but not recorded, to the admitter's next tick.
			if _, err := g.leaver.LeaveEntry(ctx, q, p.Seq, p.User); err != nil {
				g.log.Warn("gate: idle pass could not be freed", "queue", q, "err", err)
				continue
			}
			g.metrics.count(q, outSwept)
			freed++
		}
	}
	return freed
}
