package line_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"usher/internal/keyspace"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/line"
	"usher/internal/waitqueue/linetest"
)

func TestIngestGivesDistinctPositionsInSequenceOrder(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := 1; i <= 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Ingest(ctx, q, epoch, uint64(i*10), fmt.Sprintf("u%d", i), 0); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for i := 1; i <= 100; i++ {
		e, err := s.Poll(ctx, q, uint64(i*10))
		if err != nil || e.Status != waitqueue.Waiting || e.Position != int64(i) || e.Waiting != 100 {
			t.Fatalf("Poll(seq %d) = %+v, %v; want waiting at %d of 100", i*10, e, err, i)
		}
	}
}

func TestIngestNeverMovesAnyoneBack(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	s.Ingest(ctx, q, epoch, 1, "alice", 0)
	s.Ingest(ctx, q, epoch, 2, "bob", 0)
	// A repeated event and a second join of a user already in line.
	again, _ := s.Ingest(ctx, q, epoch, 1, "alice", 0)
	dup, _ := s.Ingest(ctx, q, epoch, 3, "alice", 0)
	if again.Seq != 1 || again.Position != 1 || dup.Seq != 1 || dup.Position != 1 || dup.Waiting != 2 {
		t.Fatalf("re-ingest = %+v and %+v, want alice still first at seq 1 of 2", again, dup)
	}
	// The duplicate's ticket resolves to the live entry.
	if e, _ := s.Poll(ctx, q, 3); e.Seq != 1 || e.Position != 1 {
		t.Fatalf("Poll(alias) = %+v, want seq 1 position 1", e)
	}
}

// A sequence whose record names another user belongs to another
// incarnation of the entries stream: never one user's place for another.
func TestIngestRefusesASequenceOfAnotherUser(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	s.Ingest(ctx, q, epoch, 1, "alice", 0)
	if _, err := s.Ingest(ctx, q, epoch, 1, "mallory", 0); !errors.Is(err, waitqueue.ErrConflict) {
		t.Fatalf("Ingest(seq 1 for mallory) = %v, want ErrConflict", err)
	}
	if _, err := s.Ingest(ctx, q, "e2", 2, "bob", 0); err != nil {
		t.Fatalf("Ingest before any cursor = %v", err)
	}
	linetest.JoinAll(t, s, q, "alice")
	if _, err := s.Ingest(ctx, q, "e2", 3, "carol", 0); !errors.Is(err, waitqueue.ErrStale) {
		t.Fatalf("Ingest with another epoch than the line's = %v, want ErrStale", err)
	}
}

func TestPollOfUnseenSequenceIsUnknownWithTheLineLength(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	s.Ingest(ctx, q, epoch, 1, "alice", 0)
	e, err := s.Poll(ctx, q, 99)
	if err != nil || e.Status != waitqueue.Unknown || e.Waiting != 1 {
		t.Fatalf("Poll(unseen) = %+v, %v; want unknown with waiting 1", e, err)
	}
	// Once the cursor has passed a sequence without a record, it is gone
	// (its tombstone expired), not on its way.
	testenv.Applied(t, s, q, epoch, 100)
	if e, _ := s.Poll(ctx, q, 99); e.Status != waitqueue.Gone {
		t.Fatalf("Poll(behind the cursor, no record) = %+v, want gone", e)
	}
}

// A shopper's leave is to be recorded on the entries stream only if it
// took effect: one that finds the token claimed by an order changes
// nothing, so the stream never holds a leave the line did not take, which
// a replay would apply ahead of the order's request. Until it is recorded,
// leaving again says it is still to record.
func TestALeaveIsToBeRecordedOnlyIfItTookEffect(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	linetest.JoinAll(t, s, q, "alice", "bob", "carol")
	tk := linetest.Tick(2)
	testenv.Tick(t, s, q, tk)
	time.Sleep(tk.TickLength) // every readyAt has passed
	if cl, err := s.Claim(ctx, q, 1, linetest.Order(waitqueue.TokenID(q, epoch, 1), "ord_a"), time.Minute); err != nil || cl.Outcome != waitqueue.Redeemed {
		t.Fatalf("Claim(alice) = %+v, %v", cl, err)
	}
	tests := []struct {
		name     string
		seq      uint64
		user     string
		had      waitqueue.Status
		toRecord bool
	}{
		{"a token an order claimed", 1, "alice", waitqueue.Used, false},
		{"an admitted shopper", 2, "bob", waitqueue.Admitted, true},
		{"the same leave again, not recorded yet", 2, "bob", waitqueue.Left, true},
		{"a waiting shopper", 3, "carol", waitqueue.Waiting, true},
		{"a join not applied yet", 9, "dave", waitqueue.Unknown, true},
	}
	for _, tt := range tests {
		had, toRecord, err := s.Leave(ctx, q, tt.seq, tt.user)
		if err != nil || had != tt.had || toRecord != tt.toRecord {
			t.Errorf("%s: Leave = %s, %t, %v; want %s, %t", tt.name, had, toRecord, err, tt.had, tt.toRecord)
		}
	}
	if cl, _ := s.Claim(ctx, q, 2, linetest.Order(waitqueue.TokenID(q, epoch, 2), "ord_b"), time.Minute); cl.Outcome != waitqueue.RedeemLeft {
		t.Errorf("Claim after the leave = %s, want left", cl.Outcome)
	}
	want := []waitqueue.UnrecordedLeave{{Seq: 2, User: "bob"}, {Seq: 3, User: "carol"}, {Seq: 9, User: "dave"}}
	if got, err := s.LeavesToRecord(ctx, q, 10); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("LeavesToRecord = %+v, %v; want %+v", got, err, want)
	}
	if err := s.LeaveRecorded(ctx, q, waitqueue.UnrecordedLeave{Seq: 2, User: "bob"}); err != nil {
		t.Fatal(err)
	}
	if _, toRecord, _ := s.Leave(ctx, q, 2, "bob"); toRecord {
		t.Error("a leave recorded is still to record")
	}
	if got, _ := s.LeavesToRecord(ctx, q, 10); len(got) != 2 {
		t.Errorf("LeavesToRecord after one is recorded = %+v, want carol's and dave's", got)
	}
}

func TestLeave(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	linetest.JoinAll(t, s, q, "alice", "bob")
	testenv.Tick(t, s, q, linetest.Tick(1))

	t.Run("an admitted shopper frees the slot once the leave is recorded", func(t *testing.T) {
		if st, _, _ := s.Leave(ctx, q, 1, "alice"); st != waitqueue.Admitted {
			t.Fatalf("Leave(alice) = %s, want admitted", st)
		}
		if st, _ := s.Stats(ctx, q); st.Active != 1 {
			t.Fatalf("active after the leave, not recorded = %d, want 1", st.Active)
		}
		if err := s.LeaveRecorded(ctx, q, waitqueue.UnrecordedLeave{Seq: 1, User: "alice"}); err != nil {
			t.Fatal(err)
		}
		if st, _ := s.Stats(ctx, q); st.Active != 0 {
			t.Fatalf("active after the leave is recorded = %d, want 0", st.Active)
		}
	})
	t.Run("a waiting shopper leaves the line", func(t *testing.T) {
		s.Leave(ctx, q, 2, "bob")
		if st, _ := s.Stats(ctx, q); st.Waiting != 0 {
			t.Fatalf("waiting after leave = %d, want 0", st.Waiting)
		}
	})
	t.Run("a join still on its way after leaving is not ingested", func(t *testing.T) {
		s.Leave(ctx, q, 3, "carol")
		if e, _ := s.Ingest(ctx, q, epoch, 3, "carol", 0); e.Status != waitqueue.Left {
			t.Fatalf("Ingest after Leave = %+v, want left", e)
		}
	})
	t.Run("leaving ends the entry, so joining again starts a new one", func(t *testing.T) {
		if c, _ := s.Lookup(ctx, q, "bob"); c.Status.Live() {
			t.Fatalf("Lookup(bob) = %+v after leaving, want a finished entry", c)
		}
	})
}

// The gateway's ingests of one queue that wait together run as one
// command, which reads the pre-queue still to be drawn once — and again
// after a join into it: each join of such a batch is told the place it
// would be told alone. (Around a drop's opening one batch can hold late
// pre-queue joins and the first joins after it.)
func TestBatchedIngestsAroundTheOpeningTellEachItsOwnPlace(t *testing.T) {
	s, q := linetest.New(t)
	ctx := context.Background()
	joins := []line.BatchedJoin{{1, "u1", waitqueue.PreQueue}, {2, "u2", waitqueue.InLine},
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

// A shopper's own poll records them present only when the last record is
// at least the granularity old: a poll soon after one that recorded them
// writes nothing; one past the granularity moves the time on; a poll that
// is not theirs (every 0) never records.
func TestAPollRecordsPresenceAtItsGranularity(t *testing.T) {
	ctx := context.Background()
	s, q := linetest.New(t)
	linetest.JoinAll(t, s, q, "u1")
	rdb, seen := testenv.Redis(t), keyspace.Of(q).Seen()
	at := func() float64 {
		t.Helper()
		v, err := rdb.ZScore(ctx, seen, "1").Result()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if err := rdb.ZAdd(ctx, seen, redis.Z{Score: 1000, Member: "1"}).Err(); err != nil { // seen long ago
		t.Fatal(err)
	}
	if _, err := s.Poll(ctx, q, 1); err != nil || at() != 1000 {
		t.Fatalf("a poll not the shopper's own moved presence to %v (%v)", at(), err)
	}
	if _, err := s.PollPresent(ctx, q, 1, time.Hour); err != nil || at() <= 1000 {
		t.Fatalf("the shopper's poll long after the last record left presence at %v (%v)", at(), err)
	}
	recorded := at()
	if _, err := s.PollPresent(ctx, q, 1, time.Hour); err != nil || at() != recorded {
		t.Fatalf("a poll within the granularity moved presence %v -> %v (%v)", recorded, at(), err)
	}
	time.Sleep(3 * time.Millisecond)
	if _, err := s.PollPresent(ctx, q, 1, time.Millisecond); err != nil || at() <= recorded {
		t.Fatalf("a poll past the granularity left presence at %v (%v)", at(), err)
	}
}

// A join whose gateway gave up on its answer (the broker stored it late;
// the gateway was killed before answering) can be read after the retry
// the shopper made through another gateway, which put the later record in
// line first. The stream holds the earlier record first, so that is the
// shopper's place: the line moves them up to it, as a replay of the stream
// in order puts them, and the retry's ticket follows to it. Nobody else
// moves, and nobody moves back.
func TestAJoinReadAfterItsRetryIsTheShoppersPlace(t *testing.T) {
	ctx := context.Background()
	s, q := linetest.New(t)
	// Stream order: alice 1, carol 2 (the answer lost), bob 3, carol's
	// retry 4, dave 5. The gateways ingest 1, 3, 4, 5; the follower then
	// applies all five in order.
	for _, j := range []struct {
		seq  uint64
		user string
	}{{1, "alice"}, {3, "bob"}, {4, "carol"}, {5, "dave"}} {
		if _, err := s.Ingest(ctx, q, epoch, j.seq, j.user, 0); err != nil {
			t.Fatal(err)
		}
	}
	if e, _ := s.Poll(ctx, q, 4); e.Position != 3 {
		t.Fatalf("carol's retry before her first join is read = %+v, want third", e)
	}
	stream := []waitqueue.EntryEvent{
		{StreamSeq: 1, User: "alice"}, {StreamSeq: 2, User: "carol"}, {StreamSeq: 3, User: "bob"},
		{StreamSeq: 4, User: "carol"}, {StreamSeq: 5, User: "dave"},
	}
	if _, err := s.ApplyEntries(ctx, q, epoch, 0, stream); err != nil {
		t.Fatal(err)
	}
	if got, want := linetest.Line(t, s, q, 1, 2, 3, 5), []uint64{1, 2, 3, 5}; !reflect.DeepEqual(got, want) {
		t.Fatalf("line = %v, want %v (carol at her first record)", got, want)
	}
	if e, _ := s.Poll(ctx, q, 4); e.Seq != 2 || e.Position != 2 || e.Waiting != 4 {
		t.Fatalf("Poll(the retry's ticket) = %+v, want carol's place: seq 2, second of 4", e)
	}
	if c, _ := s.Lookup(ctx, q, "carol"); c.Seq != 2 || c.Status != waitqueue.Waiting {
		t.Fatalf("Lookup(carol) = %+v, want her entry at 2", c)
	}
	// Joining again finds that place, and leaving through the retry's
	// ticket leaves it.
	if e, _ := s.Ingest(ctx, q, epoch, 6, "carol", 0); e.Seq != 2 {
		t.Fatalf("carol's third join = %+v, want her place at 2", e)
	}
	if st, _, _ := s.Leave(ctx, q, 4, "carol"); st != waitqueue.Waiting {
		t.Fatalf("Leave(the retry) = %s, want waiting", st)
	}
	if got, want := linetest.Line(t, s, q, 1, 2, 3, 5), []uint64{1, 3, 5}; !reflect.DeepEqual(got, want) {
		t.Fatalf("line after carol left = %v, want %v", got, want)
	}

	// The same records applied by a follower alone, in the stream's order,
	// give the same line.
	r, q2 := linetest.New(t)
	q2 += "-replay"
	if _, err := r.ApplyEntries(ctx, q2, epoch, 0, stream); err != nil {
		t.Fatal(err)
	}
	if got, want := linetest.Line(t, r, q2, 1, 2, 3, 5), []uint64{1, 2, 3, 5}; !reflect.DeepEqual(got, want) {
		t.Fatalf("replayed line = %v, want %v", got, want)
	}
}

// An admission is never taken back: a join read after its retry was
// admitted becomes an alias of the admitted entry.
func TestAJoinReadAfterItsRetryWasAdmittedAliasesTheAdmission(t *testing.T) {
	ctx := context.Background()
	s, q := linetest.New(t)
	if _, err := s.Ingest(ctx, q, epoch, 4, "carol", 0); err != nil {
		t.Fatal(err)
	}
	testenv.Applied(t, s, q, epoch, 4)
	if r := testenv.Tick(t, s, q, linetest.Tick(1)); r.Admitted != 1 {
		t.Fatalf("tick = %+v, want carol admitted", r)
	}
	e, err := s.Ingest(ctx, q, epoch, 2, "carol", 0)
	if err != nil || e.Seq != 4 || e.Status != waitqueue.Admitted {
		t.Fatalf("Ingest(the earlier record) = %+v, %v; want carol's admitted entry 4", e, err)
	}
}
