package drop_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
	"usher/internal/keyspace"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/linetest"
	"usher/internal/waitqueue/roles"
)

func TestThePreQueueHasNoPlaceUntilTheDrawGivesOne(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	linetest.ApplyKind(t, s, q, 0, waitqueue.PreQueue, 1, 2, 3, 4)

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
	tk := linetest.Tick(100)
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
	linetest.ApplyKind(t, s, q, 4, waitqueue.PreQueue, 5) // after the opening: FIFO
	linetest.ApplyKind(t, s, q, 5, waitqueue.InLine, 6)
	if got := linetest.Line(t, s, q, 1, 2, 3, 4, 5, 6); fmt.Sprint(got) != "[3 1 4 2 5 6]" {
		t.Fatalf("line after the draw = %v, want [3 1 4 2 5 6]", got)
	}
	// It happens once.
	if _, err := s.Draw(ctx, q, epoch, version, nil, "d"); !errors.Is(err, waitqueue.ErrDrawn) {
		t.Fatalf("second Draw = %v; want ErrDrawn", err)
	}
	if got := linetest.Line(t, s, q, 1, 2, 3, 4, 5, 6); fmt.Sprint(got) != "[3 1 4 2 5 6]" {
		t.Fatalf("line after a second draw = %v, want it unchanged", got)
	}
	// The drawn wait with status pre until the admitter settles them; a
	// drawn shopper who leaves before is out of line all the same.
	if _, err := linetest.Leave(ctx, s, q, 4, "u4"); err != nil {
		t.Fatal(err)
	}
	if got := linetest.Line(t, s, q, 1, 2, 3, 4, 5, 6); fmt.Sprint(got) != "[3 1 2 5 6]" {
		t.Fatalf("line after 4 left = %v, want [3 1 2 5 6]", got)
	}
	if left, err := s.SettleDraw(ctx, q); err != nil || left != 0 {
		t.Fatalf("SettleDraw = %d, %v; want none left", left, err)
	}
	if got := linetest.Line(t, s, q, 1, 2, 3, 4, 5, 6); fmt.Sprint(got) != "[3 1 2 5 6]" {
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
	s, q := linetest.New(t)
	ctx := context.Background()
	linetest.ApplyKind(t, s, q, 0, waitqueue.PreQueue, 1, 2, 3)
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
	linetest.ApplyKind(t, s, q, 4, waitqueue.PreQueue, 5)
	// Someone joins the pre-queue after it was read: the order read is
	// refused.
	linetest.ApplyKind(t, s, q, 5, waitqueue.PreQueue, 6)
	if _, err := s.Draw(ctx, q, epoch, version, []uint64{5, 3, 1}, "d"); !errors.Is(err, waitqueue.ErrDrawChanged) {
		t.Fatalf("Draw of a pre-queue that changed since it was read = %v, want ErrDrawChanged", err)
	}
	linetest.Leave(ctx, s, q, 6, "u6")
	pre, _, version, _ = s.PreQueue(ctx, q)
	if len(pre) != 3 {
		t.Fatalf("PreQueue = %+v, want 1, 3, 5", pre)
	}
	if n, err := s.Draw(ctx, q, epoch, version, []uint64{5, 3, 1}, "d"); err != nil || n != 3 {
		t.Fatalf("Draw = %d, %v; want 3", n, err)
	}
	if got := linetest.Line(t, s, q, 1, 3, 5); fmt.Sprint(got) != "[5 3 1]" {
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

func TestAnInviteIsTakenOnce(t *testing.T) {
	s, q := linetest.New(t)
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
	s, q := roles.New(rdb), testenv.Name(t)
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
	s, q := linetest.New(t)
	ctx := context.Background()
	linetest.ApplyKind(t, s, q, 0, waitqueue.PreQueue, 1, 2, 3, 4, 5, 6) // 5 and 6 joined after the first draw at 4
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
	if got := linetest.Line(t, s, q, 1, 2, 3, 4, 5, 6); fmt.Sprint(got) != "[3 1 4 2 5 6]" {
		t.Fatalf("line after the redraw = %v, want [3 1 4 2 5 6]", got)
	}
	if d, _ := s.Drawing(ctx, q); d.Cursor != 4 || d.Entries != 4 {
		t.Fatalf("Drawing = %+v, want 4 drawn at cursor 4", d)
	}
	if left, err := s.SettleDraw(ctx, q); err != nil || left != 0 {
		t.Fatalf("SettleDraw = %d, %v", left, err)
	}
	if got := linetest.Line(t, s, q, 1, 2, 3, 4, 5, 6); fmt.Sprint(got) != "[3 1 4 2 5 6]" {
		t.Fatalf("line after settling = %v", got)
	}
}

// A join allowed past the line (an invite) into a scheduled drop waits at
// the head like everyone for the draw — nobody is admitted before it,
// though its place sorts ahead of every other — and is admitted first
// after it.
func TestAJoinPastTheLineWaitsForTheDraw(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	linetest.ApplyKind(t, s, q, 0, waitqueue.PreQueue, 1, 2)
	linetest.ApplyKind(t, s, q, 2, waitqueue.Priority, 3)
	tk := linetest.Tick(100)
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
