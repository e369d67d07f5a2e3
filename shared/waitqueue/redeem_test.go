package waitqueue_test

import (
	"context"
	"testing"
	"time"

	"usher/shared/waitqueue"
)

func TestRedeemAndRelease(t *testing.T) {
	s, q := newStore(t)
	ctx := context.Background()
	now := time.UnixMilli(1_800_000_000_000)
	s.Ingest(ctx, q, 1, "alice")
	s.Ingest(ctx, q, 2, "bob")
	s.Admit(ctx, q, tick(now, 1))
	tok := q + ":1"
	hold := now.Add(time.Hour) // far past the token's 300 s expiry

	tests := []struct {
		name    string
		seq     uint64
		tokenID string
		orderID string
		want    waitqueue.Redemption
	}{
		{"an admitted token is redeemed", 1, tok, "ord_a", waitqueue.Redeemed},
		{"the same order again is idempotent", 1, tok, "ord_a", waitqueue.Redeemed},
		{"another order on a redeemed token is refused", 1, tok, "ord_b", waitqueue.RedeemConflict},
		{"a token id that is not the entry's is unknown", 1, q + ":9", "ord_c", waitqueue.RedeemUnknown},
		{"a waiting entry has no token", 2, q + ":2", "ord_d", waitqueue.RedeemUnknown},
	}
	for _, tt := range tests {
		got, err := s.Redeem(ctx, q, tt.seq, tt.tokenID, tt.orderID, hold)
		if err != nil || got != tt.want {
			t.Errorf("%s: Redeem(%d, %s, %s) = %v, %v, want %v", tt.name, tt.seq, tt.tokenID, tt.orderID, got, err, tt.want)
		}
	}

	t.Run("a redeemed token is not expired while its order is in flight", func(t *testing.T) {
		r, _ := s.Admit(ctx, q, tick(now.Add(10*time.Minute), 1))
		if r.Expired != 0 || r.Active != 1 || r.Admitted != 0 {
			t.Fatalf("tick past the token's expiry = %+v, want the slot still held", r)
		}
		if e, _ := s.Poll(ctx, q, 1); e.Status != waitqueue.Used {
			t.Fatalf("status = %s, want used", e.Status)
		}
	})
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
		r, _ := s.Admit(ctx, q, tick(now.Add(10*time.Minute), 1))
		if r.Admitted != 1 {
			t.Fatalf("tick after release admitted %d, want the next shopper", r.Admitted)
		}
	})
	t.Run("an expired token cannot be redeemed", func(t *testing.T) {
		s.Admit(ctx, q, tick(now.Add(time.Hour), 1))
		if got, _ := s.Redeem(ctx, q, 2, q+":2", "ord_e", hold); got != waitqueue.RedeemExpired {
			t.Fatalf("Redeem(expired) = %v, want expired", got)
		}
	})
	t.Run("a redeemed token whose hold ran out frees its slot and stays used", func(t *testing.T) {
		s.Ingest(ctx, q, 3, "carol")
		s.Admit(ctx, q, tick(now.Add(2*time.Hour), 1))
		s.Redeem(ctx, q, 3, q+":3", "ord_f", now.Add(2*time.Hour+time.Minute))
		r, _ := s.Admit(ctx, q, tick(now.Add(3*time.Hour), 1))
		if r.Active != 0 || r.Expired != 1 {
			t.Fatalf("tick past the hold = %+v, want the slot freed", r)
		}
		if e, _ := s.Poll(ctx, q, 3); e.Status != waitqueue.Used {
			t.Fatalf("status = %s, want used", e.Status)
		}
	})
}

func TestParseTokenID(t *testing.T) {
	tests := []struct {
		in    string
		q     string
		seq   uint64
		valid bool
	}{
		{"demo:42", "demo", 42, true},
		{"a-b_c:1", "a-b_c", 1, true},
		{"demo", "", 0, false},
		{":1", "", 0, false},
		{"demo:x", "", 0, false},
	}
	for _, tt := range tests {
		q, seq, ok := waitqueue.ParseTokenID(tt.in)
		if q != tt.q || seq != tt.seq || ok != tt.valid {
			t.Errorf("ParseTokenID(%q) = %q, %d, %v, want %q, %d, %v", tt.in, q, seq, ok, tt.q, tt.seq, tt.valid)
		}
	}
}
