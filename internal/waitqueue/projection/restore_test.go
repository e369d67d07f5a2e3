package projection_test

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"testing"
	"time"

	"usher/internal/keyspace"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/linetest"
	"usher/internal/waitqueue/roles"
)

// snapshot is what a shopper can observe about every sequence of a queue.
func snapshot(t *testing.T, s *roles.All, q string, seqs []uint64) map[uint64]waitqueue.Entry {
	t.Helper()
	out := map[uint64]waitqueue.Entry{}
	for _, sq := range seqs {
		e, err := s.Poll(context.Background(), q, sq)
		if err != nil {
			t.Fatal(err)
		}
		e.Rate = 0 // the measured rate is not restored
		out[sq] = e
	}
	return out
}

func TestRestoreRecreatesWhatTheLiveScriptsWrote(t *testing.T) {
	s, live := linetest.New(t)
	restored := live + "-r"
	ctx := context.Background()
	linetest.JoinAll(t, s, live, linetest.Users(6)...)
	if _, err := s.Ingest(ctx, live, epoch, 7, "u4", 0); err != nil { // u4 joins again: an alias
		t.Fatal(err)
	}
	testenv.Tick(t, s, live, linetest.Tick(2))
	if _, err := linetest.Leave(ctx, s, live, 6, "u6"); err != nil {
		t.Fatal(err)
	}
	seqs := []uint64{1, 2, 3, 4, 5, 6, 7}
	want := snapshot(t, s, live, seqs)

	ready := func(seq uint64) (time.Time, time.Time) { return want[seq].ReadyAt, want[seq].ExpiresAt }
	r1, e1 := ready(1)
	r2, e2 := ready(2)
	recs := []waitqueue.Record{
		{Seq: 1, Status: waitqueue.Admitted, User: "u1", TokenID: want[1].TokenID, ReadyAt: r1, ExpiresAt: e1},
		{Seq: 2, Status: waitqueue.Admitted, User: "u2", TokenID: want[2].TokenID, ReadyAt: r2, ExpiresAt: e2},
		{Seq: 3, Status: waitqueue.Waiting, User: "u3"},
		{Seq: 4, Status: waitqueue.Waiting, User: "u4"},
		{Seq: 5, Status: waitqueue.Waiting, User: "u5"},
		{Seq: 6, Status: waitqueue.Left, User: "u6"},
		{Seq: 7, User: "u4", Alias: 4},
	}
	res, err := s.Restore(ctx, restored, recs)
	if err != nil {
		t.Fatal(err)
	}
	wantCreated := map[waitqueue.Status]int{waitqueue.Admitted: 2, waitqueue.Waiting: 3, waitqueue.Left: 1, waitqueue.Alias: 1}
	if fmt.Sprint(res.Created) != fmt.Sprint(wantCreated) || res.Kept != 0 {
		t.Fatalf("Restore = %+v, want created %v and none kept", res, wantCreated)
	}
	got := snapshot(t, s, restored, seqs)
	for _, sq := range seqs {
		if !reflect.DeepEqual(got[sq], want[sq]) {
			t.Errorf("seq %d restored = %+v, want %+v", sq, got[sq], want[sq])
		}
	}
	for _, u := range []string{"u1", "u4", "u6"} {
		g, _ := s.Lookup(ctx, restored, u)
		w, _ := s.Lookup(ctx, live, u)
		if g != w {
			t.Errorf("Lookup(%s) restored = %+v, want %+v", u, g, w)
		}
	}
	gotStats, _ := s.Stats(ctx, restored)
	if gotStats.Active != 2 || gotStats.Waiting != 3 || gotStats.AdmittedTotal != 2 {
		t.Errorf("Stats restored = %+v, want 2 active, 3 waiting, 2 admitted in total", gotStats)
	}
	// What the stock-aware tick counts of the slots held, as the live line has it.
	rdb := testenv.Redis(t)
	if g, w := linetest.HeldIndex(t, rdb, keyspace.Of(restored)), linetest.HeldIndex(t, rdb, keyspace.Of(live)); !maps.Equal(g, w) {
		t.Errorf("held index restored = %v, want %v", g, w)
	}

	// The restored line behaves like the live one: a user in line who joins
	// again becomes an alias, a new user queues at the back.
	e, err := s.Ingest(ctx, restored, epoch, 8, "u3", 0)
	if err != nil || e.Seq != 3 || e.Position != 1 {
		t.Errorf("Ingest(u3 again) = %+v, %v; want seq 3 at position 1", e, err)
	}
	e, err = s.Ingest(ctx, restored, epoch, 9, "u9", 0)
	if err != nil || e.Seq != 9 || e.Position != 4 {
		t.Errorf("Ingest(u9) = %+v, %v; want seq 9 at position 4", e, err)
	}
}

func TestRestoreNeverOverwritesAndIsIdempotent(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	// A join the gateway ingested while the rebuild ran.
	if _, err := s.Ingest(ctx, q, epoch, 3, "late", 0); err != nil {
		t.Fatal(err)
	}
	recs := []waitqueue.Record{
		{Seq: 1, Status: waitqueue.Waiting, User: "a"},
		{Seq: 2, Status: waitqueue.Waiting, User: "b"},
		{Seq: 3, Status: waitqueue.Left, User: "stale"},
	}
	tests := []struct {
		name        string
		wantCreated int
		wantKept    int
	}{
		{"first run", 2, 1},
		{"second run", 0, 3},
	}
	for _, tt := range tests {
		res, err := s.Restore(ctx, q, recs)
		if err != nil {
			t.Fatal(err)
		}
		created := 0
		for _, n := range res.Created {
			created += n
		}
		if created != tt.wantCreated || res.Kept != tt.wantKept {
			t.Errorf("%s: Restore = %+v, want %d created, %d kept", tt.name, res, tt.wantCreated, tt.wantKept)
		}
	}
	e, _ := s.Poll(ctx, q, 3)
	if e.Status != waitqueue.Waiting || e.Position != 3 || e.User != "late" {
		t.Errorf("Poll(3) = %+v, want the late join still waiting at position 3", e)
	}
	if n, err := s.Existing(ctx, q, []uint64{1, 2, 3, 4}); err != nil || n != 3 {
		t.Errorf("Existing(1..4) = %d, %v; want 3", n, err)
	}
}
