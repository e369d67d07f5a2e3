package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"usher/shared/catalog"
	"usher/shared/event"
	"usher/shared/waitqueue"
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

func newBenchHub(l line) *hub {
	t := timing{positions: time.Second, heartbeat: 15 * time.Second, writeTimeout: time.Second, retry: time.Second, resyncEvery: 30}
	return newHub(slog.New(slog.NewTextHandler(io.Discard, nil)), l, openQueues{}, time.Now, t, newMetrics())
}

// The hub's position tick, per client: with the head advancing by 14 each
// tick, every client's position changes and its stream is woken.
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
			h.refresh(ctx, "q") // first ranks
			b.ResetTimer()
			for b.Loop() {
				l.admitted += 14
				h.refresh(ctx, "q")
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
	for _, tt := range tests {
		if tt.base >= 0 {
			c.rebase(tt.rank, tt.base)
		}
		c.advance(tt.admittedTotal, 500, 2)
		v, _, _ := c.state()
		if v.position != tt.wantPosition || v.waiting != 500 {
			t.Errorf("%s: position %d of %d, want %d of 500", tt.name, v.position, v.waiting, tt.wantPosition)
		}
		if want := (tt.wantPosition + 1) / 2; v.eta != want || !v.etaKnown {
			t.Errorf("%s: eta %d (known %v), want %d at 2/s", tt.name, v.eta, v.etaKnown, want)
		}
	}
}
