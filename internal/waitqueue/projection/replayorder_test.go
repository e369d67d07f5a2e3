package projection_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"usher/internal/testenv"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/linetest"
	"usher/internal/waitqueue/roles"
)

// acceptedOrder is the streams of one shopper whose order the gateway
// accepted (202): her join, her admission, the request — claimed at
// requestedAt and stored by its stream a moment later, before the
// admission's expiry — and, when left, her leave a second after it (which
// the live line ignored: she had ordered).
func acceptedOrder(q string, requestedAt, expiresAt time.Time, left bool) *history {
	tok := waitqueue.TokenID(q, epoch, 1)
	h := &history{
		entries: []waitqueue.EntryEvent{{StreamSeq: 1, User: "alice", At: requestedAt.Add(-time.Minute)}},
		admissions: []waitqueue.AdmissionEvent{{StreamSeq: 1, Entry: 1, User: "alice", TokenID: tok,
			ReadyAt: requestedAt.Add(-time.Second), ExpiresAt: expiresAt}},
		orders: []waitqueue.OrderEvent{{StreamSeq: 1, Entry: 1, TokenID: tok, OrderID: "ord_alice", User: "alice",
			RequestedAt: requestedAt, SKU: "sku", Quantity: 2, Stored: requestedAt.Add(5 * time.Millisecond)}},
	}
	if left {
		h.entries = append(h.entries, waitqueue.EntryEvent{StreamSeq: 2, Leave: true, Entry: 1, User: "alice",
			At: requestedAt.Add(time.Second)})
	}
	return h
}

// redeemer is the order worker's redemption of r's token, holding its slot
// an hour.
func redeemer(t *testing.T, s *roles.All, q string) func(r waitqueue.OrderEvent) waitqueue.Redemption {
	return func(r waitqueue.OrderEvent) waitqueue.Redemption {
		t.Helper()
		ctx := context.Background()
		now, err := s.Now(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := s.RedeemRequest(ctx, q, r.Entry, waitqueue.Request{
			Order:       waitqueue.Order{ID: r.OrderID, TokenID: r.TokenID, User: r.User, SKU: r.SKU, Quantity: r.Quantity},
			RequestedAt: r.RequestedAt, Stored: r.Stored}, now.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
}

// permutations of the three streams: three followers replay them
// independently, so any may be first.
var permutations = [][]string{
	{waitqueue.StreamEntries, waitqueue.StreamAdmissions, waitqueue.StreamOrders},
	{waitqueue.StreamEntries, waitqueue.StreamOrders, waitqueue.StreamAdmissions},
	{waitqueue.StreamAdmissions, waitqueue.StreamEntries, waitqueue.StreamOrders},
	{waitqueue.StreamAdmissions, waitqueue.StreamOrders, waitqueue.StreamEntries},
	{waitqueue.StreamOrders, waitqueue.StreamEntries, waitqueue.StreamAdmissions},
	{waitqueue.StreamOrders, waitqueue.StreamAdmissions, waitqueue.StreamEntries},
}

// An order the gateway accepted survives a replay after Redis lost
// everything, in whatever order the three followers replay the streams and
// whenever the order worker redeems meanwhile: the worker is told to wait
// (unknown: the line does not know the token yet) or redeems it — never
// expired because the admission was replayed after its expiry ahead of
// the request, never left because her later leave was — and once every
// stream is replayed the token is the order's and holds its slot.
func TestAnAcceptedOrderSurvivesAReplayInAnyOrder(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		left bool
		exp  time.Duration // the admission's expiry from now; the claim came 3 s ago
	}{
		{"expired since the request", false, -time.Second},
		{"left after the request", true, time.Minute},
		{"left after the request, expired since", true, -time.Second},
	} {
		for _, order := range permutations {
			for redeemAfter := 0; redeemAfter <= len(order); redeemAfter++ {
				t.Run(fmt.Sprintf("%s/%v/redeem after %d", tc.name, order, redeemAfter), func(t *testing.T) {
					s, q := linetest.New(t)
					now, err := s.Now(ctx)
					if err != nil {
						t.Fatal(err)
					}
					h := acceptedOrder(q, now.Add(-3*time.Second), now.Add(tc.exp), tc.left)
					req := h.orders[0]
					redeem := func() waitqueue.Redemption { return redeemer(t, s, q)(req) }
					replay(t, s, q, h, order[:redeemAfter]...)
					if r := redeem(); r != waitqueue.Redeemed && r != waitqueue.RedeemUnknown {
						t.Fatalf("the worker's redeem after replaying %v = %s, want redeemed or unknown (wait)", order[:redeemAfter], r)
					}
					replay(t, s, q, h, order[redeemAfter:]...)

					e, err := s.Poll(ctx, q, 1)
					if err != nil {
						t.Fatal(err)
					}
					st, err := s.Stats(ctx, q)
					if err != nil {
						t.Fatal(err)
					}
					if e.Status != waitqueue.Used || e.TokenID != req.TokenID || st.Active != 1 {
						t.Fatalf("after the replay alice = %s (token %q), %d active; want used by her order, her slot held",
							e.Status, e.TokenID, st.Active)
					}
					if r := redeem(); r != waitqueue.Redeemed {
						t.Fatalf("the worker's redeem after the replay = %s, want redeemed", r)
					}
					if freed, err := s.Release(ctx, q, 1, req.OrderID); err != nil || !freed {
						t.Fatalf("Release of the finished order = %v, %v; want its slot freed", freed, err)
					}
				})
			}
		}
	}
}

// What a replay honours is an order the line accepted, and only that: the
// stream must have stored the request before the admission expired and
// no later than the leave (see TestARequestStoredInTheLeavesMillisecondStands)
// — its own requestedAt, which whoever publishes writes, does not count —
// and a token redeemed once is never another order's. A request published
// on the bus for a token that expired or was given up unclaimed still
// orders nothing.
func TestAReplayHonoursOnlyRequestsStoredBeforeTheExpiryAndTheLeave(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		exp, left time.Duration // the admission's expiry and the leave, from the request's claim
		want      waitqueue.Redemption
	}{
		{"expired since", 2 * time.Second, 0, waitqueue.RedeemExpired},
		{"left since", time.Minute, time.Second, waitqueue.RedeemLeft},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, q := linetest.New(t)
			now, err := s.Now(ctx)
			if err != nil {
				t.Fatal(err)
			}
			claimed := now.Add(-3 * time.Second)
			h := acceptedOrder(q, claimed, claimed.Add(tc.exp), tc.left > 0)
			replay(t, s, q, h, waitqueue.StreamEntries, waitqueue.StreamAdmissions)
			redeem := redeemer(t, s, q)
			req := h.orders[0]
			with := func(id string, stored time.Time) waitqueue.OrderEvent {
				r := req
				r.OrderID, r.Stored = id, stored
				return r
			}
			end := claimed.Add(tc.exp) // when the line stopped taking the request
			if tc.left > 0 {
				end = claimed.Add(tc.left)
			}
			type row struct {
				name string
				req  waitqueue.OrderEvent
				want waitqueue.Redemption
			}
			var tests []row
			if tc.left == 0 {
				tests = append(tests, row{"stored at the expiry, claimed before it", with("ord_at", end), tc.want})
			}
			tests = append(tests, []row{
				{"stored after it, claimed before it", with("ord_after", end.Add(time.Second)), tc.want},
				{"stored at an unknown time", with("ord_unknown", time.Time{}), tc.want},
				{"stored before it", req, waitqueue.Redeemed},
				{"another order on the redeemed token", with("ord_other", claimed), waitqueue.RedeemConflict},
			}...)
			for _, tt := range tests {
				if got := redeem(tt.req); got != tt.want {
					t.Errorf("%s: RedeemRequest(%s) = %s, want %s", tt.name, tt.req.OrderID, got, tt.want)
				}
			}
			if st, _ := s.Stats(ctx, q); st.Active != 1 {
				t.Fatalf("%d active after the redemption, want her slot held again", st.Active)
			}
		})
	}
}

// A request and a leave the streams stored in the same millisecond — two
// streams, two leaders' clocks — cannot be told apart by time, and the
// request stands: it exists only because the claim script accepted it,
// and a leave applied before the claim would have refused it. A request
// stored a millisecond after the leave does not.
func TestARequestStoredInTheLeavesMillisecondStands(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		after time.Duration // the request's storing after the leave's
		want  waitqueue.Redemption
	}{
		{"same millisecond", 0, waitqueue.Redeemed},
		{"a millisecond after", time.Millisecond, waitqueue.RedeemLeft},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, q := linetest.New(t)
			now, err := s.Now(ctx)
			if err != nil {
				t.Fatal(err)
			}
			h := acceptedOrder(q, now.Add(-3*time.Second), now.Add(time.Minute), true)
			replay(t, s, q, h, waitqueue.StreamEntries, waitqueue.StreamAdmissions)
			req := h.orders[0]
			req.Stored = h.entries[1].At.Add(tc.after)
			if got := redeemer(t, s, q)(req); got != tc.want {
				t.Fatalf("RedeemRequest of a request stored %v after the leave = %s, want %s", tc.after, got, tc.want)
			}
		})
	}
}

// A rebuild (usherctl rebuild) writes an admission whose order is still
// pending as the admission stands — expired once its expiresAt passed: the
// order worker's redemption of the request honours it all the same.
func TestARebuiltExpiredAdmissionIsRedeemedByItsRequest(t *testing.T) {
	ctx := context.Background()
	s, q := linetest.New(t)
	now, err := s.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tok := waitqueue.TokenID(q, epoch, 1)
	expiresAt := now.Add(-time.Second)
	if _, err := s.Restore(ctx, q, []waitqueue.Record{{Seq: 1, Status: waitqueue.Expired, User: "alice", TokenID: tok,
		ReadyAt: expiresAt.Add(-5 * time.Minute), ExpiresAt: expiresAt}}); err != nil {
		t.Fatal(err)
	}
	r := redeemer(t, s, q)(waitqueue.OrderEvent{Entry: 1, TokenID: tok, OrderID: "ord_alice", User: "alice", SKU: "sku", Quantity: 1,
		RequestedAt: expiresAt.Add(-2 * time.Second), Stored: expiresAt.Add(-time.Second)})
	if r != waitqueue.Redeemed {
		t.Fatalf("RedeemRequest on the rebuilt expired admission = %s, want redeemed", r)
	}
	e, _ := s.Poll(ctx, q, 1)
	if st, _ := s.Stats(ctx, q); e.Status != waitqueue.Used || st.Active != 1 {
		t.Fatalf("alice = %s, %d active; want used, her slot held again", e.Status, st.Active)
	}
}

// The orders follower is held to the same rule live: a request published on
// the bus after a token expired unclaimed, or after its shopper left —
// naming a requestedAt from before, which the publisher writes — never
// takes the token, whether the follower applies it before the order worker
// redeems it or after.
func TestARequestStoredAfterTheExpiryOrTheLeaveNeverTakesTheToken(t *testing.T) {
	ctx := context.Background()
	s, q := linetest.New(t)
	linetest.JoinAll(t, s, q, "alice", "bob")
	tk := linetest.Tick(2)
	tk.TokenTTL = 300 * time.Millisecond
	testenv.Tick(t, s, q, tk)
	if _, err := linetest.Leave(ctx, s, q, 2, "bob"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		testenv.Tick(t, s, q, tk)
		e, _ := s.Poll(ctx, q, 1)
		return e.Status == waitqueue.Expired
	}, "alice's token expired unclaimed")
	now, err := s.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	forged := func(seq uint64, user string) waitqueue.OrderEvent {
		tok := waitqueue.TokenID(q, epoch, seq)
		return waitqueue.OrderEvent{StreamSeq: seq, Entry: seq, TokenID: tok, OrderID: "ord_" + user, User: user,
			RequestedAt: now.Add(-time.Minute), SKU: "sku", Quantity: 1, Stored: now.Add(time.Millisecond)}
	}
	reqs := []waitqueue.OrderEvent{forged(1, "alice"), forged(2, "bob")}
	if _, err := s.ApplyOrders(ctx, q, "o1", 0, time.Minute, reqs); err != nil {
		t.Fatal(err)
	}
	for i, want := range []waitqueue.Redemption{waitqueue.RedeemExpired, waitqueue.RedeemLeft} {
		if got := redeemer(t, s, q)(reqs[i]); got != want {
			t.Errorf("the worker's redeem of %s after the follower applied it = %s, want %s", reqs[i].OrderID, got, want)
		}
	}
	if st, _ := s.Stats(ctx, q); st.Active != 0 {
		t.Fatalf("%d active, want none: no slot for a token nobody ordered with", st.Active)
	}
}
