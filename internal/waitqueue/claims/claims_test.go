package claims_test

import (
	"context"
	"testing"
	"time"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/linetest"
)

func TestClaimJudgesTheTokenAtTheRequest(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	linetest.JoinAll(t, s, q, "alice", "bob", "carol")
	tk := linetest.Tick(3)
	tk.TokenTTL = 400 * time.Millisecond
	testenv.Tick(t, s, q, tk)
	tok := func(seq uint64) string { return waitqueue.TokenID(q, epoch, seq) }
	time.Sleep(tk.TickLength) // every readyAt has passed

	first, err := s.Claim(ctx, q, 1, linetest.Order(tok(1), "ord_a"), time.Minute)
	if err != nil || first.Outcome != waitqueue.Redeemed {
		t.Fatalf("Claim(admitted) = %+v, %v, want claimed", first, err)
	}
	tests := []struct {
		name    string
		seq     uint64
		tokenID string
		orderID string
		want    waitqueue.Redemption
	}{
		{"the same order again is claimed (idempotent)", 1, tok(1), "ord_a", waitqueue.Redeemed},
		{"another order on a claimed token is refused", 1, tok(1), "ord_b", waitqueue.RedeemConflict},
		{"a token id that is not the entry's is unknown", 2, tok(9), "ord_c", waitqueue.RedeemUnknown},
		{"a token of another epoch is unknown", 2, waitqueue.TokenID(q, "e2", 2), "ord_c", waitqueue.RedeemUnknown},
	}
	for _, tt := range tests {
		got, err := s.Claim(ctx, q, tt.seq, linetest.Order(tt.tokenID, tt.orderID), time.Minute)
		if err != nil || got.Outcome != tt.want {
			t.Errorf("%s: Claim(%d, %s, %s) = %v, %v, want %v", tt.name, tt.seq, tt.tokenID, tt.orderID, got, err, tt.want)
		}
	}
	if again, _ := s.Claim(ctx, q, 1, linetest.Order(tok(1), "ord_a"), time.Minute); !again.At.Equal(first.At) {
		t.Errorf("a repeated claim's time = %v, want the first claim's %v (the order's request time)", again.At, first.At)
	}

	t.Run("a claimed token's slot outlives the token", func(t *testing.T) {
		time.Sleep(tk.TokenTTL + 50*time.Millisecond)
		r := testenv.Tick(t, s, q, tk)
		if r.Expired != 2 || r.Active != 1 {
			t.Fatalf("tick past the tokens' expiry = %+v, want bob's and carol's expired, alice's held", r)
		}
		if e, _ := s.Poll(ctx, q, 1); e.Status != waitqueue.Used {
			t.Fatalf("alice = %s, want used", e.Status)
		}
	})
	t.Run("an expired token cannot be claimed", func(t *testing.T) {
		if got, _ := s.Claim(ctx, q, 2, linetest.Order(tok(2), "ord_e"), time.Minute); got.Outcome != waitqueue.RedeemExpired {
			t.Fatalf("Claim(expired) = %v, want expired", got.Outcome)
		}
	})
	t.Run("a token before its readyAt is early", func(t *testing.T) {
		s2, q2 := linetest.New(t)
		linetest.JoinAll(t, s2, q2, "dave")
		tk2 := linetest.Tick(1)
		tk2.TickLength = 10 * time.Second // readyAt somewhere in the next 10 s
		testenv.Tick(t, s2, q2, tk2)
		e, _ := s2.Poll(ctx, q2, 1)
		now, _ := s2.Now(ctx)
		got, _ := s2.Claim(ctx, q2, 1, linetest.Order(waitqueue.TokenID(q2, epoch, 1), "ord_f"), time.Minute)
		if now.Add(time.Second).Before(e.ReadyAt) && got.Outcome != waitqueue.RedeemEarly {
			t.Fatalf("Claim before readyAt %v (now %v) = %v, want early", e.ReadyAt, now, got.Outcome)
		}
	})
}

func TestRedeemAndRelease(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	linetest.JoinAll(t, s, q, "alice", "bob")
	testenv.Tick(t, s, q, linetest.Tick(1))
	tok := waitqueue.TokenID(q, epoch, 1)
	now, _ := s.Now(ctx)
	hold := now.Add(time.Hour) // far past the token's 300 s expiry

	tests := []struct {
		name    string
		seq     uint64
		tokenID string
		orderID string
		want    waitqueue.Redemption
	}{
		{"an admitted token nobody claimed (a healed loss) is redeemed", 1, tok, "ord_a", waitqueue.Redeemed},
		{"the same order again is idempotent", 1, tok, "ord_a", waitqueue.Redeemed},
		{"another order on a redeemed token is refused", 1, tok, "ord_b", waitqueue.RedeemConflict},
		{"a token id that is not the entry's is unknown", 1, waitqueue.TokenID(q, epoch, 9), "ord_c", waitqueue.RedeemUnknown},
		{"a waiting entry has no token", 2, waitqueue.TokenID(q, epoch, 2), "ord_d", waitqueue.RedeemUnknown},
	}
	for _, tt := range tests {
		got, err := s.Redeem(ctx, q, tt.seq, tt.tokenID, tt.orderID, hold)
		if err != nil || got != tt.want {
			t.Errorf("%s: Redeem(%d, %s, %s) = %v, %v, want %v", tt.name, tt.seq, tt.tokenID, tt.orderID, got, err, tt.want)
		}
	}
	t.Run("only the order that redeemed it frees the slot", func(t *testing.T) {
		if freed, _ := s.Release(ctx, q, 1, "ord_b"); freed {
			t.Fatal("Release by another order freed the slot")
		}
		if freed, _ := s.Release(ctx, q, 1, "ord_a"); !freed {
			t.Fatal("Release by the redeeming order did not free the slot")
		}
		if freed, _ := s.Release(ctx, q, 1, "ord_a"); freed {
			t.Fatal("a second Release freed something")
		}
		if r := testenv.Tick(t, s, q, linetest.Tick(1)); r.Admitted != 1 {
			t.Fatalf("tick after release admitted %d, want the next shopper", r.Admitted)
		}
	})
	t.Run("a claimed token whose hold ran out frees its slot and stays used", func(t *testing.T) {
		time.Sleep(20 * time.Millisecond) // past readyAt
		if cl, _ := s.Claim(ctx, q, 2, linetest.Order(waitqueue.TokenID(q, epoch, 2), "ord_f"), 100*time.Millisecond); cl.Outcome != waitqueue.Redeemed {
			t.Fatalf("Claim = %+v", cl)
		}
		time.Sleep(200 * time.Millisecond)
		r := testenv.Tick(t, s, q, linetest.Tick(1))
		if r.Active != 0 || r.Expired != 1 {
			t.Fatalf("tick past the hold = %+v, want the slot freed", r)
		}
		if e, _ := s.Poll(ctx, q, 2); e.Status != waitqueue.Used {
			t.Fatalf("status = %s, want used", e.Status)
		}
		// Its order goes through on no slot: the worker is told so, and
		// the slot stays given away.
		if got, err := s.Redeem(ctx, q, 2, waitqueue.TokenID(q, epoch, 2), "ord_f", now.Add(time.Hour)); err != nil || got != waitqueue.RedeemLapsed {
			t.Fatalf("Redeem after the hold ran out = %v, %v, want lapsed", got, err)
		}
		if st, _ := s.Stats(ctx, q); st.Active != 0 {
			t.Fatalf("active = %d after a lapsed redemption, want 0", st.Active)
		}
	})
}

// A PAID order's units count against its user's maxPerUser once: the
// order worker counts them before it shows the order PAID (CountBought),
// the orders follower when it applies the completed event, and whichever
// comes second counts nothing.
func TestAPaidOrderIsCountedOnceWhoeverCountsFirst(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	linetest.JoinAll(t, s, q, "alice", "bob")
	testenv.Tick(t, s, q, linetest.Tick(2))
	time.Sleep(linetest.Tick(2).TickLength)
	tok := func(seq uint64) string { return waitqueue.TokenID(q, epoch, seq) }
	for _, o := range []struct {
		seq  uint64
		user string
		qty  int
	}{{1, "alice", 2}, {2, "bob", 1}} {
		cl, err := s.Claim(ctx, q, o.seq, waitqueue.Order{ID: "ord_" + o.user, TokenID: tok(o.seq), User: o.user, SKU: "sku", Quantity: o.qty}, time.Minute)
		if err != nil || cl.Outcome != waitqueue.Redeemed {
			t.Fatalf("Claim(%s) = %+v, %v", o.user, cl, err)
		}
	}
	paid := func(streamSeq, seq uint64, user string, qty int) {
		t.Helper()
		ev := waitqueue.OrderEvent{StreamSeq: streamSeq, Final: true, Paid: true, Entry: seq, TokenID: tok(seq), OrderID: "ord_" + user,
			User: user, SKU: "sku", Quantity: qty}
		if _, err := s.ApplyOrders(ctx, q, "o1", streamSeq-1, time.Minute, []waitqueue.OrderEvent{ev}); err != nil {
			t.Fatal(err)
		}
	}
	bought := func(user string) int {
		t.Helper()
		c, err := s.Lookup(ctx, q, user)
		if err != nil {
			t.Fatal(err)
		}
		return c.Bought
	}
	count := func(seq uint64, order, user string, qty int) bool {
		t.Helper()
		ok, err := s.CountBought(ctx, q, seq, order, user, qty)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}

	// The worker first (the usual order): the follower adds nothing.
	if !count(1, "ord_alice", "alice", 2) || count(1, "ord_alice", "alice", 2) {
		t.Fatal("CountBought counted alice's order other than once")
	}
	if got := bought("alice"); got != 2 {
		t.Fatalf("alice bought %d after the worker counted, want 2", got)
	}
	paid(1, 1, "alice", 2)
	if got := bought("alice"); got != 2 {
		t.Errorf("alice bought %d after the follower applied her order too, want 2", got)
	}
	// The follower first (a worker that crashed before counting, say).
	paid(2, 2, "bob", 1)
	if count(2, "ord_bob", "bob", 1) {
		t.Error("CountBought counted bob's order the follower had counted")
	}
	if got := bought("bob"); got != 1 {
		t.Errorf("bob bought %d, want 1", got)
	}
	// Not the entry's order: nothing counted here (the follower counts it).
	if count(2, "ord_other", "bob", 1) {
		t.Error("CountBought counted an order the entry does not hold")
	}
}

// A redemption says where USHER_ADMISSIONS holds the token's admission, as
// the admissions follower recorded it: nothing before the follower applied
// the event, its stream sequence after; an event naming another token
// records nothing on the entry.
func TestRedeemSaysWhereTheStreamHoldsTheAdmission(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	linetest.JoinAll(t, s, q, "alice", "bob")
	testenv.Tick(t, s, q, linetest.Tick(2))
	e, _ := s.Poll(ctx, q, 1)
	tok := waitqueue.TokenID(q, epoch, 1)
	hold := time.Now().Add(time.Hour)
	if r, aseq, err := s.RedeemRequest(ctx, q, 1, waitqueue.Request{Order: waitqueue.Order{ID: "ord_a", TokenID: tok}}, hold); err != nil || r != waitqueue.Redeemed || aseq != 0 {
		t.Fatalf("RedeemRequest before the follower = %v, %d, %v; want redeemed, 0", r, aseq, err)
	}
	evs := []waitqueue.AdmissionEvent{
		{StreamSeq: 7, Entry: 1, User: "alice", TokenID: tok, ReadyAt: e.ReadyAt, ExpiresAt: e.ExpiresAt},
		{StreamSeq: 8, Entry: 2, User: "bob", TokenID: waitqueue.TokenID(q, "another-epoch", 2), ReadyAt: e.ReadyAt, ExpiresAt: e.ExpiresAt},
	}
	if _, err := s.ApplyAdmissions(ctx, q, "a1", 0, evs); err != nil {
		t.Fatal(err)
	}
	if r, aseq, err := s.RedeemRequest(ctx, q, 1, waitqueue.Request{Order: waitqueue.Order{ID: "ord_a", TokenID: tok}}, hold); err != nil || r != waitqueue.Redeemed || aseq != 7 {
		t.Fatalf("RedeemRequest after the follower = %v, %d, %v; want redeemed, 7", r, aseq, err)
	}
	if r, aseq, err := s.RedeemRequest(ctx, q, 2, waitqueue.Request{Order: waitqueue.Order{ID: "ord_b", TokenID: waitqueue.TokenID(q, epoch, 2)}}, hold); err != nil || r != waitqueue.Redeemed || aseq != 0 {
		t.Fatalf("RedeemRequest of bob's token = %v, %d, %v; want redeemed, 0: the event named another token", r, aseq, err)
	}
}
