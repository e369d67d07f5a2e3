package waitqueue_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"usher/internal/keyspace"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
)

// applyKind applies joins of one kind at the given stream sequences.
func applyKind(t *testing.T, s *waitqueue.Store, q string, prev uint64, kind waitqueue.JoinKind, seqs ...uint64) {
	t.Helper()
	evs := make([]waitqueue.EntryEvent, len(seqs))
	for i, seq := range seqs {
		evs[i] = waitqueue.EntryEvent{StreamSeq: seq, User: fmt.Sprintf("u%d", seq), Kind: kind}
	}
	if _, err := s.ApplyEntries(context.Background(), q, epoch, prev, evs); err != nil {
		t.Fatal(err)
	}
}

// line reads the waiting line front to back as sequences.
func line(t *testing.T, s *waitqueue.Store, q string, seqs ...uint64) []uint64 {
	t.Helper()
	out := make([]uint64, 0, len(seqs))
	for pos := int64(1); pos <= int64(len(seqs)); pos++ {
		for _, seq := range seqs {
			e, err := s.Poll(context.Background(), q, seq)
			if err != nil {
				t.Fatal(err)
			}
			if e.Status == waitqueue.Waiting && e.Position == pos {
				out = append(out, seq)
			}
		}
	}
	return out
}

func TestThePreQueueHasNoPlaceUntilTheDrawGivesOne(t *testing.T) {
	s, q := newStore(t)
	ctx := context.Background()
	applyKind(t, s, q, 0, waitqueue.PreQueue, 1, 2, 3, 4)

	e, err := s.Poll(ctx, q, 3)
	if err != nil || e.Status != waitqueue.PreQueued || e.Position != 0 {
		t.Fatalf("Poll of a pre-queued shopper = %+v, %v; want status pre, no position", e, err)
	}
	// Rejoining (a refresh, a second tab) changes nothing: it resolves to
	// the same entry, still without a place.
	again, err := s.IngestAs(ctx, q, epoch, 9, "u3", 0, waitqueue.PreQueue)
	if err != nil || again.Seq != 3 || again.Status != waitqueue.PreQueued {
		t.Fatalf("rejoin = %+v, %v; want entry 3, pre-queued", again, err)
	}
	// Nobody is admitted before the draw, however many slots are free.
	tk := tick(100)
	tk.AwaitDraw = true
	if r := testenv.Tick(t, s, q, tk); r.Admitted != 0 {
		t.Fatalf("tick before the draw = %+v, want nobody admitted", r)
	}
	st, _ := s.Stats(ctx, q)
	if st.PreQueue != 4 || st.Waiting != 0 || st.Drawn {
		t.Fatalf("Stats before the draw = %+v, want 4 pre-queued, none waiting, not drawn", st)
	}
	pre, drawn, version, err := s.PreQueue(ctx, q)
	if err != nil || drawn || len(pre) != 4 || pre[0].User != "u1" {
		t.Fatalf("PreQueue = %+v, %v, %v", pre, drawn, err)
	}

	// The draw places them in the order given, ahead of every later join.
	// A list that is not the pre-queue read is refused: read it again.
	for _, wrong := range [][]uint64{{3, 1, 4}, {3, 1, 4, 2, 7}} {
		if _, err := s.Draw(ctx, q, epoch, version, wrong, "d"); !errors.Is(err, waitqueue.ErrDrawChanged) {
			t.Fatalf("Draw(%v) = %v, want ErrDrawChanged", wrong, err)
		}
	}
	n, err := s.Draw(ctx, q, epoch, version, []uint64{3, 1, 4, 2}, "digest")
	if err != nil || n != 4 {
		t.Fatalf("Draw = %d, %v; want 4 placed", n, err)
	}
	if d, _ := s.Drawing(ctx, q); !d.Drawn || d.Entries != 4 || d.Cursor != 4 || d.Digest != "digest" {
		t.Fatalf("Drawing = %+v, want 4 drawn at cursor 4 with the digest", d)
	}
	applyKind(t, s, q, 4, waitqueue.PreQueue, 5) // after the opening: FIFO
	applyKind(t, s, q, 5, waitqueue.InLine, 6)
	if got := line(t, s, q, 1, 2, 3, 4, 5, 6); fmt.Sprint(got) != "[3 1 4 2 5 6]" {
		t.Fatalf("line after the draw = %v, want [3 1 4 2 5 6]", got)
	}
	// It happens once.
	if _, err := s.Draw(ctx, q, epoch, version, nil, "d"); !errors.Is(err, waitqueue.ErrDrawn) {
		t.Fatalf("second Draw = %v; want ErrDrawn", err)
	}
	if got := line(t, s, q, 1, 2, 3, 4, 5, 6); fmt.Sprint(got) != "[3 1 4 2 5 6]" {
		t.Fatalf("line after a second draw = %v, want it unchanged", got)
	}
	// The drawn wait with status pre until the admitter settles them; a
	// drawn shopper who leaves before is out of line all the same.
	if _, err := s.Leave(ctx, q, 4, "u4"); err != nil {
		t.Fatal(err)
	}
	if got := line(t, s, q, 1, 2, 3, 4, 5, 6); fmt.Sprint(got) != "[3 1 2 5 6]" {
		t.Fatalf("line after 4 left = %v, want [3 1 2 5 6]", got)
	}
	if left, err := s.SettleDraw(ctx, q); err != nil || left != 0 {
		t.Fatalf("SettleDraw = %d, %v; want none left", left, err)
	}
	if got := line(t, s, q, 1, 2, 3, 4, 5, 6); fmt.Sprint(got) != "[3 1 2 5 6]" {
		t.Fatalf("line after settling = %v, want it unchanged", got)
	}
	// The ticks admit in the drawn order.
	tk.TargetActive = 2
	r := testenv.Tick(t, s, q, tk)
	if r.Admitted != 2 {
		t.Fatalf("tick after the draw = %+v, want 2 admitted", r)
	}
	for _, seq := range []uint64{3, 1} {
		if e, _ := s.Poll(ctx, q, seq); e.Status != waitqueue.Admitted {
			t.Fatalf("entry %d = %s, want admitted first (drawn first)", seq, e.Status)
		}
	}
}

func TestTheDrawPlacesExactlyThePreQueueOfTheEntriesCursor(t *testing.T) {
	s, q := newStore(t)
	ctx := context.Background()
	applyKind(t, s, q, 0, waitqueue.PreQueue, 1, 2, 3)
	// 2 left before the draw.
	if _, err := s.ApplyEntries(ctx, q, epoch, 3, []waitqueue.EntryEvent{{StreamSeq: 4, Leave: true, Entry: 2, User: "u2"}}); err != nil {
		t.Fatal(err)
	}
	// The gateway put 5 in the pre-queue ahead of the follower: the draw
	// waits for the follower, so that the drawn pre-queue is the stream's
	// up to the cursor.
	if _, err := s.IngestAs(ctx, q, epoch, 5, "u5", 0, waitqueue.PreQueue); err != nil {
		t.Fatal(err)
	}
	pre, _, version, _ := s.PreQueue(ctx, q)
	if len(pre) != 3 || pre[0].Seq != 1 || pre[1].Seq != 3 || pre[2].Seq != 5 {
		t.Fatalf("PreQueue = %+v, want 1, 3, 5 in join order", pre)
	}
	if _, err := s.Draw(ctx, q, epoch, version, []uint64{5, 3, 1}, "d"); !errors.Is(err, waitqueue.ErrDrawChanged) {
		t.Fatalf("Draw ahead of the follower = %v, want ErrDrawChanged", err)
	}
	applyKind(t, s, q, 4, waitqueue.PreQueue, 5)
	// Someone joins the pre-queue after it was read: the order read is
	// refused.
	applyKind(t, s, q, 5, waitqueue.PreQueue, 6)
	if _, err := s.Draw(ctx, q, epoch, version, []uint64{5, 3, 1}, "d"); !errors.Is(err, waitqueue.ErrDrawChanged) {
		t.Fatalf("Draw of a pre-queue that changed since it was read = %v, want ErrDrawChanged", err)
	}
	s.Leave(ctx, q, 6, "u6")
	pre, _, version, _ = s.PreQueue(ctx, q)
	if len(pre) != 3 {
		t.Fatalf("PreQueue = %+v, want 1, 3, 5", pre)
	}
	if n, err := s.Draw(ctx, q, epoch, version, []uint64{5, 3, 1}, "d"); err != nil || n != 3 {
		t.Fatalf("Draw = %d, %v; want 3", n, err)
	}
	if got := line(t, s, q, 1, 3, 5); fmt.Sprint(got) != "[5 3 1]" {
		t.Fatalf("line = %v, want [5 3 1]", got)
	}
	if e, _ := s.Poll(ctx, q, 2); e.Status != waitqueue.Left {
		t.Fatalf("entry 2 = %s, want left (a draw does not bring anyone back)", e.Status)
	}
	st, _ := s.Stats(ctx, q)
	if st.PreQueue != 0 || !st.Drawn || st.Waiting != 3 {
		t.Fatalf("Stats = %+v, want the pre-queue empty, drawn, 3 waiting", st)
	}
}

func TestAnAllowedJoinPassesTheLineIntoTheNextFreeSlot(t *testing.T) {
	s, q := newStore(t)
	ctx := context.Background()
	joinAll(t, s, q, users(3)...)
	applyKind(t, s, q, 3, waitqueue.Priority, 4, 5)
	if got := line(t, s, q, 1, 2, 3, 4, 5); fmt.Sprint(got) != "[4 5 1 2 3]" {
		t.Fatalf("line = %v, want the allowed (4, 5) first, in join order", got)
	}
	// Counted against targetActive like anyone: one slot, one admission.
	r := testenv.Tick(t, s, q, tick(1))
	if r.Admitted != 1 {
		t.Fatalf("tick = %+v, want 1", r)
	}
	if e, _ := s.Poll(ctx, q, 4); e.Status != waitqueue.Admitted {
		t.Fatalf("entry 4 = %s, want admitted", e.Status)
	}
}

func TestAdmitNowNeedsARecentTickThatWasNotBehind(t *testing.T) {
	s, q := newStore(t)
	ctx := context.Background()
	tl := 20 * time.Millisecond
	at := waitqueue.AtOnce{TokenTTL: 300 * time.Second, TickLength: tl}
	joinAll(t, s, q, "u1")
	if got, err := s.AdmitNow(ctx, q, epoch, at); !errors.Is(err, waitqueue.ErrNotCurrent) || len(got) != 0 {
		t.Fatalf("AdmitNow before any tick = %v, %v; want nobody, ErrNotCurrent (the guards only a tick runs)", got, err)
	}
	if _, err := s.Leave(ctx, q, 1, "u1"); err != nil {
		t.Fatal(err)
	}
	testenv.Tick(t, s, q, tick(5)) // a tick that found the line current, and nobody in it
	applyKind(t, s, q, 1, waitqueue.InLine, 2)
	got, err := s.AdmitNow(ctx, q, epoch, at)
	if err != nil || fmt.Sprint(got) != "[2]" {
		t.Fatalf("AdmitNow = %v, %v; want [2]", got, err)
	}
	e, _ := s.Poll(ctx, q, 2)
	if e.Status != waitqueue.Admitted || e.TokenID == "" {
		t.Fatalf("entry 2 = %+v, want admitted with a token id", e)
	}
	// Capped by the tick's limit: a joiner with its one slot taken waits.
	testenv.Tick(t, s, q, tick(1))
	applyKind(t, s, q, 2, waitqueue.InLine, 3)
	if got, err := s.AdmitNow(ctx, q, epoch, at); err != nil || len(got) != 0 {
		t.Fatalf("AdmitNow with no slot free = %v, %v; want nobody, no error (nothing to wait for)", got, err)
	}
	// A passthrough queue's ticks have no cap to speak of: nor has this.
	if r := testenv.Tick(t, s, q, tick(1<<30)); r.Admitted != 1 {
		t.Fatalf("the passthrough tick admitted %d, want entry 3", r.Admitted)
	}
	applyKind(t, s, q, 3, waitqueue.InLine, 4, 5)
	time.Sleep(tl) // past the tick's readyAt
	if got, _ := s.AdmitNow(ctx, q, epoch, at); fmt.Sprint(got) != "[4 5]" {
		t.Fatalf("AdmitNow passthrough = %v, want [4 5]", got)
	}
	// A line whose last tick is old (no admitter works on it: two ticks and
	// a second) admits nobody.
	applyKind(t, s, q, 5, waitqueue.InLine, 6)
	time.Sleep(2*tl + 1100*time.Millisecond)
	if got, err := s.AdmitNow(ctx, q, epoch, at); !errors.Is(err, waitqueue.ErrNotCurrent) || len(got) != 0 {
		t.Fatalf("AdmitNow after two ticks and a second with none = %v, %v; want nobody, ErrNotCurrent", got, err)
	}
	if got, err := s.AdmitEntry(ctx, q, epoch, 6, at); !errors.Is(err, waitqueue.ErrNotCurrent) || len(got) != 0 {
		t.Fatalf("AdmitEntry with no recent tick = %v, %v; want nobody, ErrNotCurrent", got, err)
	}
	// A passthrough join goes in alone, whatever the cursor says.
	if r := testenv.Tick(t, s, q, tick(1<<30)); r.Admitted != 1 {
		t.Fatalf("the passthrough tick admitted %d, want entry 6", r.Admitted)
	}
	if _, err := s.IngestAs(ctx, q, epoch, 9, "u9", 0, waitqueue.InLine); err != nil {
		t.Fatal(err)
	}
	applyKind(t, s, q, 6, waitqueue.InLine, 7)
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
	s, q := newStore(t)
	ctx := context.Background()
	at := waitqueue.AtOnce{TokenTTL: time.Minute, TickLength: 20 * time.Millisecond}
	joinAll(t, s, q, "u1", "u2")
	if r := testenv.Tick(t, s, q, tick(2)); r.Admitted != 2 {
		t.Fatalf("the tick at limit 2 admitted %d", r.Admitted)
	}
	applyKind(t, s, q, 2, waitqueue.InLine, 3)
	if got, err := s.AdmitNow(ctx, q, epoch, at); err != nil || len(got) != 0 {
		t.Fatalf("AdmitNow with the tick's 2 slots held = %v, %v; want nobody", got, err)
	}
	if got, err := s.AdmitEntry(ctx, q, epoch, 3, at); err != nil || len(got) != 0 {
		t.Fatalf("AdmitEntry with the tick's 2 slots held = %v, %v; want nobody", got, err)
	}
	// Paused: nobody, wherever the limit stands.
	paused := tick(10)
	paused.Paused = true
	testenv.Tick(t, s, q, paused)
	if got, err := s.AdmitNow(ctx, q, epoch, at); err != nil || len(got) != 0 {
		t.Fatalf("AdmitNow after a paused tick = %v, %v; want nobody", got, err)
	}
	if got, err := s.AdmitEntry(ctx, q, epoch, 3, at); err != nil || len(got) != 0 {
		t.Fatalf("AdmitEntry after a paused tick = %v, %v; want nobody", got, err)
	}
	// A drop awaiting its draw: the tick admits nobody, nor does this.
	drop := tick(10)
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
	s, q := newStore(t)
	ctx := context.Background()
	joinAll(t, s, q, users(20)...)
	tl := 10 * time.Second // one long tick: every call below falls in it
	at := waitqueue.AtOnce{TokenTTL: 300 * time.Second, TickLength: tl}
	tk := tick(2000)
	tk.TickLength, tk.MaxAdmitPerTick = tl, 5
	if r := testenv.Tick(t, s, q, tk); r.Admitted != 5 {
		t.Fatalf("the tick admitted %d, want 5", r.Admitted)
	}
	if got, err := s.AdmitNow(ctx, q, epoch, at); err != nil || len(got) != 0 {
		t.Fatalf("AdmitNow after a tick that took its 5 = %v, %v; want nobody (the next tick admits)", got, err)
	}
	// A tick that admitted nobody (the line was empty) leaves the whole
	// tick to admissions at once, and no more.
	s2, q2 := newStore(t)
	testenv.Tick(t, s2, q2, tk)
	joinAll(t, s2, q2, users(20)...)
	got, err := s2.AdmitNow(ctx, q2, epoch, at)
	if err != nil || fmt.Sprint(got) != "[1 2 3 4 5]" {
		t.Fatalf("AdmitNow of a line of 20, 5 per tick = %v, %v; want [1 2 3 4 5]", got, err)
	}
	if got, err := s2.AdmitNow(ctx, q2, epoch, at); err != nil || len(got) != 0 {
		t.Fatalf("a second AdmitNow in the same tick = %v, %v; want nobody", got, err)
	}
	// No maxAdmitPerTick: the tick's limit is the only cap, as for a tick.
	s3, q3 := newStore(t)
	testenv.Tick(t, s3, q3, waitqueue.Tick{Epoch: epoch, TargetActive: 8, TickLength: tl, TokenTTL: time.Minute})
	joinAll(t, s3, q3, users(10)...)
	if got, _ := s3.AdmitNow(ctx, q3, epoch, at); fmt.Sprint(got) != "[1 2 3 4 5 6 7 8]" {
		t.Fatalf("AdmitNow with no per-tick cap, a limit of 8 = %v, want [1 2 3 4 5 6 7 8]", got)
	}
}

func TestAnInviteIsTakenOnce(t *testing.T) {
	s, q := newStore(t)
	ctx := context.Background()
	now := time.Now()
	if err := s.AddInvites(ctx, q, []string{"a", "b"}, now, now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	inv, ok, err := s.UseInvite(ctx, q, "a", now)
	if !ok || err != nil || inv.Code != "a" || inv.ExpiresAt.UnixMilli() != now.Add(time.Minute).UnixMilli() {
		t.Fatalf("first use = %+v, %v, %v; want taken, with its expiry", inv, ok, err)
	}
	if _, ok, _ := s.UseInvite(ctx, q, "a", now); ok {
		t.Fatal("second use of one code taken")
	}
	if _, ok, _ := s.UseInvite(ctx, q, "zzz", now); ok {
		t.Fatal("an unknown code taken")
	}
	if err := s.ReturnInvite(ctx, q, inv, now); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.UseInvite(ctx, q, "a", now); !ok {
		t.Fatal("a returned code not usable again")
	}
}

// Each batch of invite codes keeps the lifetime it was issued with: a
// later, shorter-lived batch does not cut an earlier one's short (all the
// codes shared one key's EXPIRE, so a batch of 60 s killed a week's codes
// a minute later), nor does a longer-lived one keep a short batch alive.
func TestEveryBatchOfInvitesKeepsItsOwnExpiry(t *testing.T) {
	rdb := testenv.Redis(t)
	s, q := waitqueue.New(rdb), testenv.Name(t)
	ctx := context.Background()
	now := time.Now()
	if err := s.AddInvites(ctx, q, []string{"week1", "week2"}, now, now.Add(7*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := s.AddInvites(ctx, q, []string{"minute1", "minute2"}, now, now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if ttl := rdb.TTL(ctx, keyspace.Of(q).Invites()).Val(); ttl < 7*24*time.Hour-time.Minute {
		t.Fatalf("after a batch of a minute the codes' key lives %v, want the week of the first batch", ttl)
	}
	later := now.Add(2 * time.Minute)
	if _, ok, _ := s.UseInvite(ctx, q, "minute1", later); ok {
		t.Fatal("a code used past its expiry was taken")
	}
	if _, ok, err := s.UseInvite(ctx, q, "week1", later); !ok || err != nil {
		t.Fatalf("a week's code two minutes on = %v, %v; want taken", ok, err)
	}
	if _, ok, _ := s.UseInvite(ctx, q, "minute2", now.Add(30*time.Second)); !ok {
		t.Fatal("a minute's code 30 s on was refused")
	}
}

// Redis lost a drawn queue: the replayed joins are all back in the
// pre-queue, those made after the first draw too. Drawn again up to the
// first draw's cursor, the line is what it was: the same order, the later
// ones FIFO behind.
func TestARedrawAfterALossGivesTheLineItHad(t *testing.T) {
	s, q := newStore(t)
	ctx := context.Background()
	applyKind(t, s, q, 0, waitqueue.PreQueue, 1, 2, 3, 4, 5, 6) // 5 and 6 joined after the first draw at 4
	pre, _, version, err := s.PreQueue(ctx, q)
	if err != nil || len(pre) != 6 {
		t.Fatalf("PreQueue = %v, %v", pre, err)
	}
	if _, err := s.Redraw(ctx, q, epoch, version, []uint64{3, 1, 4}, "d", 4); !errors.Is(err, waitqueue.ErrDrawChanged) {
		t.Fatalf("Redraw of 3 where 4 are up to the cursor = %v, want ErrDrawChanged", err)
	}
	n, err := s.Redraw(ctx, q, epoch, version, []uint64{3, 1, 4, 2}, "d", 4)
	if err != nil || n != 4 {
		t.Fatalf("Redraw = %d, %v; want 4", n, err)
	}
	if got := line(t, s, q, 1, 2, 3, 4, 5, 6); fmt.Sprint(got) != "[3 1 4 2 5 6]" {
		t.Fatalf("line after the redraw = %v, want [3 1 4 2 5 6]", got)
	}
	if d, _ := s.Drawing(ctx, q); d.Cursor != 4 || d.Entries != 4 {
		t.Fatalf("Drawing = %+v, want 4 drawn at cursor 4", d)
	}
	if left, err := s.SettleDraw(ctx, q); err != nil || left != 0 {
		t.Fatalf("SettleDraw = %d, %v", left, err)
	}
	if got := line(t, s, q, 1, 2, 3, 4, 5, 6); fmt.Sprint(got) != "[3 1 4 2 5 6]" {
		t.Fatalf("line after settling = %v", got)
	}
}

// A join allowed past the line (an invite) into a scheduled drop waits at
// the head like everyone for the draw — nobody is admitted before it,
// though its place sorts ahead of every other — and is admitted first
// after it.
func TestAJoinPastTheLineWaitsForTheDraw(t *testing.T) {
	s, q := newStore(t)
	ctx := context.Background()
	applyKind(t, s, q, 0, waitqueue.PreQueue, 1, 2)
	applyKind(t, s, q, 2, waitqueue.Priority, 3)
	tk := tick(100)
	tk.AwaitDraw = true
	if r := testenv.Tick(t, s, q, tk); r.Admitted != 0 {
		t.Fatalf("tick before the draw = %+v, want nobody admitted", r)
	}
	if e, _ := s.Poll(ctx, q, 3); e.Status != waitqueue.Waiting || e.Position != 1 {
		t.Fatalf("the join past the line before the draw = %+v, want waiting at position 1", e)
	}
	_, _, version, err := s.PreQueue(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Draw(ctx, q, epoch, version, []uint64{2, 1}, "d"); err != nil {
		t.Fatal(err)
	}
	tk.TargetActive = 1
	if r := testenv.Tick(t, s, q, tk); r.Admitted != 1 {
		t.Fatalf("tick after the draw = %+v, want 1 admitted", r)
	}
	if e, _ := s.Poll(ctx, q, 3); e.Status != waitqueue.Admitted {
		t.Fatalf("the join past the line after the draw = %s, want admitted first", e.Status)
	}
}

// Before the draw the pre-queue counts in the line as the draw will place
// it — behind those allowed past the line, ahead of every join since the
// opening — in the ranks the notifier pushes as a poll answers them: a join
// in the second between the opening and the draw was pushed "1 of 1".
func TestRanksCountTheUndrawnPreQueueAheadOfLaterJoins(t *testing.T) {
	s, q := newStore(t)
	ctx := context.Background()
	applyKind(t, s, q, 0, waitqueue.PreQueue, 1, 2, 3)
	applyKind(t, s, q, 3, waitqueue.Priority, 4)
	applyKind(t, s, q, 4, waitqueue.InLine, 5, 6)
	r, err := s.Ranks(ctx, q, []uint64{1, 4, 5, 6})
	if err != nil {
		t.Fatal(err)
	}
	if r.Waiting != 6 || fmt.Sprint(r.Rank) != "[-1 0 4 5]" {
		t.Fatalf("Ranks before the draw = %d waiting, ranks %v; want 6, [-1 0 4 5] (pre-queued: none yet; invited first; later joins behind the 3 pre-queued)", r.Waiting, r.Rank)
	}
	for seq, want := range map[uint64]int64{4: 1, 5: 5, 6: 6} {
		if e, err := s.Poll(ctx, q, seq); err != nil || e.Position != want || e.Waiting != 6 {
			t.Fatalf("Poll(%d) before the draw = %+v, %v; want position %d of 6", seq, e, err, want)
		}
	}
	_, _, version, err := s.PreQueue(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Draw(ctx, q, epoch, version, []uint64{2, 3, 1}, "d"); err != nil {
		t.Fatal(err)
	}
	if r, err = s.Ranks(ctx, q, []uint64{2, 3, 1, 4, 5, 6}); err != nil || r.Waiting != 6 || fmt.Sprint(r.Rank) != "[1 2 3 0 4 5]" {
		t.Fatalf("Ranks after the draw = %+v, %v; want 6 waiting, ranks [1 2 3 0 4 5]: nobody moved", r, err)
	}
}

// The gateway's ingests of one queue that wait together run as one
// command, which reads the pre-queue still to be drawn once — and again
// after a join into it: each join of such a batch is told the place it
// would be told alone. (Around a drop's opening one batch can hold late
// pre-queue joins and the first joins after it.)
func TestBatchedIngestsAroundTheOpeningTellEachItsOwnPlace(t *testing.T) {
	s, q := newStore(t)
	ctx := context.Background()
	joins := []waitqueue.BatchedJoin{{1, "u1", waitqueue.PreQueue}, {2, "u2", waitqueue.InLine},
		{3, "u3", waitqueue.PreQueue}, {4, "u4", waitqueue.Priority}, {5, "u5", waitqueue.InLine}}
	batched, err := s.IngestInOneBatch(ctx, q, epoch, joins)
	if err != nil {
		t.Fatal(err)
	}
	alone := q + "-alone"
	for i, j := range joins {
		want, err := s.IngestAs(ctx, alone, epoch, j.Seq, j.User, 0, j.Kind)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(batched[i], want) {
			t.Errorf("join %d in one batch = %+v; alone %+v", j.Seq, batched[i], want)
		}
	}
	for i, want := range map[int]struct{ pos, waiting int64 }{1: {2, 2}, 4: {5, 5}} { // behind the pre-queue as it stood
		if e := batched[i]; e.Position != want.pos || e.Waiting != want.waiting {
			t.Errorf("join %d = position %d of %d, want %d of %d", joins[i].Seq, e.Position, e.Waiting, want.pos, want.waiting)
		}
	}
}
