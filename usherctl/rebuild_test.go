package main

import (
	"context"
	"fmt"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"usher/internal/catalog"
	"usher/internal/event"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/linetest"
	"usher/internal/waitqueue/roles"
)

// line is a world with a private Redis and the live waitqueue scripts, so a
// test can make history the way the gateway and admitter make it, then
// lose Redis.
type liveLine struct {
	*world
	rdb   redis.UniversalClient
	store *roles.All
	q     string
	epoch string
	seqs  []uint64          // every join, in order
	users map[string]bool   // every user who joined
	owner map[uint64]string // join sequence → user
	alias uint64            // the duplicate join history made
	// usedOrder is the order that redeemed the token history used.
	usedOrder string
	// claimedLeft is the entry whose shopper left after ordering.
	claimedLeft uint64
	// since is the sequence of the queue's first usher.joins.v2 message
	// (0: none): joins take their places (event.Place) from it.
	since uint64
}

func newLiveLine(t *testing.T) *liveLine {
	t.Helper()
	w := newWorld(t)
	w.redisURL, _ = testenv.RedisServer(t) // private: this test flushes it
	rdb, err := waitqueue.DialURL(w.redisURL, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	return &liveLine{world: w, rdb: rdb, store: roles.New(rdb), q: testenv.Name(t), epoch: w.epoch,
		users: map[string]bool{}, owner: map[uint64]string{}}
}

// join publishes a join and ingests it, as the gateway does.
func (l *liveLine) join(user string) uint64 {
	l.t.Helper()
	seq := event.Place(l.world.join(l.q, user), 0, l.since)
	if _, err := l.store.Ingest(context.Background(), l.q, l.epoch, seq, user, 0); err != nil {
		l.t.Fatal(err)
	}
	l.seqs = append(l.seqs, seq)
	l.users[user] = true
	l.owner[seq] = user
	return seq
}

// leave publishes a leave and applies it, as the gateway does.
func (l *liveLine) leave(seq uint64) {
	l.t.Helper()
	l.world.leave(l.q, seq, l.owner[seq])
	if _, err := linetest.Leave(context.Background(), l.store, l.q, seq, l.owner[seq]); err != nil {
		l.t.Fatal(err)
	}
}

// tick runs one admission tick (on Redis time) and announces the outbox,
// as the admitter does once its follower has applied every join.
func (l *liveLine) tick(target int, ttl time.Duration) {
	l.t.Helper()
	ctx := context.Background()
	testenv.Applied(l.t, l.store, l.q, l.epoch, 1<<40)
	testenv.Tick(l.t, l.store, l.q, waitqueue.Tick{Epoch: l.epoch, TargetActive: target, TickLength: 10 * time.Millisecond,
		TokenTTL: ttl, Offset: 500})
	pending, err := l.store.Outbox(ctx, l.q, 1000)
	if err != nil {
		l.t.Fatal(err)
	}
	var done []uint64
	for _, a := range pending {
		l.admit(l.q, a.Seq, a.User, a.ReadyAt, a.ExpiresAt)
		done = append(done, a.Seq)
	}
	if err := l.store.Announced(ctx, l.q, done); err != nil {
		l.t.Fatal(err)
	}
}

// state is everything a shopper or ops can see of the queue in Redis.
type state struct {
	entries map[uint64]waitqueue.Entry
	lookups map[string]string
	stats   waitqueue.Stats
}

func (l *liveLine) state() state {
	l.t.Helper()
	ctx := context.Background()
	s := state{entries: map[uint64]waitqueue.Entry{}, lookups: map[string]string{}}
	for _, seq := range l.seqs {
		e, err := l.store.Poll(ctx, l.q, seq)
		if err != nil {
			l.t.Fatal(err)
		}
		e.Rate = 0 // measured over the last minute; not part of the record
		s.entries[seq] = e
	}
	for u := range l.users {
		c, err := l.store.Lookup(ctx, l.q, u)
		seq, st, ok := c.Seq, c.Status, c.Found
		if err != nil {
			l.t.Fatal(err)
		}
		s.lookups[u] = fmt.Sprint(seq, st, ok)
	}
	var err error
	if s.stats, err = l.store.Stats(ctx, l.q); err != nil {
		l.t.Fatal(err)
	}
	s.stats.AdmitRatePerSec = 0
	s.stats.LastTick = time.Time{} // derived: the next tick sets it again
	return s
}

func (l *liveLine) flush() {
	l.t.Helper()
	if err := l.rdb.FlushAll(context.Background()).Err(); err != nil {
		l.t.Fatal(err)
	}
}

// history makes a queue with every kind of entry: waiting, admitted (READY),
// expired, used, left while waiting, left after admission, and a duplicate
// join (an alias).
func (l *liveLine) history() {
	l.t.Helper()
	ctx := context.Background()
	for i := range 30 {
		l.join(fmt.Sprintf("u%02d", i))
	}
	l.alias = l.join("u03") // u03 joins again while in line: an alias of the first join
	// Three are admitted with tokens that live 300 ms, and expire.
	l.tick(3, 300*time.Millisecond)
	time.Sleep(400 * time.Millisecond)
	// Now: those three expire and six more are admitted.
	l.tick(6, 5*time.Minute)
	l.join("u00")       // u00's token expired: this is a new entry at the back
	l.leave(l.seqs[20]) // left while waiting
	l.leave(l.seqs[4])  // left after admission: frees the slot
	// u05 ordered: the order path redeems the token, publishes the order's
	// end and releases the slot, as the orderworker does.
	used := l.seqs[5]
	tok := waitqueue.TokenID(l.q, l.epoch, used)
	l.usedOrder = "order-" + tok
	if r, err := l.store.Redeem(ctx, l.q, used, tok, l.usedOrder, time.Now().Add(time.Minute)); err != nil || r != waitqueue.Redeemed {
		l.t.Fatalf("Redeem = %v, %v", r, err)
	}
	l.order(event.TypeOrderCompleted, l.q, tok, l.usedOrder, time.Now())
	if _, err := l.store.Release(ctx, l.q, used, l.usedOrder); err != nil {
		l.t.Fatal(err)
	}
	// u06 ordered at the gateway (the claim takes the token, then the
	// request is published), left while the order was being paid — the
	// leave finds the token used and changes nothing — and the order was
	// paid: u06 is used, not left.
	l.claimedLeft = l.seqs[6]
	ctok := waitqueue.TokenID(l.q, l.epoch, l.claimedLeft)
	corder := "order-" + ctok
	c, err := l.store.Claim(ctx, l.q, l.claimedLeft, waitqueue.Order{ID: corder, TokenID: ctok, User: l.owner[l.claimedLeft], SKU: "sku", Quantity: 1}, time.Minute)
	if err != nil || c.Outcome != waitqueue.Redeemed {
		l.t.Fatalf("Claim = %+v, %v", c, err)
	}
	l.order(event.TypeOrderRequested, l.q, ctok, corder, c.At)
	l.leave(l.claimedLeft)
	l.order(event.TypeOrderCompleted, l.q, ctok, corder, time.Now())
	if _, err := l.store.Release(ctx, l.q, l.claimedLeft, corder); err != nil {
		l.t.Fatal(err)
	}
}

// statusCount counts entries of their own (not the alias) by status.
func (l *liveLine) statusCount(s state, st waitqueue.Status) int {
	n := 0
	for seq, e := range s.entries {
		if seq != l.alias && e.Status == st {
			n++
		}
	}
	return n
}

func TestRebuildRestoresEveryShopperToTheSamePlace(t *testing.T) {
	l := newLiveLine(t)
	l.history()
	want := l.state()
	// The history covers every kind of entry, or this test proves little.
	for _, st := range []waitqueue.Status{waitqueue.Waiting, waitqueue.Admitted, waitqueue.Expired, waitqueue.Used, waitqueue.Left} {
		if l.statusCount(want, st) == 0 {
			t.Fatalf("history has no %s entry", st)
		}
	}

	l.flush()
	r := l.usherctl("rebuild", "--queue", l.q)
	if r.err != nil {
		t.Fatalf("rebuild: %v\n%s%s", r.err, r.stdout, r.stderr)
	}
	if st := want.entries[l.claimedLeft].Status; st != waitqueue.Used {
		t.Fatalf("the shopper who left after ordering is %s in the live line, want used", st)
	}
	sameState(t, l, l.state(), want)
	// The redeemed token keeps its order id: the same order redeeming again
	// is told its slot is gone (the order finished and freed it), another
	// order is refused.
	tok := waitqueue.TokenID(l.q, l.epoch, l.seqs[5])
	for _, tt := range []struct {
		order string
		want  waitqueue.Redemption
	}{{l.usedOrder, waitqueue.RedeemLapsed}, {"another", waitqueue.RedeemConflict}} {
		if got, err := l.store.Redeem(context.Background(), l.q, l.seqs[5], tok, tt.order, time.Now().Add(time.Minute)); err != nil || got != tt.want {
			t.Errorf("Redeem(%s) after rebuild = %v, %v; want %v", tt.order, got, err, tt.want)
		}
	}
	wantReport := fmt.Sprintf("restored %d records: waiting=%d admitted=%d expired=%d used=%d left=%d alias=1",
		len(l.seqs), l.statusCount(want, waitqueue.Waiting), l.statusCount(want, waitqueue.Admitted),
		l.statusCount(want, waitqueue.Expired), l.statusCount(want, waitqueue.Used), l.statusCount(want, waitqueue.Left))
	if !strings.Contains(r.stdout, wantReport) {
		t.Errorf("rebuild printed %q, want %q", r.stdout, wantReport)
	}
}

func TestRebuildRefusesAnIntactQueueAndIsIdempotentWhenForced(t *testing.T) {
	l := newLiveLine(t)
	l.history()
	want := l.state()

	r := l.usherctl("rebuild", "--queue", l.q)
	if r.code != exitFailure || !strings.Contains(r.err.Error(), "looks intact") {
		t.Fatalf("rebuild of an intact queue = exit %d, %v; want exit 1 'looks intact'", r.code, r.err)
	}
	r = l.usherctl("rebuild", "--queue", l.q, "--force")
	if r.err != nil || !strings.Contains(r.stdout, "restored 0 records") || !strings.Contains(r.stdout, fmt.Sprintf("kept %d", len(l.seqs))) {
		t.Fatalf("rebuild --force of an intact queue = %v, %q; want nothing restored, all kept", r.err, r.stdout)
	}
	got := l.state()
	for _, seq := range l.seqs {
		if !reflect.DeepEqual(got.entries[seq], want.entries[seq]) {
			t.Errorf("seq %d after forced rebuild = %+v, want %+v (untouched)", seq, got.entries[seq], want.entries[seq])
		}
	}
}

func TestAJoinDuringTheRebuildIsNotLost(t *testing.T) {
	l := newLiveLine(t)
	l.history()
	want := l.state()
	l.flush()

	var late uint64
	r := l.run(invocation{edit: func(c *cli) {
		c.rebuildChunk = 5
		c.hooks.rebuildBatch = func(int) {
			if late == 0 { // after the first chunk, a shopper joins through the gateway
				late = l.join("late")
			}
		}
	}}, "rebuild", "--queue", l.q)
	if r.err != nil {
		t.Fatalf("rebuild: %v\n%s", r.err, r.stderr)
	}
	got := l.state()
	for seq, w := range want.entries {
		w.Waiting++ // the late joiner is waiting too
		if !reflect.DeepEqual(got.entries[seq], w) {
			t.Errorf("seq %d after rebuild = %+v, want %+v", seq, got.entries[seq], w)
		}
	}
	e := got.entries[late]
	if e.Status != waitqueue.Waiting || e.Position != e.Waiting || e.User != "late" {
		t.Errorf("late joiner = %+v, want waiting at the back of the line", e)
	}
}

// A queue nothing knows of (a typo) is not rebuilt: "rebuilt from 0 joins"
// and exit 0 passed the typo off as a rebuilt queue.
func TestRebuildOfAQueueNothingKnowsFails(t *testing.T) {
	l := newLiveLine(t)
	for _, args := range [][]string{{"rebuild", "--queue", l.q}, {"rebuild", "--queue", l.q, "--dry-run"}} {
		r := l.usherctl(args...)
		if r.code != 1 || r.err == nil || !strings.Contains(r.err.Error(), "no queue") {
			t.Errorf("%q of an unknown queue = exit %d, %v\n%s; want exit 1 saying there is no such queue", args, r.code, r.err, r.stdout)
		}
	}
	l.world.join(l.q, "alice") // in the stream, lost from Redis
	if r := l.usherctl("rebuild", "--queue", l.q, "--dry-run"); r.code != 0 {
		t.Errorf("rebuild --dry-run of a queue the streams know = exit %d, %v", r.code, r.err)
	}
}

// A deleted queue's line is not put back: no admitter works on it, so the
// line would stay in Redis with nobody to admit from it or remove it.
func TestRebuildOfADeletedQueueIsRefused(t *testing.T) {
	l := newLiveLine(t)
	l.join("alice")
	ctx := context.Background()
	queues, err := catalog.Open(ctx, l.world.js, 1)
	if err != nil {
		t.Fatal(err)
	}
	closed := catalog.Defaults(l.q)
	closed.State = catalog.StateClosed
	if _, err := queues.Put(ctx, closed); err != nil {
		t.Fatal(err)
	}
	if _, err := queues.Delete(ctx, l.q, time.Now(), func(catalog.Config) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := l.rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	r := l.usherctl("rebuild", "--queue", l.q)
	if r.code != 1 || r.err == nil || !strings.Contains(r.err.Error(), "was deleted") {
		t.Fatalf("rebuild of a deleted queue = exit %d, %v\n%s; want exit 1 saying it was deleted", r.code, r.err, r.stdout)
	}
	if n, err := l.rdb.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Errorf("Redis after the refused rebuild: %d keys, %v; want none", n, err)
	}
}

// With Redis down an operator sees one error, usherctl's, naming Redis and
// what refused: go-redis's own logger printed its dial failures on stderr
// first ("redis: … connection pool: failed to dial after 5 attempts: …"),
// lines of another format that read as more failures.
func TestRebuildWithRedisDownSaysSoOnce(t *testing.T) {
	w := newWorld(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "redis://" + ln.Addr().String() + "/0" // nothing listens there once closed
	ln.Close()
	r := usherctlProcess(t, map[string]string{"USHER_NATS_URL": w.natsURL, "USHER_REDIS_URL": down, "USER": "tester"},
		"rebuild", "--queue", "drop")
	lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
	if r.code != exitFailure || len(lines) != 1 || !strings.HasPrefix(lines[0], "usherctl: ") ||
		!strings.Contains(lines[0], "redis") || !strings.Contains(lines[0], "connection refused") {
		t.Errorf("rebuild with Redis down = exit %d, stderr:\n%s\nwant exit 1 and one line, usherctl's, naming Redis's refusal", r.code, r.stderr)
	}
	if r.stdout != "" {
		t.Errorf("rebuild with Redis down printed %q on stdout, want nothing", r.stdout)
	}
}
