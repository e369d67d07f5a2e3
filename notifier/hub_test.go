package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"usher/internal/catalog"
	"usher/internal/event"
	"usher/internal/waitqueue"
)

// fakeLine answers Ranks from memory: the benchmark measures the hub, not
// Redis.
type fakeLine struct{ admitted int64 }

func (f *fakeLine) Poll(ctx context.Context, q string, seq uint64) (waitqueue.Entry, error) {
	return waitqueue.Entry{Status: waitqueue.Waiting}, nil
}

func (f *fakeLine) Present(ctx context.Context, q string, seqs []uint64, now time.Time) error {
	return nil
}

func (f *fakeLine) Ranks(ctx context.Context, q string, seqs []uint64) (waitqueue.Ranks, error) {
	r := waitqueue.Ranks{Waiting: 1 << 20, AdmittedTotal: f.admitted, Rate: 140, Rank: make([]int64, len(seqs))}
	for i, s := range seqs {
		r.Rank[i] = int64(s) - 1 - f.admitted
	}
	return r, nil
}

type openQueues struct{}

func (openQueues) Get(name string) (catalog.Config, bool) { return catalog.Defaults(name), true }

func newBenchHub(l lineReader) *hub {
	t := timing{positions: time.Second, heartbeat: 15 * time.Second, writeTimeout: time.Second, retry: time.Second, resyncPerTick: 500}
	return newHub(slog.New(slog.NewTextHandler(io.Discard, nil)), l, openQueues{}, time.Now, t, newMetrics())
}

// The hub's position tick, per client: with the head advancing by 14 each
// tick, every client's position changes and its stream is woken when due
// (see positionEvery).
func BenchmarkPositionFanOut(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) {
			l := &fakeLine{}
			h := newBenchHub(l)
			clients := make([]*client, n)
			for i := range clients {
				clients[i] = newClient("q", uint64(100000+i))
				h.register(clients[i])
			}
			ctx := context.Background()
			h.refresh(ctx, "q", &pacer{}) // first ranks
			b.ResetTimer()
			tick := int64(0)
			for b.Loop() {
				l.admitted += 14
				tick++
				h.refresh(ctx, "q", &pacer{tick: tick})
				for _, c := range clients { // what a woken stream does first
					select {
					case <-c.wake:
					default:
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/client")
		})
	}
}

// Routing one admission to its client among many.
func BenchmarkAdmissionRouting(b *testing.B) {
	h := newBenchHub(&fakeLine{})
	const n = 10000
	for i := range n {
		h.register(newClient("q", uint64(i)))
	}
	now := time.Now()
	i := 0
	for b.Loop() {
		h.onAdmitted(event.Admitted{Queue: "q", Seq: uint64(i % n), TokenID: "q:x", ReadyAt: now, ExpiresAt: now.Add(time.Minute)})
		i++
	}
}

// The derived position: admissions since the rank was read move a client
// up; a resync replaces the estimate with the truth.
func TestDerivedPositions(t *testing.T) {
	c := newClient("q", 50)
	tests := []struct {
		name           string
		rank, base     int64 // a resync (rank read with base) when base >= 0
		admittedTotal  int64
		wantPosition   int64
		wantETAUnknown bool
	}{
		{"first read", 9, 100, 100, 10, false},
		{"three admitted ahead", -1, -1, 103, 7, false},
		{"never below 1", -1, -1, 200, 1, false},
		{"resync after leaves", 2, 200, 200, 3, false},
	}
	for i, tt := range tests {
		if tt.base >= 0 {
			c.rebase(tt.rank, tt.base)
		}
		c.advance(tt.admittedTotal, 500, 2, int64(i))
		v, _, _ := c.state()
		if v.position != tt.wantPosition || v.waiting != 500 {
			t.Errorf("%s: position %d of %d, want %d of 500", tt.name, v.position, v.waiting, tt.wantPosition)
		}
		if want := (tt.wantPosition + 1) / 2; v.eta != want || !v.etaKnown {
			t.Errorf("%s: eta %d (known %v), want %d at 2/s", tt.name, v.eta, v.etaKnown, want)
		}
	}
}

// The cadence of position events: near the head every tick, further back
// less often, and a change is never dropped — only told at the next tick
// the client is due, even when the line has stopped moving by then.
func TestPositionCadence(t *testing.T) {
	woken := func(c *client) bool {
		select {
		case <-c.wake:
			return true
		default:
			return false
		}
	}
	tests := []struct {
		rank      int64
		wantEvery int64
	}{{30, 1}, {1020, 2}, {2520, 3}, {4999, 5}, {100_000, 5}}
	for _, tt := range tests {
		c := newClient("q", 1)
		c.rebase(tt.rank, 0)
		var told []int64
		// The line moves by one a tick for 20 ticks, then stops.
		for tick := int64(1); tick <= 30; tick++ {
			c.advance(min(tick, 20), 1<<20, 0, tick)
			if woken(c) {
				told = append(told, tick)
			}
		}
		for i := 1; i < len(told); i++ {
			if told[i]-told[i-1] != tt.wantEvery && told[i] != told[len(told)-1] {
				t.Fatalf("rank %d: told at ticks %v, want every %d", tt.rank, told, tt.wantEvery)
			}
		}
		if len(told) == 0 || told[0] != 1 {
			t.Fatalf("rank %d: told at ticks %v, want the first tick at once", tt.rank, told)
		}
		if v, _, _ := c.state(); told[len(told)-1] < 20 || v.position != max(tt.rank+1-20, 1) {
			t.Fatalf("rank %d: last told at tick %d with the line stopped at 20 (position %d): the last change was dropped", tt.rank, told[len(told)-1], v.position)
		}
	}
}
