package waitqueue_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"usher/shared/testenv"
	"usher/shared/waitqueue"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Stop()
	os.Exit(code)
}

func newStore(t *testing.T) (*waitqueue.Store, string) {
	t.Helper()
	return waitqueue.New(testenv.Redis(t)), testenv.Name(t)
}

func tick(now time.Time, target int) waitqueue.Tick {
	return waitqueue.Tick{Now: now, TargetActive: target, TickLength: 100 * time.Millisecond,
		TokenTTL: 300 * time.Second, Watermark: 1 << 62}
}

func TestIngestGivesDistinctPositionsInSequenceOrder(t *testing.T) {
	s, q := newStore(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := 1; i <= 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Ingest(ctx, q, uint64(i*10), fmt.Sprintf("u%d", i)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for i := 1; i <= 100; i++ {
		e, err := s.Poll(ctx, q, uint64(i*10))
		if err != nil || e.Status != waitqueue.Waiting || e.Position != int64(i) || e.Waiting != 100 {
			t.Fatalf("Poll(seq %d) = %+v, %v; want waiting at %d of 100", i*10, e, err, i)
		}
	}
}

func TestIngestNeverMovesAnyoneBack(t *testing.T) {
	s, q := newStore(t)
	ctx := context.Background()
	s.Ingest(ctx, q, 1, "alice")
	s.Ingest(ctx, q, 2, "bob")
	// A redelivered event and a second join of a user already in line.
	again, _ := s.Ingest(ctx, q, 1, "alice")
	dup, _ := s.Ingest(ctx, q, 3, "alice")
	if again.Seq != 1 || again.Position != 1 || dup.Seq != 1 || dup.Position != 1 || dup.Waiting != 2 {
		t.Fatalf("re-ingest = %+v and %+v, want alice still first at seq 1 of 2", again, dup)
	}
	// The duplicate's ticket resolves to the live entry.
	if e, _ := s.Poll(ctx, q, 3); e.Seq != 1 || e.Position != 1 {
		t.Fatalf("Poll(alias) = %+v, want seq 1 position 1", e)
	}
}

func TestPollOfUnseenSequenceIsUnknownWithTheLineLength(t *testing.T) {
	s, q := newStore(t)
	ctx := context.Background()
	s.Ingest(ctx, q, 1, "alice")
	e, err := s.Poll(ctx, q, 99)
	if err != nil || e.Status != waitqueue.Unknown || e.Waiting != 1 {
		t.Fatalf("Poll(unseen) = %+v, %v; want unknown with waiting 1", e, err)
	}
}

func TestAdmitIsFIFOAndCapped(t *testing.T) {
	s, q := newStore(t)
	ctx := context.Background()
	for i := 1; i <= 12; i++ {
		s.Ingest(ctx, q, uint64(i), fmt.Sprintf("u%d", i))
	}
	now := time.UnixMilli(1_800_000_000_000)
	r, err := s.Admit(ctx, q, tick(now, 5))
	if err != nil || r.Admitted != 5 || r.Active != 5 || r.Waiting != 7 {
		t.Fatalf("Admit = %+v, %v; want 5 admitted, 7 waiting", r, err)
	}
	// Full: nobody else gets in until a slot frees.
	if r, _ := s.Admit(ctx, q, tick(now.Add(time.Second), 5)); r.Admitted != 0 {
		t.Fatalf("second Admit = %+v, want 0 admitted while 5 hold slots", r)
	}
	for i := 1; i <= 12; i++ {
		e, _ := s.Poll(ctx, q, uint64(i))
		want := waitqueue.Waiting
		if i <= 5 {
			want = waitqueue.Admitted
		}
		if e.Status != want {
			t.Errorf("seq %d: status %s, want %s", i, e.Status, want)
		}
	}
	// After expiry the next five follow, in order.
	later := now.Add(301 * time.Second)
	r, _ = s.Admit(ctx, q, tick(later, 5))
	if r.Expired != 5 || r.Admitted != 5 {
		t.Fatalf("Admit after TTL = %+v, want 5 expired and 5 admitted", r)
	}
	for i := 1; i <= 10; i++ {
		e, _ := s.Poll(ctx, q, uint64(i))
		want := waitqueue.Admitted
		if i <= 5 {
			want = waitqueue.Expired
		}
		if e.Status != want {
			t.Errorf("after expiry seq %d: status %s, want %s", i, e.Status, want)
		}
	}
}

func TestAdmitRespectsMaxPerTickPauseAndWatermark(t *testing.T) {
	s, q := newStore(t)
	ctx := context.Background()
	for i := 1; i <= 10; i++ {
		s.Ingest(ctx, q, uint64(i), fmt.Sprintf("u%d", i))
	}
	now := time.UnixMilli(1_800_000_000_000)
	tk := tick(now, 100)
	tk.Paused = true
	if r, _ := s.Admit(ctx, q, tk); r.Admitted != 0 {
		t.Fatalf("paused Admit = %+v, want none", r)
	}
	tk.Paused, tk.MaxAdmitPerTick, tk.Watermark = false, 3, 2
	if r, _ := s.Admit(ctx, q, tk); r.Admitted != 2 {
		t.Fatalf("Admit below watermark 2 = %+v, want 2", r)
	}
	tk.Watermark = 100
	if r, _ := s.Admit(ctx, q, tk); r.Admitted != 3 {
		t.Fatalf("Admit with maxAdmitPerTick 3 = %+v, want 3", r)
	}
}

func TestOneTicksReadyAtValuesAreSpreadAcrossTheTick(t *testing.T) {
	s, q := newStore(t)
	ctx := context.Background()
	for i := 1; i <= 10; i++ {
		s.Ingest(ctx, q, uint64(i), fmt.Sprintf("u%d", i))
	}
	now := time.UnixMilli(1_800_000_000_000)
	if _, err := s.Admit(ctx, q, tick(now, 10)); err != nil {
		t.Fatal(err)
	}
	out, err := s.Outbox(ctx, q, 100)
	if err != nil || len(out) != 10 {
		t.Fatalf("Outbox = %d, %v; want 10", len(out), err)
	}
	seen := map[time.Time]bool{}
	var offs []time.Duration
	for _, a := range out {
		seen[a.ReadyAt] = true
		offs = append(offs, a.ReadyAt.Sub(now))
		if a.ExpiresAt.Sub(a.ReadyAt) != 300*time.Second {
			t.Errorf("%d: expiresAt-readyAt = %v, want the TTL", a.Seq, a.ExpiresAt.Sub(a.ReadyAt))
		}
	}
	sort.Slice(offs, func(i, j int) bool { return offs[i] < offs[j] })
	if len(seen) != 10 || offs[0] < 0 || offs[9] >= 100*time.Millisecond || offs[9]-offs[0] < 80*time.Millisecond {
		t.Fatalf("readyAt offsets = %v, want 10 distinct values spread over [0,100ms)", offs)
	}
}

func TestTwoAdmittersNeverOverAdmit(t *testing.T) {
	s, q := newStore(t)
	ctx := context.Background()
	for i := 1; i <= 500; i++ {
		s.Ingest(ctx, q, uint64(i), fmt.Sprintf("u%d", i))
	}
	now := time.UnixMilli(1_800_000_000_000)
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	for a := 0; a < 2; a++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				r, err := s.Admit(ctx, q, tick(now, 20))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				total += r.Admitted
				mu.Unlock()
				if r.Active > 20 {
					t.Errorf("active = %d > targetActive 20", r.Active)
				}
			}
		}()
	}
	wg.Wait()
	out, _ := s.Outbox(ctx, q, 1000)
	if total != 20 || len(out) != 20 {
		t.Fatalf("admitted %d with %d in outbox, want exactly 20", total, len(out))
	}
	for i, a := range out {
		if a.Seq != uint64(i+1) {
			t.Fatalf("outbox[%d] = seq %d, want %d (FIFO, nobody twice)", i, a.Seq, i+1)
		}
	}
}

func TestLeave(t *testing.T) {
	s, q := newStore(t)
	ctx := context.Background()
	s.Ingest(ctx, q, 1, "alice")
	s.Ingest(ctx, q, 2, "bob")
	s.Admit(ctx, q, tick(time.UnixMilli(1_800_000_000_000), 1))

	t.Run("an admitted shopper frees the slot", func(t *testing.T) {
		if st, _ := s.Leave(ctx, q, 1, "alice"); st != waitqueue.Admitted {
			t.Fatalf("Leave(alice) = %s, want admitted", st)
		}
		if st, _ := s.Stats(ctx, q); st.Active != 0 {
			t.Fatalf("active after leave = %d, want 0", st.Active)
		}
	})
	t.Run("a waiting shopper leaves the line", func(t *testing.T) {
		s.Leave(ctx, q, 2, "bob")
		if st, _ := s.Stats(ctx, q); st.Waiting != 0 {
			t.Fatalf("waiting after leave = %d, want 0", st.Waiting)
		}
	})
	t.Run("a join still on its way after leaving is not ingested", func(t *testing.T) {
		s.Leave(ctx, q, 3, "carol")
		if e, _ := s.Ingest(ctx, q, 3, "carol"); e.Status != waitqueue.Left {
			t.Fatalf("Ingest after Leave = %+v, want left", e)
		}
	})
	t.Run("leaving ends the entry, so joining again starts a new one", func(t *testing.T) {
		if _, st, _, _ := s.Lookup(ctx, q, "bob"); st.Live() {
			t.Fatalf("Lookup(bob) = %s after leaving, want a finished entry", st)
		}
	})
}

func TestAdmissionRateIsMeasured(t *testing.T) {
	s, q := newStore(t)
	ctx := context.Background()
	for i := 1; i <= 100; i++ {
		s.Ingest(ctx, q, uint64(i), fmt.Sprintf("u%d", i))
	}
	now := time.UnixMilli(1_800_000_000_000)
	var last waitqueue.TickResult
	for i := 0; i < 10; i++ { // 10 ticks of 100 ms, 5 each: 50/s
		tk := tick(now.Add(time.Duration(i)*100*time.Millisecond), 1000)
		tk.MaxAdmitPerTick = 5
		last, _ = s.Admit(ctx, q, tk)
	}
	st, _ := s.Stats(ctx, q)
	if st.AdmitRatePerSec < 45 || st.AdmitRatePerSec > 55 || st.AdmittedTotal != 50 {
		t.Fatalf("Stats = %+v, want ~50/s and 50 admitted", st)
	}
	// The tick reports the same measured rate (the admitter's gauge).
	if got, want := last.AdmitRatePerSec, st.AdmitRatePerSec; got != want {
		t.Errorf("last tick's AdmitRatePerSec = %v, want %v as Stats reads it", got, want)
	}
}

// Batched calls (what the gateway uses) answer exactly like direct ones.
func TestBatchedCallsAnswerLikeDirectOnes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := waitqueue.New(testenv.Redis(t))
	s.EnableBatching()
	go s.RunBatches(ctx, 2)
	q := testenv.Name(t)
	var wg sync.WaitGroup
	for i := 1; i <= 300; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Ingest(ctx, q, uint64(i), fmt.Sprintf("u%d", i)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for i := 1; i <= 300; i += 37 {
		e, err := s.Poll(ctx, q, uint64(i))
		if err != nil || e.Position != int64(i) || e.Waiting != 300 {
			t.Fatalf("Poll(%d) = %+v, %v; want position %d of 300", i, e, err, i)
		}
		seq, st, ok, err := s.Lookup(ctx, q, fmt.Sprintf("u%d", i))
		if err != nil || !ok || seq != uint64(i) || st != waitqueue.Waiting {
			t.Fatalf("Lookup(u%d) = %d %s %v %v", i, seq, st, ok, err)
		}
	}
}

// BenchmarkAdmitTick1000 is one admission tick that admits 1,000 shoppers:
// pop, token records, active set, outbox, rate window — one script.
func BenchmarkAdmitTick1000(b *testing.B) {
	ctx := context.Background()
	s := waitqueue.New(testenv.Redis(b))
	now := time.UnixMilli(1_800_000_000_000)
	for b.Loop() {
		b.StopTimer()
		q := testenv.Name(b)
		joins := make([]waitqueue.Joined, 1000)
		for i := range joins {
			joins[i] = waitqueue.Joined{Queue: q, Seq: uint64(i + 1), User: fmt.Sprintf("u%d", i)}
		}
		if err := s.IngestBatch(ctx, joins); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		r, err := s.Admit(ctx, q, waitqueue.Tick{Now: now, TargetActive: 1000, TickLength: 100 * time.Millisecond,
			TokenTTL: 300 * time.Second, Watermark: 1 << 62})
		if err != nil || r.Admitted != 1000 {
			b.Fatalf("Admit = %+v, %v", r, err)
		}
	}
}

// BenchmarkIngestBatch1000 moves 1,000 join events into the line in one
// pipelined round trip, as the admitter does.
func BenchmarkIngestBatch1000(b *testing.B) {
	ctx := context.Background()
	s := waitqueue.New(testenv.Redis(b))
	q := testenv.Name(b)
	seq := uint64(0)
	joins := make([]waitqueue.Joined, 1000)
	for b.Loop() {
		for i := range joins {
			seq++
			joins[i] = waitqueue.Joined{Queue: q, Seq: seq, User: fmt.Sprintf("u%d", seq)}
		}
		if err := s.IngestBatch(ctx, joins); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*1000)/b.Elapsed().Seconds(), "joins/s")
}

func TestETAUsesTheMeasuredRate(t *testing.T) {
	tests := []struct {
		position  int64
		rate      float64
		want      int64
		wantKnown bool
	}{
		{1, 140, 1, true},
		{1400, 140, 10, true},
		{1401, 140, 11, true},
		{10, 0, 0, false}, // nothing admitted yet: no promise
		{0, 0, 0, true},
	}
	for _, tt := range tests {
		got, known := waitqueue.ETA(tt.position, tt.rate)
		if got != tt.want || known != tt.wantKnown {
			t.Errorf("ETA(%d, %v) = %d, %v; want %d, %v", tt.position, tt.rate, got, known, tt.want, tt.wantKnown)
		}
	}
}
