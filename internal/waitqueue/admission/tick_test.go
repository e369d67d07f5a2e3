package admission_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/linetest"
	"usher/internal/waitqueue/roles"
)

func TestAdmitIsFIFOAndCapped(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	linetest.JoinAll(t, s, q, linetest.Users(12)...)
	tk := linetest.Tick(5)
	tk.TokenTTL = 300 * time.Millisecond
	r := testenv.Tick(t, s, q, tk)
	if r.Admitted != 5 || r.Active != 5 || r.Waiting != 7 {
		t.Fatalf("Admit = %+v; want 5 admitted, 7 waiting", r)
	}
	// Full: nobody else gets in until a slot frees.
	if r := testenv.Tick(t, s, q, tk); r.Admitted != 0 {
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
	// After expiry (Redis time) the next five follow, in order.
	time.Sleep(tk.TokenTTL + tk.TickLength + 50*time.Millisecond)
	r = testenv.Tick(t, s, q, tk)
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

func TestAdmitRespectsMaxPerTickPauseAndTheCursor(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	for i := 1; i <= 10; i++ { // the gateway put them in line; no follower yet
		s.Ingest(ctx, q, epoch, uint64(i), fmt.Sprintf("u%d", i), 0)
	}
	tk := linetest.Tick(100)
	if r := testenv.Tick(t, s, q, tk); r.Admitted != 0 {
		t.Fatalf("Admit before the follower applied anyone = %+v, want none (FIFO needs every join before)", r)
	}
	testenv.Applied(t, s, q, epoch, 2)
	tk.Paused = true
	if r := testenv.Tick(t, s, q, tk); r.Admitted != 0 {
		t.Fatalf("paused Admit = %+v, want none", r)
	}
	tk.Paused, tk.MaxAdmitPerTick = false, 3
	if r := testenv.Tick(t, s, q, tk); r.Admitted != 2 {
		t.Fatalf("Admit with the cursor at 2 = %+v, want 2", r)
	}
	testenv.Applied(t, s, q, epoch, 100)
	if r := testenv.Tick(t, s, q, tk); r.Admitted != 3 {
		t.Fatalf("Admit with maxAdmitPerTick 3 = %+v, want 3", r)
	}
	// The line counts in epoch e1: a tick for another epoch admits nobody.
	tk.Epoch = "e2"
	if r := testenv.Tick(t, s, q, tk); r.Admitted != 0 {
		t.Fatalf("Admit in another epoch = %+v, want none", r)
	}
}

func TestOneTicksReadyAtValuesAreSpreadAcrossTheTickOnRedisTime(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	linetest.JoinAll(t, s, q, linetest.Users(10)...)
	tk := linetest.Tick(10)
	tk.TickLength = 100 * time.Millisecond
	before, _ := s.Now(ctx)
	testenv.Tick(t, s, q, tk)
	after, _ := s.Now(ctx)
	out, err := s.Outbox(ctx, q, 100)
	if err != nil || len(out) != 10 {
		t.Fatalf("Outbox = %d, %v; want 10", len(out), err)
	}
	seen := map[time.Time]bool{}
	var at []time.Time
	for _, a := range out {
		seen[a.ReadyAt] = true
		at = append(at, a.ReadyAt)
		if a.ExpiresAt.Sub(a.ReadyAt) != 300*time.Second {
			t.Errorf("%d: expiresAt-readyAt = %v, want the TTL", a.Seq, a.ExpiresAt.Sub(a.ReadyAt))
		}
		if a.TokenID != waitqueue.TokenID(q, epoch, a.Seq) {
			t.Errorf("%d: token id %q, want %q", a.Seq, a.TokenID, waitqueue.TokenID(q, epoch, a.Seq))
		}
	}
	sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
	if len(seen) != 10 || at[0].Before(before.Truncate(time.Millisecond)) || at[9].After(after.Add(100*time.Millisecond)) ||
		at[9].Sub(at[0]) < 80*time.Millisecond {
		t.Fatalf("readyAt = %v (Redis time %v..%v), want 10 distinct values spread over one tick from Redis's now", at, before, after)
	}
}

// A passthrough queue's tick admits with no jitter: everyone is ready at
// the tick's own time, which has passed by the time anyone reads it.
func TestATickWithoutJitterMakesEveryoneReadyAtItsOwnTime(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	linetest.JoinAll(t, s, q, linetest.Users(10)...)
	tk := linetest.Tick(10)
	tk.TickLength, tk.NoJitter = 100*time.Millisecond, true
	before, _ := s.Now(ctx)
	testenv.Tick(t, s, q, tk)
	after, _ := s.Now(ctx)
	out, err := s.Outbox(ctx, q, 100)
	if err != nil || len(out) != 10 {
		t.Fatalf("Outbox = %d, %v; want 10", len(out), err)
	}
	for _, a := range out {
		if !a.ReadyAt.Equal(out[0].ReadyAt) || a.ReadyAt.Before(before.Truncate(time.Millisecond)) || a.ReadyAt.After(after) {
			t.Fatalf("%d: readyAt %v (first %v, Redis time %v..%v); want all at the tick's own time", a.Seq, a.ReadyAt, out[0].ReadyAt, before, after)
		}
	}
}

// Two admitters calling at once never over-admit, never admit anyone twice,
// and between them run one tick per tickMs: the configured rate, not twice it.
func TestTwoAdmittersAdmitAtTheConfiguredRateAndNeverOverAdmit(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	linetest.JoinAll(t, s, q, linetest.Users(500)...)
	tk := linetest.Tick(1000)
	tk.TickLength, tk.MaxAdmitPerTick = 50*time.Millisecond, 5
	var wg sync.WaitGroup
	var mu sync.Mutex
	total, ticks := 0, 0
	stop := time.Now().Add(time.Second)
	for a := 0; a < 2; a++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				r, err := s.Admit(ctx, q, tk)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				total += r.Admitted
				if !r.Early {
					ticks++
				}
				mu.Unlock()
				time.Sleep(5 * time.Millisecond) // each calls 10x a tick
			}
		}()
	}
	wg.Wait()
	// One second of 50 ms ticks is 20 ticks of 5: 100 (a tick more or
	// less at the edges), where two independent schedules would make 200.
	if ticks < 19 || ticks > 22 || total != 5*ticks {
		t.Fatalf("%d ticks admitted %d in 1 s, want ~20 ticks of 5 between both admitters", ticks, total)
	}
	out, _ := s.Outbox(ctx, q, 1000)
	for i, a := range out {
		if a.Seq != uint64(i+1) {
			t.Fatalf("outbox[%d] = seq %d, want %d (FIFO, nobody twice)", i, a.Seq, i+1)
		}
	}
}

func TestTwoAdmittersNeverOverAdmit(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	linetest.JoinAll(t, s, q, linetest.Users(500)...)
	var wg sync.WaitGroup
	for a := 0; a < 2; a++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 30; i++ {
				r, err := s.Admit(ctx, q, linetest.Tick(20))
				if err != nil {
					t.Error(err)
					return
				}
				if r.Active > 20 {
					t.Errorf("active = %d > targetActive 20", r.Active)
				}
				time.Sleep(3 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	out, _ := s.Outbox(ctx, q, 1000)
	if len(out) != 20 {
		t.Fatalf("%d in outbox, want exactly 20", len(out))
	}
}

func TestAdmissionRateIsMeasured(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	linetest.JoinAll(t, s, q, linetest.Users(100)...)
	tk := linetest.Tick(1000)
	tk.TickLength, tk.MaxAdmitPerTick = 50*time.Millisecond, 5
	var last waitqueue.TickResult
	start, _ := s.Now(ctx)
	for i := 0; i < 10; i++ { // 10 ticks of 50 ms, 5 each: 100/s on an idle machine
		last = testenv.Tick(t, s, q, tk)
	}
	end, _ := s.Now(ctx)
	// What the ticks really did: 50 over the span they took (a loaded
	// machine spaces them out), one tick's length added as the script does.
	want := 50 / (end.Sub(start) + tk.TickLength).Seconds()
	st, _ := s.Stats(ctx, q)
	if st.AdmitRatePerSec < 0.8*want || st.AdmitRatePerSec > 1.25*want || st.AdmittedTotal != 50 {
		t.Fatalf("Stats = %+v, want ~%.0f/s (50 admitted over %v) and 50 admitted", st, want, end.Sub(start))
	}
	// The tick reports the same measured rate (the admitter's gauge).
	if got, want := last.AdmitRatePerSec, st.AdmitRatePerSec; got != want {
		t.Errorf("last tick's AdmitRatePerSec = %v, want %v as Stats reads it", got, want)
	}
}

// BenchmarkAdmitTick1000 is one admission tick that admits 1,000 shoppers:
// pop, token records, active set, outbox, rate window — one script.
func BenchmarkAdmitTick1000(b *testing.B) {
	ctx := context.Background()
	s := roles.New(testenv.Redis(b))
	for b.Loop() {
		b.StopTimer()
		q := testenv.Name(b)
		linetest.JoinAll(b, s, q, linetest.Users(1000)...)
		b.StartTimer()
		r, err := s.Admit(ctx, q, waitqueue.Tick{Epoch: epoch, TargetActive: 1000, TickLength: 100 * time.Millisecond,
			TokenTTL: 300 * time.Second})
		if err != nil || r.Admitted != 1000 {
			b.Fatalf("Admit = %+v, %v", r, err)
		}
	}
}

// An admission carries when its shopper joined, as the line recorded it:
// the stream's timestamp when a follower (or a replay) applied the join,
// Redis's clock when the gateway's ingest did, right after the stream
// stored it — the first application wins, a later one changes nothing.
// The admitter's time in line is measured from it.
func TestAdmissionsCarryTheJoinTime(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	stored := time.UnixMilli(time.Now().Add(-time.Hour).UnixMilli())
	before := time.Now().Add(-time.Second)
	if _, err := s.Ingest(ctx, q, epoch, 2, "ingested", 0); err != nil {
		t.Fatal(err)
	}
	evs := []waitqueue.EntryEvent{
		{StreamSeq: 1, User: "replayed", At: stored},
		{StreamSeq: 2, User: "ingested", At: stored}, // already in line: keeps its time
	}
	if _, err := s.ApplyEntries(ctx, q, epoch, 0, evs); err != nil {
		t.Fatal(err)
	}
	testenv.Tick(t, s, q, linetest.Tick(2))
	out, err := s.Outbox(ctx, q, 10)
	if err != nil || len(out) != 2 {
		t.Fatalf("Outbox = %+v, %v; want both admitted", out, err)
	}
	if got := out[0].JoinedAt; !got.Equal(stored) {
		t.Errorf("replayed join: JoinedAt %v, want the stream's %v", got, stored)
	}
	if got := out[1].JoinedAt; got.Before(before) || got.After(time.Now().Add(time.Second)) {
		t.Errorf("ingested join: JoinedAt %v, want the ingest's time (now), not the later replay's %v", got, stored)
	}
}

// SlotsFreeAt is the latest expiry among the taken slots: what the tokens
// were issued with, whatever the queue's lifetime is now; zero when none.
func TestSlotsFreeAtIsTheLastTokensExpiry(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	if got, err := s.SlotsFreeAt(ctx, q); err != nil || !got.IsZero() {
		t.Fatalf("SlotsFreeAt(no slot) = %v, %v; want zero", got, err)
	}
	linetest.JoinAll(t, s, q, linetest.Users(2)...)
	long := linetest.Tick(1)
	long.TokenTTL = 2 * time.Hour
	testenv.Tick(t, s, q, long)
	testenv.Tick(t, s, q, linetest.Tick(2)) // the second admitted with a shorter token
	first, err := s.Poll(ctx, q, 1)
	if err != nil {
		t.Fatal(err)
	}
	second, err := s.Poll(ctx, q, 2)
	if err != nil {
		t.Fatal(err)
	}
	if first.Status != waitqueue.Admitted || second.Status != waitqueue.Admitted || !second.ExpiresAt.Before(first.ExpiresAt) {
		t.Fatalf("admitted %+v and %+v; want both, the first's token the longer", first, second)
	}
	if got, err := s.SlotsFreeAt(ctx, q); err != nil || !got.Equal(first.ExpiresAt) {
		t.Fatalf("SlotsFreeAt = %v, %v; want the first token's expiry %v", got, err, first.ExpiresAt)
	}
}
