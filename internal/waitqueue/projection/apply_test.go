package projection_test

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
	"usher/internal/waitqueue/linetest"
	"usher/internal/waitqueue/roles"
)

// history is a queue's three streams as the followers read them.
type history struct {
	entries    []waitqueue.EntryEvent
	admissions []waitqueue.AdmissionEvent
	orders     []waitqueue.OrderEvent
	seq        uint64 // the last stream sequence handed out (one counter is enough for a test)
}

func (h *history) next() uint64 { h.seq++; return h.seq }

// live plays a drop on a real line the way the services do — joins applied
// by the follower, ticks, admissions announced, orders claimed and
// finished, a leave — and records every event as its stream holds it.
func live(t *testing.T, s *roles.All, q string) *history {
	t.Helper()
	ctx := context.Background()
	h := &history{}
	apply := func(evs ...waitqueue.EntryEvent) {
		if _, err := s.ApplyEntries(ctx, q, epoch, 0, evs); err != nil {
			t.Fatal(err)
		}
		h.entries = append(h.entries, evs...)
	}
	for i := 1; i <= 8; i++ {
		apply(waitqueue.EntryEvent{StreamSeq: h.next(), User: fmt.Sprintf("u%d", i)})
	}
	tk := linetest.Tick(4)
	testenv.Tick(t, s, q, tk)
	announce := func() {
		out, err := s.Outbox(ctx, q, 100)
		if err != nil {
			t.Fatal(err)
		}
		var seqs []uint64
		for _, a := range out {
			h.admissions = append(h.admissions, waitqueue.AdmissionEvent{StreamSeq: h.next(), Entry: a.Seq, User: a.User,
				TokenID: a.TokenID, ReadyAt: a.ReadyAt, ExpiresAt: a.ExpiresAt})
			seqs = append(seqs, a.Seq)
		}
		if err := s.Announced(ctx, q, seqs); err != nil {
			t.Fatal(err)
		}
	}
	announce()
	time.Sleep(tk.TickLength)
	// u1 orders and is paid; u2 orders, still pending; u3 leaves with its
	// slot; u4 holds its token.
	for _, o := range []struct {
		seq   uint64
		order string
		final bool
	}{{1, "ord_1", true}, {2, "ord_2", false}} {
		tok := waitqueue.TokenID(q, epoch, o.seq)
		cl, err := s.Claim(ctx, q, o.seq, waitqueue.Order{ID: o.order, TokenID: tok, User: fmt.Sprintf("u%d", o.seq)}, time.Minute)
		if err != nil || cl.Outcome != waitqueue.Redeemed {
			t.Fatalf("Claim(%d) = %+v, %v", o.seq, cl, err)
		}
		user := fmt.Sprintf("u%d", o.seq)
		h.orders = append(h.orders, waitqueue.OrderEvent{StreamSeq: h.next(), Entry: o.seq, TokenID: tok, OrderID: o.order,
			User: user, RequestedAt: cl.At})
		if o.final {
			if _, err := s.Release(ctx, q, o.seq, o.order); err != nil {
				t.Fatal(err)
			}
			h.orders = append(h.orders, waitqueue.OrderEvent{StreamSeq: h.next(), Final: true, Entry: o.seq, TokenID: tok,
				OrderID: o.order, User: user})
		}
	}
	if _, err := linetest.Leave(ctx, s, q, 3, "u3"); err != nil {
		t.Fatal(err)
	}
	apply(waitqueue.EntryEvent{StreamSeq: h.next(), Leave: true, Entry: 3, User: "u3"})
	// u1, done, joins again: a new entry after a finished one.
	apply(waitqueue.EntryEvent{StreamSeq: h.next(), User: "u1", Prev: 1})
	// Two more admitted (slots of u1 and u3 freed), announced.
	testenv.Tick(t, s, q, tk)
	announce()
	return h
}

// state is what shoppers and the admitter can observe of a queue.
type state struct {
	entries         map[uint64]waitqueue.Entry
	waiting, active int64
	users           map[string]uint64
}

func observe(t *testing.T, s *roles.All, q string, h *history) state {
	t.Helper()
	ctx := context.Background()
	st := state{entries: map[uint64]waitqueue.Entry{}, users: map[string]uint64{}}
	for _, e := range h.entries {
		if e.Leave {
			continue
		}
		got, err := s.Poll(ctx, q, e.StreamSeq)
		if err != nil {
			t.Fatal(err)
		}
		got.Rate = 0 // measured, not projected
		st.entries[e.StreamSeq] = got
		if c, _ := s.Lookup(ctx, q, e.User); c.Found {
			st.users[e.User] = c.Seq
		}
	}
	stats, err := s.Stats(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	st.waiting, st.active = stats.Waiting, stats.Active
	return st
}

func compare(t *testing.T, got, want state) {
	t.Helper()
	for seq, w := range want.entries {
		if g := got.entries[seq]; !reflect.DeepEqual(g, w) {
			t.Errorf("entry %d after replay = %+v, want %+v", seq, g, w)
		}
	}
	if got.waiting != want.waiting || got.active != want.active {
		t.Errorf("after replay %d waiting, %d active; want %d, %d", got.waiting, got.active, want.waiting, want.active)
	}
	for u, w := range want.users {
		if g := got.users[u]; g != w {
			t.Errorf("user %s points at %d after replay, want %d", u, g, w)
		}
	}
}

// replay applies the history from scratch, each stream in one batch, in
// the order given.
func replay(t *testing.T, s *roles.All, q string, h *history, order ...string) {
	t.Helper()
	ctx := context.Background()
	for _, st := range order {
		var err error
		switch st {
		case waitqueue.StreamEntries:
			_, err = s.ApplyEntries(ctx, q, epoch, 0, h.entries)
		case waitqueue.StreamAdmissions:
			_, err = s.ApplyAdmissions(ctx, q, "a1", 0, h.admissions)
		case waitqueue.StreamOrders:
			_, err = s.ApplyOrders(ctx, q, "o1", 0, time.Minute, h.orders)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// Redis is a projection: after losing everything, replaying the three
// streams — in any order, as three independent followers would — restores
// every shopper's place, every admission with the same token, every held
// slot and every user's current entry.
func TestReplayingTheStreamsRestoresTheLineExactly(t *testing.T) {
	orders := [][]string{
		{waitqueue.StreamEntries, waitqueue.StreamAdmissions, waitqueue.StreamOrders},
		{waitqueue.StreamOrders, waitqueue.StreamAdmissions, waitqueue.StreamEntries},
		{waitqueue.StreamAdmissions, waitqueue.StreamOrders, waitqueue.StreamEntries},
	}
	for _, order := range orders {
		t.Run(fmt.Sprint(order), func(t *testing.T) {
			s, q := linetest.New(t)
			h := live(t, s, q)
			want := observe(t, s, q, h)
			if want.active != 4 || want.waiting != 3 {
				t.Fatalf("the drop left %d active, %d waiting; the test expects 4 and 3", want.active, want.waiting)
			}
			if _, err := s.Remove(context.Background(), q, false); err != nil { // FLUSHALL, for this queue
				t.Fatal(err)
			}
			replay(t, s, q, h, order...)
			compare(t, observe(t, s, q, h), want)
		})
	}
}

// A follower whose next batch finds the cursor behind what it applied
// learns that Redis lost writes, and applies nothing: it must replay.
func TestApplyNoticesALineThatLostWrites(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	linetest.JoinAll(t, s, q, linetest.Users(10)...)
	if _, err := s.Remove(ctx, q, false); err != nil {
		t.Fatal(err)
	}
	got, err := s.ApplyEntries(ctx, q, epoch, 10, []waitqueue.EntryEvent{{StreamSeq: 11, User: "u11"}})
	if err != nil || !got.Rewound || got.Cursor != 0 {
		t.Fatalf("ApplyEntries after the loss = %+v, %v; want rewound to 0", got, err)
	}
	if e, _ := s.Poll(ctx, q, 11); e.Status != waitqueue.Unknown {
		t.Fatalf("seq 11 = %s, want nothing applied", e.Status)
	}
}

// Each event is applied once however many followers apply it: one at or
// below the cursor is skipped.
func TestApplyingTwiceChangesNothing(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	linetest.JoinAll(t, s, q, "alice", "bob")
	linetest.Leave(ctx, s, q, 1, "alice")
	// A second follower, behind, applies the joins again.
	got, err := s.ApplyEntries(ctx, q, epoch, 0, []waitqueue.EntryEvent{{StreamSeq: 1, User: "alice"}, {StreamSeq: 2, User: "bob"}})
	if err != nil || got.Cursor != 2 || got.Rewound {
		t.Fatalf("ApplyEntries again = %+v, %v", got, err)
	}
	if e, _ := s.Poll(ctx, q, 1); e.Status != waitqueue.Left {
		t.Fatalf("alice = %s after a second follower, want still left", e.Status)
	}
	cur, _ := s.Cursor(ctx, q)
	if cur[waitqueue.StreamEntries] != (waitqueue.Position{Seq: 2, StreamID: epoch}) {
		t.Fatalf("Cursor = %v, want entries at 2 in %s", cur, epoch)
	}
}

// A line of another incarnation of the entries stream is stale: the
// follower must clear it before applying.
func TestApplyEntriesOfAnotherEpochIsStale(t *testing.T) {
	s, q := linetest.New(t)
	linetest.JoinAll(t, s, q, "alice")
	_, err := s.ApplyEntries(context.Background(), q, "e2", 0, []waitqueue.EntryEvent{{StreamSeq: 1, User: "bob"}})
	if !errors.Is(err, waitqueue.ErrStale) {
		t.Fatalf("ApplyEntries in e2 on a line of e1 = %v, want ErrStale", err)
	}
}

// Nobody is admitted while the line has not applied every admission and
// order the streams hold: a Redis that lost admissions would otherwise
// admit on top of the slots it no longer sees.
func TestATickIsBehindUntilTheLineHasAppliedTheStreams(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	linetest.JoinAll(t, s, q, linetest.Users(6)...)
	tk := linetest.Tick(2)
	tk.Admissions = waitqueue.Head{Seq: 101, StreamID: "a1"} // two admissions the line lost
	r := testenv.Tick(t, s, q, tk)
	if !r.Behind || r.Admitted != 0 {
		t.Fatalf("tick with the admissions head ahead = %+v, want behind, nobody admitted", r)
	}
	now, _ := s.Now(ctx)
	lost := []waitqueue.AdmissionEvent{
		{StreamSeq: 100, Entry: 1, User: "u1", TokenID: waitqueue.TokenID(q, epoch, 1), ReadyAt: now, ExpiresAt: now.Add(time.Minute)},
		{StreamSeq: 101, Entry: 2, User: "u2", TokenID: waitqueue.TokenID(q, epoch, 2), ReadyAt: now, ExpiresAt: now.Add(time.Minute)},
	}
	if _, err := s.ApplyAdmissions(ctx, q, "a1", 0, lost); err != nil {
		t.Fatal(err)
	}
	r = testenv.Tick(t, s, q, tk)
	if r.Behind || r.Admitted != 0 || r.Active != 2 {
		t.Fatalf("tick once healed = %+v, want the two restored slots held and nobody on top of them", r)
	}
	tk.Orders = waitqueue.Head{Seq: 7, StreamID: "o1"}
	if r := testenv.Tick(t, s, q, tk); !r.Behind {
		t.Fatalf("tick with the orders head ahead = %+v, want behind", r)
	}
}

// Redis holds only what is live: a finished entry and its user's pointer
// expire; a live one never does.
func TestFinishedEntriesAreTombstonesThatExpire(t *testing.T) {
	s, q := linetest.New(t)
	s.SetTombstoneTTL(30 * time.Second)
	rdb := testenv.Redis(t)
	ctx := context.Background()
	k := keyspace.Of(q)
	linetest.JoinAll(t, s, q, "alice", "bob")
	ttl := func(key string) time.Duration {
		d, err := rdb.TTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if d := ttl(k.Entry(1)); d != -1 {
		t.Errorf("a waiting entry's TTL = %v, want none", d)
	}
	linetest.Leave(ctx, s, q, 1, "alice")
	if d := ttl(k.Entry(1)); d <= 0 || d > 30*time.Second {
		t.Errorf("a left entry's TTL = %v, want the tombstone TTL", d)
	}
	if d := ttl(k.User("alice")); d <= 0 || d > 30*time.Second {
		t.Errorf("a left user's pointer TTL = %v, want the tombstone TTL", d)
	}
	if d := ttl(k.User("bob")); d != -1 {
		t.Errorf("a waiting user's pointer TTL = %v, want none", d)
	}
}

// A closed queue's line goes after its grace period; with the cursor kept,
// the followers do not bring it back.
func TestDropKeepingTheCursor(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	linetest.JoinAll(t, s, q, linetest.Users(20)...)
	n, err := s.Remove(ctx, q, true)
	if err != nil || n < 20 {
		t.Fatalf("Drop = %d, %v; want every entry and the line", n, err)
	}
	if st, _ := s.Stats(ctx, q); st.Waiting != 0 {
		t.Fatalf("after Drop: %+v", st)
	}
	cur, _ := s.Cursor(ctx, q)
	if cur[waitqueue.StreamEntries].Seq != 20 {
		t.Fatalf("cursor after Drop = %v, want kept at 20", cur)
	}
}
