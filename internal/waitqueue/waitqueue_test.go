package waitqueue_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sort"
	"sync"
	"testing"
	"time"

	"usher/internal/testenv"
	"usher/internal/waitqueue"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Stop()
	os.Exit(code)
}

const epoch = testenv.Epoch

func newStore(t testing.TB) (*waitqueue.Store, string) {
	t.Helper()
	return waitqueue.New(testenv.Redis(t)), testenv.Name(t)
}

// tick is a tick of 20 ms with 300 s tokens.
func tick(target int) waitqueue.Tick {
	return waitqueue.Tick{Epoch: epoch, TargetActive: target, TickLength: 20 * time.Millisecond, TokenTTL: 300 * time.Second}
}

// joinAll puts users in line as the follower does (joins at stream
// sequences 1..n), so the entries cursor covers them.
func joinAll(t testing.TB, s *waitqueue.Store, q string, users ...string) {
	t.Helper()
	evs := make([]waitqueue.EntryEvent, len(users))
	for i, u := range users {
		evs[i] = waitqueue.EntryEvent{StreamSeq: uint64(i + 1), User: u}
	}
	if _, err := s.ApplyEntries(context.Background(), q, epoch, 0, evs); err != nil {
		t.Fatal(err)
	}
}

func users(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("u%d", i+1)
	}
	return out
}

func TestIngestGivesDistinctPositionsInSequenceOrder(t *testing.T) {
	s, q := newStore(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := 1; i <= 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Ingest(ctx, q, epoch, uint64(i*10), fmt.Sprintf("u%d", i), 0); err != nil {
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
	s.Ingest(ctx, q, epoch, 1, "alice", 0)
	s.Ingest(ctx, q, epoch, 2, "bob", 0)
	// A repeated event and a second join of a user already in line.
	again, _ := s.Ingest(ctx, q, epoch, 1, "alice", 0)
	dup, _ := s.Ingest(ctx, q, epoch, 3, "alice", 0)
	if again.Seq != 1 || again.Position != 1 || dup.Seq != 1 || dup.Position != 1 || dup.Waiting != 2 {
		t.Fatalf("re-ingest = %+v and %+v, want alice still first at seq 1 of 2", again, dup)
	}
	// The duplicate's ticket resolves to the live entry.
	if e, _ := s.Poll(ctx, q, 3); e.Seq != 1 || e.Position != 1 {
		t.Fatalf("Poll(alias) = %+v, want seq 1 position 1", e)
	}
}

// A sequence whose record names another user belongs to another
// incarnation of the entries stream: never one user's place for another.
func TestIngestRefusesASequenceOfAnotherUser(t *testing.T) {
	s, q := newStore(t)
	ctx := context.Background()
	s.Ingest(ctx, q, epoch, 1, "alice", 0)
	if _, err := s.Ingest(ctx, q, epoch, 1, "mallory", 0); !errors.Is(err, waitqueue.ErrConflict) {
		t.Fatalf("Ingest(seq 1 for mallory) = %v, want ErrConflict", err)
	}
	if _, err := s.Ingest(ctx, q, "e2", 2, "bob", 0); err != nil {
		t.Fatalf("Ingest before any cursor = %v", err)
	}
	joinAll(t, s, q, "alice")
	if _, err := s.Ingest(ctx, q, "e2", 3, "carol", 0); !errors.Is(err, waitqueue.ErrStale) {
		t.Fatalf("Ingest with another epoch than the line's = %v, want ErrStale", err)
	}
}

func TestPollOfUnseenSequenceIsUnknownWithTheLineLength(t *testing.T) {
	s, q := newStore(t)
	ctx := context.Background()
	s.Ingest(ctx, q, epoch, 1, "alice", 0)
	e, err := s.Poll(ctx, q, 99)
	if err != nil || e.Status != waitqueue.Unknown || e.Waiting != 1 {
		t.Fatalf("Poll(unseen) = %+v, %v; want unknown with waiting 1", e, err)
	}
	// Once the cursor has passed a sequence without a record, it is gone
	// (its tombstone expired), not on its way.
	testenv.Applied(t, s, q, epoch, 100)
	if e, _ := s.Poll(ctx, q, 99); e.Status != waitqueue.Gone {
		t.Fatalf("Poll(behind the cursor, no record) = %+v, want gone", e)
	}
}

func TestAdmitIsFIFOAndCapped(t *testing.T) {
	s, q := newStore(t)
	ctx := context.Background()
	joinAll(t, s, q, users(12)...)
	tk := tick(5)
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
	s, q := newStore(t)
	ctx := context.Background()
	for i := 1; i <= 10; i++ { // the gateway put them in line; no follower yet
		s.Ingest(ctx, q, epoch, uint64(i), fmt.Sprintf("u%d", i), 0)
	}
	tk := tick(100)
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
	s, q := newStore(t)
	ctx := context.Background()
	joinAll(t, s, q, users(10)...)
	tk := tick(10)
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
	s, q := newStore(t)
	ctx := context.Background()
	joinAll(t, s, q, users(10)...)
	tk := tick(10)
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
	s, q := newStore(t)
	ctx := context.Background()
	joinAll(t, s, q, users(500)...)
	tk := tick(1000)
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
	s, q := newStore(t)
	ctx := context.Background()
	joinAll(t, s, q, users(500)...)
	var wg sync.WaitGroup
	for a := 0; a < 2; a++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 30; i++ {
				r, err := s.Admit(ctx, q, tick(20))
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

func TestLeave(t *testing.T) {
	s, q := newStore(t)
	ctx := context.Background()
	joinAll(t, s, q, "alice", "bob")
	testenv.Tick(t, s, q, tick(1))

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
		if e, _ := s.Ingest(ctx, q, epoch, 3, "carol", 0); e.Status != waitqueue.Left {
			t.Fatalf("Ingest after Leave = %+v, want left", e)
		}
	})
	t.Run("leaving ends the entry, so joining again starts a new one", func(t *testing.T) {
		if c, _ := s.Lookup(ctx, q, "bob"); c.Status.Live() {
			t.Fatalf("Lookup(bob) = %+v after leaving, want a finished entry", c)
		}
	})
}

func TestAdmissionRateIsMeasured(t *testing.T) {
	s, q := newStore(t)
	ctx := context.Background()
	joinAll(t, s, q, users(100)...)
	tk := tick(1000)
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

// Batched calls (what the gateway uses) answer exactly like direct ones,
// and the calls of one script on one queue that wait together reach Redis
// as one command (package script's many-call form).
func TestBatchedCallsAnswerLikeDirectOnes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rdb := testenv.OwnRedis(t) // its own: the command count below is this test's alone
	direct, s := waitqueue.New(rdb), waitqueue.New(rdb)
	s.EnableBatching()
	go s.RunBatches(ctx, 2)
	q := testenv.Name(t)
	const n = 300
	var wg sync.WaitGroup
	for i := 1; i <= n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Ingest(ctx, q, epoch, uint64(i), fmt.Sprintf("u%d", i), 0); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	before := testenv.RedisCalls(t, rdb, "evalsha")
	for i := 1; i <= n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e, err := s.Poll(ctx, q, uint64(i))
			want, werr := direct.Poll(ctx, q, uint64(i))
			if err != nil || werr != nil || !reflect.DeepEqual(e, want) || e.Position != int64(i) || e.Waiting != n {
				t.Errorf("Poll(%d) = %+v, %v; direct %+v, %v; want position %d of %d", i, e, err, want, werr, i, n)
			}
			c, err := s.Lookup(ctx, q, fmt.Sprintf("u%d", i))
			if err != nil || !c.Found || c.Seq != uint64(i) || c.Status != waitqueue.Waiting {
				t.Errorf("Lookup(u%d) = %+v %v", i, c, err)
			}
		}()
	}
	wg.Wait()
	// 2n batched calls and n direct polls: the batched ones went in fewer
	// commands than calls.
	if got := testenv.RedisCalls(t, rdb, "evalsha") - before - n; got >= 2*n {
		t.Errorf("%d batched script calls took %d EVALSHA commands; want them grouped", 2*n, got)
	}
}

// Calls made once the batches have stopped (a service draining its last
// requests after its context ended) are answered straight from Redis,
// not left waiting for a batcher that is gone.
func TestCallsAfterTheBatchesStopAreAnswered(t *testing.T) {
	rdb := testenv.OwnRedis(t)
	s := waitqueue.New(rdb)
	s.EnableBatching()
	ctx, stop := context.WithCancel(context.Background())
	ended := make(chan error, 1)
	go func() { ended <- s.RunBatches(ctx, 2) }()
	q := testenv.Name(t)
	if _, err := s.Ingest(context.Background(), q, epoch, 1, "u1", 0); err != nil {
		t.Fatal(err)
	}
	stop()
	testenv.EndsWith(t, ended, 5*time.Second, nil)
	cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.Ingest(cctx, q, epoch, 2, "u2", 0); err != nil {
		t.Fatalf("Ingest after the batches stopped: %v", err)
	}
	if e, err := s.Poll(cctx, q, 2); err != nil || e.Position != 2 {
		t.Fatalf("Poll after the batches stopped = %+v, %v; want position 2", e, err)
	}
}

// A Redis that lost its scripts (a restart, a failover: SCRIPT FLUSH here)
// still answers batched calls, grouped and alone: the batcher loads them
// again.
func TestBatchedCallsSurviveALostScriptCache(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rdb := testenv.OwnRedis(t) // its own: SCRIPT FLUSH empties the whole server's cache
	s := waitqueue.New(rdb)
	s.EnableBatching()
	go s.RunBatches(ctx, 1)
	q := testenv.Name(t)
	if _, err := s.Ingest(ctx, q, epoch, 1, "u1", 0); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 50} { // one call alone, then many together
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if e, err := s.Poll(ctx, q, 1); err != nil || e.Position != 1 {
					t.Errorf("Poll after SCRIPT FLUSH (%d at once) = %+v, %v; want position 1", n, e, err)
				}
			}()
		}
		wg.Wait()
	}
}

// BenchmarkAdmitTick1000 is one admission tick that admits 1,000 shoppers:
// pop, token records, active set, outbox, rate window — one script.
func BenchmarkAdmitTick1000(b *testing.B) {
	ctx := context.Background()
	s := waitqueue.New(testenv.Redis(b))
	for b.Loop() {
		b.StopTimer()
		q := testenv.Name(b)
		joinAll(b, s, q, users(1000)...)
		b.StartTimer()
		r, err := s.Admit(ctx, q, waitqueue.Tick{Epoch: epoch, TargetActive: 1000, TickLength: 100 * time.Millisecond,
			TokenTTL: 300 * time.Second})
		if err != nil || r.Admitted != 1000 {
			b.Fatalf("Admit = %+v, %v", r, err)
		}
	}
}

// BenchmarkApplyEntries1000 applies 1,000 join events to the line in one
// script call, as the admitter's follower does.
func BenchmarkApplyEntries1000(b *testing.B) {
	ctx := context.Background()
	s := waitqueue.New(testenv.Redis(b))
	q := testenv.Name(b)
	seq := uint64(0)
	evs := make([]waitqueue.EntryEvent, 1000)
	for b.Loop() {
		prev := seq
		for i := range evs {
			seq++
			evs[i] = waitqueue.EntryEvent{StreamSeq: seq, User: fmt.Sprintf("u%d", seq)}
		}
		if _, err := s.ApplyEntries(ctx, q, epoch, prev, evs); err != nil {
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

// An admission carries when its shopper joined, as the line recorded it:
// the stream's timestamp when a follower (or a replay) applied the join,
// Redis's clock when the gateway's ingest did, right after the stream
// stored it — the first application wins, a later one changes nothing.
// The admitter's time in line is measured from it.
func TestAdmissionsCarryTheJoinTime(t *testing.T) {
	s, q := newStore(t)
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
	testenv.Tick(t, s, q, tick(2))
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
	s, q := newStore(t)
	ctx := context.Background()
	if got, err := s.SlotsFreeAt(ctx, q); err != nil || !got.IsZero() {
		t.Fatalf("SlotsFreeAt(no slot) = %v, %v; want zero", got, err)
	}
	joinAll(t, s, q, users(2)...)
	long := tick(1)
	long.TokenTTL = 2 * time.Hour
	testenv.Tick(t, s, q, long)
	testenv.Tick(t, s, q, tick(2)) // the second admitted with a shorter token
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
