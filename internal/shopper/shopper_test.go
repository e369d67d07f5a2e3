package shopper_test

import (
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"usher/internal/catalog"
	"usher/internal/shopper"
	"usher/internal/token"
	"usher/internal/waitqueue"
)

func TestOfSaysWhatTheLineHolds(t *testing.T) {
	keys, err := token.LoadKeyring(filepath.Join(t.TempDir(), "k"), nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.UnixMilli(1_800_000_000_000)
	open, closed := catalog.Defaults("q"), catalog.Defaults("q")
	closed.State, closed.ClosedReason = catalog.StateClosed, catalog.ReasonSoldOut
	ended := catalog.Defaults("q") // closesAt passed, not closed in the catalog yet (the admitter does it a tick later)
	ended.ClosesAt = &now
	admitted := waitqueue.Entry{Seq: 7, Status: waitqueue.Admitted, Waiting: 3, TokenID: "q:e1:7",
		ReadyAt: now.Add(-time.Second), ExpiresAt: now.Add(time.Minute)}
	early := admitted
	early.ReadyAt = now.Add(time.Second)
	alone := early // nobody behind: the line's count (Waiting) is 0
	alone.Waiting = 0
	// A stock-aware queue's figures come with every read of the line.
	stocked := early
	stocked.Stock, stocked.SKUs = waitqueue.StockAvailable, []string{"shoe-41"}
	tests := []struct {
		name string
		e    waitqueue.Entry
		cfg  catalog.Config
		want shopper.View
	}{
		{"waiting, the rate measured", waitqueue.Entry{Status: waitqueue.Waiting, Position: 4, Waiting: 9, Rate: 2}, open,
			shopper.View{Status: shopper.Waiting, Position: 4, Waiting: 9, ETA: 2, ETAKnown: true}},
		{"waiting, nobody admitted yet: no promise", waitqueue.Entry{Status: waitqueue.Waiting, Position: 4, Waiting: 9}, open,
			shopper.View{Status: shopper.Waiting, Position: 4, Waiting: 9}},
		{"waiting while the last units are held ahead", waitqueue.Entry{Status: waitqueue.Waiting, Position: 4, Waiting: 9,
			Stock: waitqueue.StockHeld, SKUs: []string{"shoe-41"}}, open,
			shopper.View{Status: shopper.Waiting, Position: 4, Waiting: 9, Stock: "held", SKUs: []string{"shoe-41"}}},
		{"joined, not applied yet: at the back, of the line with them", waitqueue.Entry{Status: waitqueue.Unknown, Waiting: 9}, open,
			shopper.View{Status: shopper.Waiting, Position: 10, Waiting: 10}},
		{"waiting in a closed queue", waitqueue.Entry{Status: waitqueue.Waiting, Position: 4, Waiting: 9}, closed,
			shopper.View{Status: shopper.Closed, Waiting: 9, Reason: "sold_out"}},
		{"waiting once closesAt passed", waitqueue.Entry{Status: waitqueue.Waiting, Position: 4, Waiting: 9}, ended,
			shopper.View{Status: shopper.Closed, Waiting: 9, Reason: "ended"}},
		{"pre-queued once closesAt passed", waitqueue.Entry{Status: waitqueue.PreQueued, Waiting: 9}, ended,
			shopper.View{Status: shopper.Closed, Waiting: 9, Reason: "ended"}},
		{"admitted, before readyAt: first of the line, which holds them (3 behind)", early, open,
			shopper.View{Status: shopper.Waiting, Position: 1, Waiting: 4, ETAKnown: true, Admitted: true, ReadyAt: early.ReadyAt}},
		{"admitted alone, before readyAt: 1 of 1, never 1 of 0", alone, open,
			shopper.View{Status: shopper.Waiting, Position: 1, Waiting: 1, ETAKnown: true, Admitted: true, ReadyAt: early.ReadyAt}},
		{"admitted, before readyAt, in a stock-aware queue: the stock too", stocked, open,
			shopper.View{Status: shopper.Waiting, Position: 1, Waiting: 4, ETAKnown: true, Admitted: true, ReadyAt: early.ReadyAt,
				Stock: "available", SKUs: []string{"shoe-41"}}},
		{"waiting before the store reported any stock: none said", waitqueue.Entry{Status: waitqueue.Waiting, Position: 4, Waiting: 9,
			Stock: waitqueue.StockUnknown}, open,
			shopper.View{Status: shopper.Waiting, Position: 4, Waiting: 9}},
		{"expired", waitqueue.Entry{Status: waitqueue.Expired}, open, shopper.View{Status: shopper.Expired}},
		{"used", waitqueue.Entry{Status: waitqueue.Used}, open, shopper.View{Status: shopper.Used}},
		{"left", waitqueue.Entry{Status: waitqueue.Left}, open, shopper.View{Status: shopper.Left}},
		{"forgotten", waitqueue.Entry{Status: waitqueue.Gone}, open, shopper.View{Status: shopper.Expired}},
		{"forgotten in a closed queue", waitqueue.Entry{Status: waitqueue.Gone}, closed, shopper.View{Status: shopper.Closed, Reason: "sold_out"}},
	}
	for _, tt := range tests {
		got, err := shopper.Of(tt.e, tt.cfg, "alice", now, keys)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: Of = %+v, %v; want %+v", tt.name, got, err, tt.want)
		}
	}

	// READY: the token is the admission's, whichever process reads it.
	v, err := shopper.Of(admitted, closed, "alice", now, keys) // an admitted shopper keeps their token
	if err != nil || v.Status != shopper.Ready || v.Token == "" || !v.ReadyAt.Equal(admitted.ReadyAt) || !v.ExpiresAt.Equal(admitted.ExpiresAt) {
		t.Fatalf("Of(admitted) = %+v, %v; want READY with the admission's token", v, err)
	}
	if v, err := shopper.Of(admitted, ended, "alice", now, keys); err != nil || v.Status != shopper.Ready {
		t.Fatalf("Of(admitted) once closesAt passed = %+v, %v; want READY: a token handed out stays good until it expires", v, err)
	}
	// READY in a stock-aware queue says which SKUs have units left, so the
	// shopper does not choose one that ran out while they waited.
	stocked.ReadyAt = admitted.ReadyAt
	if v, err := shopper.Of(stocked, open, "alice", now, keys); err != nil || v.Status != shopper.Ready ||
		v.Stock != "available" || !reflect.DeepEqual(v.SKUs, []string{"shoe-41"}) {
		t.Errorf("Of(admitted) in a stock-aware queue = %+v, %v; want READY with stock available and skus [shoe-41]", v, err)
	}
	unknown := admitted
	unknown.Stock = waitqueue.StockUnknown
	if v, err := shopper.Of(unknown, open, "alice", now, keys); err != nil || v.Status != shopper.Ready || v.Stock != "" || v.SKUs != nil {
		t.Errorf("Of(admitted) before the store reported stock = %+v, %v; want READY without stock", v, err)
	}
	again, _ := shopper.Of(admitted, open, "alice", now.Add(time.Second), keys)
	if again.Token != v.Token {
		t.Error("two reads of one admission minted two tokens")
	}
	c, err := keys.Verify(v.Token, now)
	if err != nil || c.ID != admitted.TokenID || c.User != "alice" || c.Queue != "q" {
		t.Errorf("token claims = %+v, %v", c, err)
	}
	if _, err := shopper.Token(waitqueue.Entry{Status: waitqueue.Waiting}, "q", "alice", keys); err == nil {
		t.Error("Token minted for an entry that is not admitted")
	}
}
