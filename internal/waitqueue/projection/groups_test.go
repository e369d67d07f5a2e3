package projection_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"usher/internal/event"
	"usher/internal/keyspace"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/linetest"
)

// grouped is the joins of one usher.joins.v2 message at stream sequence
// seq, one event per user listed, as the admitter's follower decodes it.
func grouped(seq uint64, users ...string) []waitqueue.EntryEvent {
	evs := make([]waitqueue.EntryEvent, len(users))
	for i, u := range users {
		evs[i] = waitqueue.EntryEvent{StreamSeq: seq, Grouped: true, Index: i, User: u}
	}
	return evs
}

// Joins that came several to a message take their places (event.Place):
// every join of the message is applied, ids grow in stream order across
// the switch, a usher.joined.v1 join before the first group keeps its
// sequence and one after it counts in places; a follower that starts again
// from the cursor, or one behind that applies everything again, gives the
// same ids; a double click listed twice is one place; and a tick admits in
// that order, never past the cursor's place bound.
func TestGroupedJoinsTakeTheirPlaces(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	first := append([]waitqueue.EntryEvent{{StreamSeq: 1, User: "u1"}, {StreamSeq: 2, User: "u2"}},
		grouped(3, "u3", "u4", "u3")...) // u3's double click, both in one message
	rest := append([]waitqueue.EntryEvent{{StreamSeq: 4, User: "u5"}}, grouped(5, "u6", "u4")...) // u4 again, a later message
	if _, err := s.ApplyEntries(ctx, q, epoch, 0, first); err != nil {
		t.Fatal(err)
	}
	// The follower stops and starts again from the cursor.
	cur, err := s.Cursor(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if got := cur[waitqueue.StreamEntries]; got != (waitqueue.Position{Seq: 3, StreamID: epoch, GroupsSince: 3}) {
		t.Fatalf("cursor after the first group = %+v, want at 3, groups since 3", got)
	}
	if _, err := s.ApplyEntries(ctx, q, epoch, 3, rest); err != nil {
		t.Fatal(err)
	}
	// A follower behind applies it all again: nothing changes.
	if got, err := s.ApplyEntries(ctx, q, epoch, 0, append(first, rest...)); err != nil || got.Cursor != 5 || got.Rewound {
		t.Fatalf("ApplyEntries again = %+v, %v", got, err)
	}
	want := []uint64{1, 2, event.Place(3, 0, 3), event.Place(3, 1, 3), event.Place(4, 0, 3), event.Place(5, 0, 3)}
	if !slices.Equal(want, []uint64{1, 2, 3072, 3073, 4096, 5120}) {
		t.Fatalf("places %v: the rule changed under the test", want)
	}
	line, err := testenv.Redis(t).ZRange(ctx, keyspace.Of(q).Waiting(), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if got := seqsOf(t, line); !slices.Equal(got, want) {
		t.Fatalf("line = %v, want %v (every join at its place, in stream order, double clicks once)", got, want)
	}
	for i, u := range []string{"u1", "u2", "u3", "u4", "u5", "u6"} {
		if e, err := s.Poll(ctx, q, want[i]); err != nil || e.Status != waitqueue.Waiting || e.Position != int64(i+1) {
			t.Errorf("Poll(%d) (%s) = %+v, %v; want waiting at %d", want[i], u, e, err, i+1)
		}
	}
	for _, dup := range []uint64{event.Place(3, 2, 3), event.Place(5, 1, 3)} {
		if e, err := s.Poll(ctx, q, dup); err != nil || (e.Seq != 3072 && e.Seq != 3073) {
			t.Errorf("Poll(%d) (a double click) = %+v, %v; want the user's first place", dup, e, err)
		}
	}
	cur, _ = s.Cursor(ctx, q)
	if got, wantBound := cur[waitqueue.StreamEntries].Bound(), event.PlaceBound(5, 3); got != wantBound {
		t.Errorf("cursor bound = %d, want %d", got, wantBound)
	}

	// The gateway's own ingest of a join the follower has not applied yet
	// (sequence 6, a group) is in line but beyond the bound: not admitted.
	if _, err := s.Ingest(ctx, q, epoch, event.Place(6, 0, 3), "u7", 0); err != nil {
		t.Fatal(err)
	}
	testenv.Tick(t, s, q, linetest.Tick(10))
	out, err := s.Outbox(ctx, q, 100)
	if err != nil {
		t.Fatal(err)
	}
	var admitted []uint64
	for _, a := range out {
		admitted = append(admitted, a.Seq)
	}
	slices.Sort(admitted)
	if !slices.Equal(admitted, want) {
		t.Errorf("admitted %v, want %v: all applied joins, none past the cursor's bound", admitted, want)
	}
}

func seqsOf(t *testing.T, members []string) []uint64 {
	t.Helper()
	out := make([]uint64, len(members))
	for i, m := range members {
		var n uint64
		for _, c := range m {
			if c < '0' || c > '9' {
				t.Fatalf("member %q is not a sequence", m)
			}
			n = n*10 + uint64(c-'0')
		}
		out[i] = n
	}
	return out
}

// The gateway's own ingest of a usher.joined.v1 join puts it at its place:
// its sequence while the line knows no group of the queue, sequence × 1024
// once the follower applied the first one.
func TestIngestOfAV1JoinAfterTheFirstGroupTakesItsPlace(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	if e, place, err := s.IngestJoined(ctx, q, epoch, 1, "u1", 0, waitqueue.InLine); err != nil || place != 1 || e.Seq != 1 {
		t.Fatalf("IngestJoined(1) before any group = %+v, %d, %v; want place 1", e, place, err)
	}
	if _, err := s.ApplyEntries(ctx, q, epoch, 0, append([]waitqueue.EntryEvent{{StreamSeq: 1, User: "u1"}}, grouped(2, "u2")...)); err != nil {
		t.Fatal(err)
	}
	e, place, err := s.IngestJoined(ctx, q, epoch, 3, "u3", 0, waitqueue.InLine)
	if want := event.Place(3, 0, 2); err != nil || place != want || e.Seq != want || e.Position != 3 {
		t.Fatalf("IngestJoined(3) after the group at 2 = %+v, %d, %v; want place %d, third in line", e, place, err, want)
	}
	// u1 joining again resolves to their place: no new one.
	if e, place, err := s.IngestJoined(ctx, q, epoch, 4, "u1", 0, waitqueue.InLine); err != nil || place != event.Place(4, 0, 2) || e.Seq != 1 {
		t.Fatalf("IngestJoined(4) of u1 again = %+v, %d, %v; want u1's place 1", e, place, err)
	}
}

// The gateway's ingest of a group it just stored (IngestJoins) puts each
// join at seq × 1024 + its index, before the follower has applied any
// group of the queue; a user listed twice, or in line already, resolves to
// their place; and the follower, applying the same message after, gives
// every join the same id.
func TestIngestOfAGroupPutsEachJoinAtItsPlace(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	if _, err := s.ApplyEntries(ctx, q, epoch, 0, []waitqueue.EntryEvent{{StreamSeq: 1, User: "u1"}}); err != nil {
		t.Fatal(err)
	}
	listed := []waitqueue.ListedJoin{{User: "u2"}, {User: "u3"}, {User: "u2"}, {User: "u1"}, {User: "u4"}}
	got, err := s.IngestJoins(ctx, q, epoch, 2, listed)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ place, entry uint64 }{{2048, 2048}, {2049, 2049}, {2050, 2048}, {2051, 1}, {2052, 2052}}
	for i, g := range got {
		if g.Err != nil || g.Place != want[i].place || g.Entry.Seq != want[i].entry {
			t.Errorf("join %d (%s) = %+v; want place %d, entry %d", i, listed[i].User, g, want[i].place, want[i].entry)
		}
	}
	if got[1].Entry.Status != waitqueue.Waiting || got[1].Entry.Position != 3 {
		t.Errorf("u3 = %+v; want waiting third (u1, u2 ahead)", got[1].Entry)
	}
	evs := []waitqueue.EntryEvent{{StreamSeq: 1, User: "u1"}}
	for i, j := range listed {
		evs = append(evs, waitqueue.EntryEvent{StreamSeq: 2, Grouped: true, Index: i, User: j.User, Kind: j.Kind})
	}
	if _, err := s.ApplyEntries(ctx, q, epoch, 1, evs[1:]); err != nil {
		t.Fatal(err)
	}
	line, err := testenv.Redis(t).ZRange(ctx, keyspace.Of(q).Waiting(), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := seqsOf(t, line), []uint64{1, 2048, 2049, 2052}; !slices.Equal(got, want) {
		t.Fatalf("line after the follower = %v, want %v", got, want)
	}
	// Once the follower applied a group, a later group's places count as well.
	again, err := s.IngestJoins(ctx, q, epoch, 5, []waitqueue.ListedJoin{{User: "u5"}})
	if err != nil || again[0].Err != nil || again[0].Place != event.Place(5, 0, 2) || again[0].Entry.Position != 5 {
		t.Fatalf("IngestJoins(5) = %+v, %v; want place %d, fifth in line", again, err, event.Place(5, 0, 2))
	}
}

// A group's writes to the line, its users' pointers and presence are made
// once for the whole group (ingest_group.lua): each kind of join still
// lands where a join of its own would — the pre-queue's outside the line,
// one allowed past it ahead of everyone — and every user's pointer and
// presence names their entry; a place whose record names another user is
// that join's conflict alone; a line of another stream is stale for all.
func TestAGroupsHeldBackWritesLandAsSingleJoinsWould(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	rdb := testenv.Redis(t)
	k := keyspace.Of(q)
	linetest.JoinAll(t, s, q, "u1")
	// Place 3 × 1024 + 4 already names someone else (another incarnation's record).
	if err := rdb.HSet(ctx, k.Prefix()+"e:3076", "status", "waiting", "user", "stranger").Err(); err != nil {
		t.Fatal(err)
	}
	listed := []waitqueue.ListedJoin{{User: "p1", Kind: waitqueue.PreQueue}, {User: "v1", Kind: waitqueue.Priority},
		{User: "w1"}, {User: "p1", Kind: waitqueue.PreQueue}, {User: "x1"}}
	got, err := s.IngestJoins(ctx, q, epoch, 3, listed)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Entry.Status != waitqueue.PreQueued || got[3].Entry.Seq != 3072 || got[3].Entry.Status != waitqueue.PreQueued {
		t.Errorf("p1 = %+v, then %+v; want pre-queued at 3072 both times", got[0], got[3])
	}
	if got[1].Entry.Status != waitqueue.Waiting || got[1].Entry.Position != 1 {
		t.Errorf("v1 = %+v; want waiting first, ahead of u1", got[1].Entry)
	}
	if got[2].Entry.Position != 4 {
		t.Errorf("w1 = %+v; want fourth (v1, u1 and the undrawn pre-queue ahead)", got[2].Entry)
	}
	if !errors.Is(got[4].Err, waitqueue.ErrConflict) {
		t.Errorf("x1 at a stranger's place = %+v; want a conflict", got[4])
	}
	for user, want := range map[string]string{"p1": "3072", "v1": "3073", "w1": "3074"} {
		if ptr, _ := rdb.Get(ctx, k.Prefix()+"u:"+user).Result(); ptr != want {
			t.Errorf("%s's pointer = %q, want %s", user, ptr, want)
		}
		if _, err := rdb.ZScore(ctx, k.Prefix()+"seen", want).Result(); err != nil {
			t.Errorf("%s's entry %s is not present: %v", user, want, err)
		}
	}
	line, err := rdb.ZRange(ctx, k.Waiting(), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := seqsOf(t, line), []uint64{3073, 1, 3074}; !slices.Equal(got, want) {
		t.Errorf("line = %v, want %v", got, want)
	}
	if _, err := s.IngestJoins(ctx, q, "another-epoch", 4, []waitqueue.ListedJoin{{User: "y1"}}); err != nil {
		t.Fatal(err)
	} else if again, _ := s.IngestJoins(ctx, q, "another-epoch", 4, []waitqueue.ListedJoin{{User: "y1"}, {User: "y2"}}); !errors.Is(again[0].Err, waitqueue.ErrStale) || !errors.Is(again[1].Err, waitqueue.ErrStale) {
		t.Errorf("a group into another stream's line = %+v; want stale for each join", again)
	}
}
