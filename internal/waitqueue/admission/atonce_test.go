package admission_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/linetest"
)

func TestAnAllowedJoinPassesTheLineIntoTheNextFreeSlot(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	linetest.JoinAll(t, s, q, linetest.Users(3)...)
	linetest.ApplyKind(t, s, q, 3, waitqueue.Priority, 4, 5)
	if got := linetest.Line(t, s, q, 1, 2, 3, 4, 5); fmt.Sprint(got) != "[4 5 1 2 3]" {
		t.Fatalf("line = %v, want the allowed (4, 5) first, in join order", got)
	}
	// Counted against targetActive like anyone: one slot, one admission.
	r := testenv.Tick(t, s, q, linetest.Tick(1))
	if r.Admitted != 1 {
		t.Fatalf("tick = %+v, want 1", r)
	}
	if e, _ := s.Poll(ctx, q, 4); e.Status != waitqueue.Admitted {
		t.Fatalf("entry 4 = %s, want admitted", e.Status)
	}
}

func TestAdmitNowNeedsARecentTickThatWasNotBehind(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	tl := 20 * time.Millisecond
	at := waitqueue.AtOnce{TokenTTL: 300 * time.Second, TickLength: tl}
	linetest.JoinAll(t, s, q, "u1")
	if got, err := s.AdmitNow(ctx, q, epoch, at); !errors.Is(err, waitqueue.ErrNotCurrent) || len(got) != 0 {
		t.Fatalf("AdmitNow before any tick = %v, %v; want nobody, ErrNotCurrent (the guards only a tick runs)", got, err)
	}
	if _, err := linetest.Leave(ctx, s, q, 1, "u1"); err != nil {
		t.Fatal(err)
	}
	testenv.Tick(t, s, q, linetest.Tick(5)) // a tick that found the line current, and nobody in it
	linetest.ApplyKind(t, s, q, 1, waitqueue.InLine, 2)
	got, err := s.AdmitNow(ctx, q, epoch, at)
	if err != nil || fmt.Sprint(got) != "[2]" {
		t.Fatalf("AdmitNow = %v, %v; want [2]", got, err)
	}
	e, _ := s.Poll(ctx, q, 2)
	if e.Status != waitqueue.Admitted || e.TokenID == "" {
		t.Fatalf("entry 2 = %+v, want admitted with a token id", e)
	}
	// Capped by the tick's limit: a joiner with its one slot taken waits.
	testenv.Tick(t, s, q, linetest.Tick(1))
	linetest.ApplyKind(t, s, q, 2, waitqueue.InLine, 3)
	if got, err := s.AdmitNow(ctx, q, epoch, at); err != nil || len(got) != 0 {
		t.Fatalf("AdmitNow with no slot free = %v, %v; want nobody, no error (nothing to wait for)", got, err)
	}
	// A passthrough queue's ticks have no cap to speak of: nor has this.
	if r := testenv.Tick(t, s, q, linetest.Tick(1<<30)); r.Admitted != 1 {
		t.Fatalf("the passthrough tick admitted %d, want entry 3", r.Admitted)
	}
	linetest.ApplyKind(t, s, q, 3, waitqueue.InLine, 4, 5)
	time.Sleep(tl) // past the tick's readyAt
	if got, _ := s.AdmitNow(ctx, q, epoch, at); fmt.Sprint(got) != "[4 5]" {
		t.Fatalf("AdmitNow passthrough = %v, want [4 5]", got)
	}
	// A line whose last tick is old (no admitter works on it: two ticks and
	// a second) admits nobody.
	linetest.ApplyKind(t, s, q, 5, waitqueue.InLine, 6)
	time.Sleep(2*tl + 1100*time.Millisecond)
	if got, err := s.AdmitNow(ctx, q, epoch, at); !errors.Is(err, waitqueue.ErrNotCurrent) || len(got) != 0 {
		t.Fatalf("AdmitNow after two ticks and a second with none = %v, %v; want nobody, ErrNotCurrent", got, err)
	}
	if got, err := s.AdmitEntry(ctx, q, epoch, 6, at); !errors.Is(err, waitqueue.ErrNotCurrent) || len(got) != 0 {
		t.Fatalf("AdmitEntry with no recent tick = %v, %v; want nobody, ErrNotCurrent", got, err)
	}
	// A passthrough join goes in alone, whatever the cursor says.
	if r := testenv.Tick(t, s, q, linetest.Tick(1<<30)); r.Admitted != 1 {
		t.Fatalf("the passthrough tick admitted %d, want entry 6", r.Admitted)
	}
	if _, err := s.IngestAs(ctx, q, epoch, 9, "u9", 0, waitqueue.InLine); err != nil {
		t.Fatal(err)
	}
	linetest.ApplyKind(t, s, q, 6, waitqueue.InLine, 7)
	if got, _ := s.AdmitEntry(ctx, q, epoch, 9, at); fmt.Sprint(got) != "[9]" {
		t.Fatalf("AdmitEntry of a join ahead of the follower = %v, want [9] alone", got)
	}
	if e, _ := s.Poll(ctx, q, 7); e.Status != waitqueue.Waiting {
		t.Fatalf("entry 7 = %s, want still waiting (AdmitEntry admits its entry only)", e.Status)
	}
}

// An admission at once obeys what the queue's last tick obeyed, recorded
// by that tick: its limit of slots held — for an adaptive queue the
// controller's, which the configured targetActive says nothing of — and
// whether admission is paused (the payment breaker is open, the queue is
// paused, a drop awaits its draw). The caller names neither.
func TestAdmitNowObeysWhatTheLastTickObeyed(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	at := waitqueue.AtOnce{TokenTTL: time.Minute, TickLength: 20 * time.Millisecond}
	linetest.JoinAll(t, s, q, "u1", "u2")
	if r := testenv.Tick(t, s, q, linetest.Tick(2)); r.Admitted != 2 {
		t.Fatalf("the tick at limit 2 admitted %d", r.Admitted)
	}
	linetest.ApplyKind(t, s, q, 2, waitqueue.InLine, 3)
	if got, err := s.AdmitNow(ctx, q, epoch, at); err != nil || len(got) != 0 {
		t.Fatalf("AdmitNow with the tick's 2 slots held = %v, %v; want nobody", got, err)
	}
	if got, err := s.AdmitEntry(ctx, q, epoch, 3, at); err != nil || len(got) != 0 {
		t.Fatalf("AdmitEntry with the tick's 2 slots held = %v, %v; want nobody", got, err)
	}
	// Paused: nobody, wherever the limit stands.
	paused := linetest.Tick(10)
	paused.Paused = true
	testenv.Tick(t, s, q, paused)
	if got, err := s.AdmitNow(ctx, q, epoch, at); err != nil || len(got) != 0 {
		t.Fatalf("AdmitNow after a paused tick = %v, %v; want nobody", got, err)
	}
	if got, err := s.AdmitEntry(ctx, q, epoch, 3, at); err != nil || len(got) != 0 {
		t.Fatalf("AdmitEntry after a paused tick = %v, %v; want nobody", got, err)
	}
	// A drop awaiting its draw: the tick admits nobody, nor does this.
	drop := linetest.Tick(10)
	drop.AwaitDraw = true
	testenv.Tick(t, s, q, drop)
	if got, err := s.AdmitNow(ctx, q, epoch, at); err != nil || len(got) != 0 {
		t.Fatalf("AdmitNow while a drop awaits its draw = %v, %v; want nobody", got, err)
	}
	// Drawn (the admitter draws just before its tick, and reveals the draw
	// before that tick records anything): the next tick would admit, and
	// so does this, at once.
	_, _, version, err := s.PreQueue(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Draw(ctx, q, epoch, version, nil, "d"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.AdmitNow(ctx, q, epoch, at); err != nil || fmt.Sprint(got) != "[3]" {
		t.Fatalf("AdmitNow once the drop is drawn = %v, %v; want [3]", got, err)
	}
}

// The join that found the line empty may find it full when its admission
// at once runs: the follower applied other gateways' joins meanwhile, or
// replayed a whole line Redis had lost (redis-flushall admitted 295 of a
// 5-per-tick queue in one call). The head of that line is the ticks' to
// admit, at the configured rate: an admission at once takes what is left
// of the current tick's maxAdmitPerTick, the tick's own admissions
// included.
func TestAdmitNowKeepsTheTicksRate(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	linetest.JoinAll(t, s, q, linetest.Users(20)...)
	tl := 10 * time.Second // one long tick: every call below falls in it
	at := waitqueue.AtOnce{TokenTTL: 300 * time.Second, TickLength: tl}
	tk := linetest.Tick(2000)
	tk.TickLength, tk.MaxAdmitPerTick = tl, 5
	if r := testenv.Tick(t, s, q, tk); r.Admitted != 5 {
		t.Fatalf("the tick admitted %d, want 5", r.Admitted)
	}
	if got, err := s.AdmitNow(ctx, q, epoch, at); err != nil || len(got) != 0 {
		t.Fatalf("AdmitNow after a tick that took its 5 = %v, %v; want nobody (the next tick admits)", got, err)
	}
	// A tick that admitted nobody (the line was empty) leaves the whole
	// tick to admissions at once, and no more.
	s2, q2 := linetest.New(t)
	testenv.Tick(t, s2, q2, tk)
	linetest.JoinAll(t, s2, q2, linetest.Users(20)...)
	got, err := s2.AdmitNow(ctx, q2, epoch, at)
	if err != nil || fmt.Sprint(got) != "[1 2 3 4 5]" {
		t.Fatalf("AdmitNow of a line of 20, 5 per tick = %v, %v; want [1 2 3 4 5]", got, err)
	}
	if got, err := s2.AdmitNow(ctx, q2, epoch, at); err != nil || len(got) != 0 {
		t.Fatalf("a second AdmitNow in the same tick = %v, %v; want nobody", got, err)
	}
	// No maxAdmitPerTick: the tick's limit is the only cap, as for a tick.
	s3, q3 := linetest.New(t)
	testenv.Tick(t, s3, q3, waitqueue.Tick{Epoch: epoch, TargetActive: 8, TickLength: tl, TokenTTL: time.Minute})
	linetest.JoinAll(t, s3, q3, linetest.Users(10)...)
	if got, _ := s3.AdmitNow(ctx, q3, epoch, at); fmt.Sprint(got) != "[1 2 3 4 5 6 7 8]" {
		t.Fatalf("AdmitNow with no per-tick cap, a limit of 8 = %v, want [1 2 3 4 5 6 7 8]", got)
	}
}

// A reservation older than one the line has used is refused: that newer
// step's report may have released its units already. The admission at
// once that holds it admits nobody and says to try again.
func TestAnOlderReservationThanOneUsedAdmitsNobody(t *testing.T) {
	ctx := context.Background()
	s, q := linetest.New(t)
	share := waitqueue.Share{SKUs: []string{"sku-" + q}}
	if err := s.SetStock(ctx, q, false, waitqueue.StockLevel{SKU: share.SKUs[0], Available: 4, Version: 1}); err != nil {
		t.Fatal(err)
	}
	tk := waitqueue.Tick{Epoch: epoch, TargetActive: 4, TickLength: 5 * time.Millisecond, TokenTTL: time.Minute,
		StockAware: true, Share: share}
	testenv.Tick(t, s, q, tk)
	// Two steps reserve; the later one is used first.
	res1, err := s.Reserve(ctx, q, share, 1)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Tick(t, s, q, tk) // reserves again, and uses that
	linetest.ApplyKind(t, s, q, 0, waitqueue.InLine, 1)
	if got, err := s.AdmitNowWith(ctx, q, epoch, waitqueue.AtOnce{TokenTTL: time.Minute, TickLength: 5 * time.Millisecond,
		StockAware: true, Share: share}, res1); err == nil || len(got) != 0 {
		t.Fatalf("AdmitNow on the older reservation = %v, %v; want nobody, ErrNotCurrent", got, err)
	}
}
