package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"usher/internal/catalog"
	"usher/internal/event"
	"usher/internal/lottery"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
)

func TestAuditPassesAFairHistoryAndCatchesBrokenOnes(t *testing.T) {
	w := newWorld(t)
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	ms := func(n int) time.Time { return base.Add(time.Duration(n) * time.Millisecond) }
	tests := []struct {
		name string
		// history publishes the queue's events; seqs are its joins.
		history    func(q string, seqs []uint64)
		wantCode   int
		wantReport []string
	}{
		{
			name: "clean: FIFO, slots freed by expiry, order and leave before refills",
			history: func(q string, s []uint64) {
				w.admit(q, s[0], "u0", ms(0), ms(1000))
				w.admit(q, s[1], "u1", ms(10), ms(5000))
				w.order(event.TypeOrderRequested, q, waitqueue.TokenID(q, w.epoch, s[1]), "o1", ms(400))
				w.order(event.TypeOrderCompleted, q, waitqueue.TokenID(q, w.epoch, s[1]), "o1", ms(500))
				w.admit(q, s[2], "u2", ms(600), ms(5000))  // after u1's order freed its slot
				w.admit(q, s[3], "u3", ms(1000), ms(5000)) // when u0's token expired
			},
			wantCode:   exitOK,
			wantReport: []string{"ok       admission in join order", "ok       slots held <= targetActive", "verdict: CLEAN"},
		},
		{
			name: "events fed out of join order",
			history: func(q string, s []uint64) {
				w.admit(q, s[1], "u1", ms(0), ms(1000))
				w.admit(q, s[0], "u0", ms(0), ms(1000))
			},
			wantCode:   exitFailure,
			wantReport: []string{"VIOLATED admission in join order", "after seq", "verdict: VIOLATIONS"},
		},
		{
			// A tick's publish failed over a leader change and went again
			// after the next tick's: stored late, decided in order.
			name: "an admission stored after a later tick's, decided before it",
			history: func(q string, s []uint64) {
				w.admit(q, s[1], "u1", ms(100), ms(5000))
				w.admit(q, s[0], "u0", ms(0), ms(5000))
			},
			wantCode:   exitOK,
			wantReport: []string{"ok       admission in join order", "verdict: CLEAN"},
		},
		{
			name: "decided out of join order",
			history: func(q string, s []uint64) {
				w.admit(q, s[0], "u0", ms(100), ms(5000))
				w.admit(q, s[1], "u1", ms(0), ms(5000))
			},
			wantCode:   exitFailure,
			wantReport: []string{"VIOLATED admission in join order", "seq ", "admitted (readyAt", "verdict: VIOLATIONS"},
		},
		{
			name: "a waiting shopper passed over",
			history: func(q string, s []uint64) {
				w.admit(q, s[1], "u1", ms(0), ms(1000))
			},
			wantCode:   exitFailure,
			wantReport: []string{"was waiting when seq", "verdict: VIOLATIONS"},
		},
		{
			name: "an over-admission",
			history: func(q string, s []uint64) {
				w.admit(q, s[0], "u0", ms(0), ms(5000))
				w.admit(q, s[1], "u1", ms(10), ms(5000))
				w.admit(q, s[2], "u2", ms(20), ms(5000)) // a third slot with targetActive 2
			},
			wantCode:   exitFailure,
			wantReport: []string{"VIOLATED slots held <= targetActive: 1 exception", "3 slots held, targetActive 2"},
		},
		{
			name: "a token redeemed twice",
			history: func(q string, s []uint64) {
				tok := waitqueue.TokenID(q, w.epoch, s[0])
				w.admit(q, s[0], "u0", ms(0), ms(5000))
				w.order(event.TypeOrderRequested, q, tok, "o1", ms(100))
				w.order(event.TypeOrderRequested, q, tok, "o1", ms(101)) // a double submit: the same order
				w.order(event.TypeOrderCompleted, q, tok, "o2", ms(200))
			},
			wantCode:   exitFailure,
			wantReport: []string{"VIOLATED no token redeemed twice", "redeemed by 2 orders: o1, o2"},
		},
		{
			name: "admitted twice for one ticket",
			history: func(q string, s []uint64) {
				w.admit(q, s[0], "u0", ms(0), ms(1000))
				w.publish(event.AdmittedSubject(q), "again", event.TypeAdmitted, ms(2000), event.Admitted{
					Queue: q, User: "u0", Seq: s[0], TokenID: "again", ReadyAt: ms(2000), ExpiresAt: ms(3000)})
			},
			wantCode:   exitFailure,
			wantReport: []string{"VIOLATED nobody admitted twice"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := testenv.Name(t)
			w.configured(q, 2, 0)
			var seqs []uint64
			for i := range 4 {
				seqs = append(seqs, w.join(q, fmt.Sprintf("u%d", i)))
			}
			tt.history(q, seqs)
			r := w.usherctl("audit", "--queue", q)
			if r.code != tt.wantCode {
				t.Errorf("audit exit = %d (%v), want %d\n%s", r.code, r.err, tt.wantCode, r.stdout)
			}
			for _, want := range tt.wantReport {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("audit printed\n%s\nwant it to contain %q", r.stdout, want)
				}
			}
		})
	}
}

func TestAuditSaysWhereTargetActiveCameFrom(t *testing.T) {
	w := newWorld(t)
	queues, err := catalog.Open(context.Background(), w.js, 1)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		configure func(q string)
		want      string
	}{
		{"config history", func(q string) { w.configured(q, 5, 0); w.configured(q, 7, 5) },
			"targetActive taken from the USHER_OPS config_changed history (2 changes)"},
		{"current catalog", func(q string) {
			cfg := catalog.Defaults(q)
			if _, err := queues.Put(context.Background(), cfg); err != nil {
				t.Fatal(err)
			}
		}, "targetActive taken from the current catalog (no config_changed history for this queue)"},
		{"nothing known", func(string) {}, "SKIPPED  slots held <= targetActive: targetActive unknown"},
	}
	for _, tt := range tests {
		q := testenv.Name(t)
		tt.configure(q)
		w.join(q, "alice")
		r := w.usherctl("audit", "--queue", q)
		if r.err != nil || !strings.Contains(r.stdout, tt.want) {
			t.Errorf("%s: audit = %v\n%s\nwant %q", tt.name, r.err, r.stdout, tt.want)
		}
	}
}

// A queue nothing knows of (a typo) is no fair line: audit said "verdict:
// CLEAN" and exit 0 for it.
func TestAuditOfAQueueNothingKnowsFails(t *testing.T) {
	w := newWorld(t)
	r := w.usherctl("audit", "--queue", testenv.Name(t))
	if r.code != 1 || strings.Contains(r.stdout, "CLEAN") || r.err == nil || !strings.Contains(r.err.Error(), "no queue") {
		t.Fatalf("audit of an unknown queue = exit %d, %v\n%s; want exit 1 saying there is no such queue", r.code, r.err, r.stdout)
	}
}

func TestAHistoryMadeByTheLiveScriptsAuditsClean(t *testing.T) {
	l := newLiveLine(t)
	l.configured(l.q, 6, 3) // before it: 3 (the first tick, an hour ago); after: 6
	l.history()             // admits 3, then 6 at once, with leaves, an order and an alias
	r := l.usherctl("audit", "--queue", l.q)
	if r.err != nil || !strings.Contains(r.stdout, "verdict: CLEAN") {
		t.Fatalf("audit = %v\n%s\nwant a clean verdict", r.err, r.stdout)
	}
}

func TestAuditCatchesAnOverAdmissionByTheLiveScripts(t *testing.T) {
	l := newLiveLine(t)
	l.configured(l.q, 2, 0)
	for i := range 4 {
		l.join(fmt.Sprintf("u%d", i))
	}
	l.tick(3, time.Minute) // an admitter with a stale targetActive of 3
	r := l.usherctl("audit", "--queue", l.q)
	if r.code != exitFailure || !strings.Contains(r.stdout, "3 slots held, targetActive 2") {
		t.Fatalf("audit = exit %d\n%s\nwant the third slot reported", r.code, r.stdout)
	}
}

// dropLine is a liveLine whose queue is a scheduled drop.
type dropLine struct {
	*liveLine
	seed       []byte
	commitment string
	opensAt    time.Time
	// pre is the pre-queue the draw placed (by sequence), placed the
	// order it was placed in.
	pre, placed   []lottery.Entry
	leftAfterDraw uint64 // a drawn entry that left before its turn
}

// joinAs publishes a join of the given kind with its prev, and ingests it,
// as the gateway does. (Its id is unique: a rejoin here came after the
// stream's duplicate window.)
func (l *liveLine) joinAs(user string, kind waitqueue.JoinKind, prev uint64) uint64 {
	l.t.Helper()
	id := fmt.Sprintf("%s/%s/%d/%d", l.q, user, prev, time.Now().UnixNano())
	seq := l.publish(event.EnterSubject(l.q), id, event.TypeJoined, time.Now(), event.Joined{Queue: l.q, User: user,
		JoinedAt: time.Now().UTC(), Prev: prev, PreQueue: kind == waitqueue.PreQueue, Priority: kind == waitqueue.Priority})
	if _, err := l.store.IngestAs(context.Background(), l.q, l.epoch, seq, user, prev, kind); err != nil {
		l.t.Fatal(err)
	}
	l.seqs = append(l.seqs, seq)
	l.users[user] = true
	l.owner[seq] = user
	return seq
}

// newDropLine schedules a drop (a config change with opensAt and the
// lottery's commitment, as the admin API records it) and fills its
// pre-queue with the live scripts: eight shoppers, one who leaves, one who
// joins again while pre-queued (an alias of their entry), one who leaves
// and joins again (a new entry: its prev is the one left).
func newDropLine(t *testing.T) *dropLine {
	t.Helper()
	l := &dropLine{liveLine: newLiveLine(t), opensAt: time.Now().Add(2 * time.Second).Truncate(time.Millisecond)}
	var err error
	if l.seed, err = lottery.NewSeed(); err != nil {
		t.Fatal(err)
	}
	l.commitment = lottery.Commitment(l.seed)
	l.publish(event.ConfigChangedSubject, fmt.Sprintf("config/%s/%d", l.q, time.Now().UnixNano()), event.TypeConfigChanged, time.Now(),
		map[string]any{"queue": l.q, "by": "tester", "config": map[string]any{"name": l.q, "targetActive": 100,
			"opensAt": l.opensAt, "lottery": map[string]any{"commitment": l.commitment}}})
	first := map[string]uint64{}
	for i := 1; i <= 8; i++ {
		u := fmt.Sprintf("p%02d", i)
		first[u] = l.joinAs(u, waitqueue.PreQueue, 0)
	}
	l.leave(first["p02"])
	if again := l.joinAs("p03", waitqueue.PreQueue, 0); again == first["p03"] {
		t.Fatal("a rejoin got the same sequence")
	}
	l.leave(first["p05"])
	l.joinAs("p05", waitqueue.PreQueue, first["p05"])
	return l
}

// draw places the pre-queue with the real draw script in the order given
// (from the pre-queue Redis holds, by sequence), at the entries cursor of
// the last join, and records it on USHER_OPS revealing seedHex, as the
// admitter does.
func (l *dropLine) draw(seedHex string, order func(pre []lottery.Entry) []lottery.Entry) {
	l.t.Helper()
	ctx := context.Background()
	testenv.Applied(l.t, l.store, l.q, l.epoch, l.seqs[len(l.seqs)-1])
	pre, drawn, version, err := l.store.PreQueue(ctx, l.q)
	if err != nil || drawn {
		l.t.Fatalf("PreQueue = %v, drawn %v", err, drawn)
	}
	for _, e := range pre {
		l.pre = append(l.pre, lottery.Entry{Seq: e.Seq, User: e.User})
	}
	l.placed = order(l.pre)
	seqs := make([]uint64, len(l.placed))
	for i, e := range l.placed {
		seqs[i] = e.Seq
	}
	if _, err := l.store.Draw(ctx, l.q, l.epoch, version, seqs, lottery.Digest(l.placed)); err != nil {
		l.t.Fatal(err)
	}
	d, err := l.store.Drawing(ctx, l.q)
	if err != nil {
		l.t.Fatal(err)
	}
	id := "lottery/" + l.q + "/" + l.commitment
	l.publish(event.LotteryDrawnSubject, id, event.TypeLotteryDrawn, time.Now(), event.LotteryDrawn{Queue: l.q, Seed: seedHex,
		Commitment: l.commitment, OpensAt: l.opensAt.UTC(), Entries: d.Entries, EntriesCursor: d.Cursor, OrderDigest: d.Digest})
}

// open lets the drop run after the draw: a join still marked pre-queue
// (published before the opening, applied after the draw: it queues FIFO),
// two FIFO joins, a priority join (an allow-listed user), one of the drawn
// leaving before their turn, and ticks that admit everyone left.
func (l *dropLine) open() {
	l.t.Helper()
	l.joinAs("late", waitqueue.PreQueue, 0)
	l.joinAs("f01", waitqueue.InLine, 0)
	l.joinAs("f02", waitqueue.InLine, 0)
	l.joinAs("vip", waitqueue.Priority, 0)
	l.leftAfterDraw = l.placed[len(l.placed)/2].Seq
	l.leave(l.leftAfterDraw)
	for _, target := range []int{3, 6, 9, 20} {
		l.tick(target, 5*time.Minute)
	}
}

// byTicket is the lottery order computed here, independently of package
// lottery: ascending HMAC-SHA256(seed, user id) as bytes.
func byTicket(seed []byte, pre []lottery.Entry) []lottery.Entry {
	out := slices.Clone(pre)
	ticket := func(u string) []byte {
		m := hmac.New(sha256.New, seed)
		m.Write([]byte(u))
		return m.Sum(nil)
	}
	slices.SortFunc(out, func(a, b lottery.Entry) int { return bytes.Compare(ticket(a.User), ticket(b.User)) })
	return out
}

func TestADropMadeByTheLiveScriptsAuditsClean(t *testing.T) {
	l := newDropLine(t)
	l.draw(hex.EncodeToString(l.seed), func(pre []lottery.Entry) []lottery.Entry { return lottery.Sorted(l.seed, pre) })
	l.open()
	// The pre-queue is who stayed: p02 left, p03's rejoin is an alias,
	// p05 rejoined after leaving (a new entry).
	if len(l.pre) != 7 {
		t.Fatalf("pre-queue drawn = %v, want 7 entries", l.pre)
	}
	r := l.usherctl("audit", "--queue", l.q)
	for _, want := range []string{
		"ok       admission in join order (3 by join sequence, 7 drawn by lottery place ahead of them, 1 priority outside the order, 2 pre-queued and not drawn)",
		"ok       lottery (drawn order)",
		"verdict: CLEAN",
	} {
		if r.err != nil || !strings.Contains(r.stdout, want) {
			t.Fatalf("audit = %v\n%s\nwant %q", r.err, r.stdout, want)
		}
	}
}

func TestAuditCatchesADrawInATamperedOrder(t *testing.T) {
	l := newDropLine(t)
	// An admitter that places the pre-queue in an order of its choosing,
	// and publishes that order's digest.
	l.draw(hex.EncodeToString(l.seed), func(pre []lottery.Entry) []lottery.Entry {
		out := lottery.Sorted(l.seed, pre)
		slices.Reverse(out)
		return out
	})
	l.open()
	fair := byTicket(l.seed, l.pre)
	// The first place that differs among those admitted (one of the drawn
	// left before their turn): the fair order's first against the
	// tampered one's first.
	placeOf := map[uint64]int{}
	for i, e := range fair {
		placeOf[e.Seq] = i + 1
	}
	admitted := func(es []lottery.Entry) []lottery.Entry {
		return slices.DeleteFunc(slices.Clone(es), func(e lottery.Entry) bool { return e.Seq == l.leftAfterDraw })
	}
	want, shown := admitted(fair)[0], admitted(l.placed)[0]
	r := l.usherctl("audit", "--queue", l.q)
	if r.code != exitFailure {
		t.Fatalf("audit exit = %d (%v), want %d\n%s", r.code, r.err, exitFailure, r.stdout)
	}
	for _, w := range []string{
		"VIOLATED lottery (drawn order)",
		fmt.Sprintf("the draw placed 7 entries (order digest %s); the pre-queue recomputed from USHER_ENTRIES", lottery.Digest(l.placed)),
		fmt.Sprintf("holds 7 (digest %s)", lottery.Digest(fair)),
		fmt.Sprintf("first difference at lottery place %d: the recomputed order puts seq %d (%s) there, the admissions show seq %d (%s)",
			placeOf[want.Seq], want.Seq, want.User, shown.Seq, shown.User),
		"who drew ahead of it",
		"verdict: VIOLATIONS",
	} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("audit printed\n%s\nwant it to contain %q", r.stdout, w)
		}
	}
}

func TestAuditCatchesASeedThatDoesNotMatchTheCommitment(t *testing.T) {
	l := newDropLine(t)
	// An admitter that draws with another seed than the one committed to
	// (and is consistent about it: order, digest and reveal agree).
	other, err := lottery.NewSeed()
	if err != nil {
		t.Fatal(err)
	}
	l.draw(hex.EncodeToString(other), func(pre []lottery.Entry) []lottery.Entry { return lottery.Sorted(other, pre) })
	l.open()
	r := l.usherctl("audit", "--queue", l.q)
	want := fmt.Sprintf("the revealed seed does not match the commitment: SHA-256(seed) = %s, the commitment is %s",
		lottery.Commitment(other), l.commitment)
	if r.code != exitFailure || !strings.Contains(r.stdout, "VIOLATED lottery (drawn order): 1 exception") || !strings.Contains(r.stdout, want) {
		t.Fatalf("audit = exit %d\n%s\nwant the seed reported: %q", r.code, r.stdout, want)
	}
}

func TestAuditWritesTheLotteryListAnyoneCanCheck(t *testing.T) {
	l := newDropLine(t)
	l.draw(hex.EncodeToString(l.seed), func(pre []lottery.Entry) []lottery.Entry { return lottery.Sorted(l.seed, pre) })
	l.open()
	path := filepath.Join(t.TempDir(), "prequeue.txt")
	r := l.usherctl("audit", "--queue", l.q, "--lottery-list", path)
	if r.err != nil {
		t.Fatalf("audit = %v\n%s", r.err, r.stdout)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for _, e := range byTicket(l.seed, []lottery.Entry{
		{User: "p01"}, {User: "p03"}, {User: "p04"}, {User: "p05"}, {User: "p06"}, {User: "p07"}, {User: "p08"},
	}) {
		want.WriteString(e.User + "\n")
	}
	if string(got) != want.String() {
		t.Fatalf("--lottery-list wrote\n%s\nwant\n%s", got, want.String())
	}
	// A queue with no draw has no list to write.
	q := testenv.Name(t)
	l.world.join(q, "alice")
	r = l.usherctl("audit", "--queue", q, "--lottery-list", path)
	if r.code != exitFailure || !strings.Contains(r.err.Error(), "no draw recorded") {
		t.Fatalf("--lottery-list without a draw = exit %d, %v; want exit 1, no draw recorded", r.code, r.err)
	}
}

func TestAuditFlagsAnOpeningWithNoDrawAndSkipsQueuesWithoutOne(t *testing.T) {
	w := newWorld(t)
	scheduled := func(q string, opensAt time.Time) {
		w.publish(event.ConfigChangedSubject, fmt.Sprintf("config/%s/%d", q, time.Now().UnixNano()), event.TypeConfigChanged, time.Now(),
			map[string]any{"queue": q, "by": "tester", "config": map[string]any{"name": q, "targetActive": 5, "opensAt": opensAt}})
	}
	preJoin := func(q, user string) {
		w.publish(event.EnterSubject(q), q+"/"+user+"/0", event.TypeJoined, time.Now(), event.Joined{Queue: q, User: user, PreQueue: true})
	}
	tests := []struct {
		name     string
		setup    func(q string)
		wantCode int
		want     string
	}{
		{"opened two minutes ago, never drawn", func(q string) {
			scheduled(q, time.Now().Add(-2*time.Minute))
			preJoin(q, "alice")
			preJoin(q, "bob")
		}, exitFailure, "passed 2m0s ago but no draw recorded (no usher.lottery.drawn.v1 for the queue on USHER_OPS); 2 joins went into the pre-queue"},
		{"opens in an hour", func(q string) {
			scheduled(q, time.Now().Add(time.Hour))
			preJoin(q, "alice")
		}, exitOK, "SKIPPED  lottery (drawn order): not drawn yet: opensAt"},
		{"not a drop", func(q string) {
			w.configured(q, 5, 0)
			w.join(q, "alice")
		}, exitOK, "SKIPPED  lottery (drawn order): no scheduled drop (no opensAt, no draw recorded)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := testenv.Name(t)
			tt.setup(q)
			r := w.usherctl("audit", "--queue", q)
			if r.code != tt.wantCode || !strings.Contains(r.stdout, tt.want) {
				t.Fatalf("audit = exit %d\n%s\nwant exit %d and %q", r.code, r.stdout, tt.wantCode, tt.want)
			}
		})
	}
}

func TestAuditCatchesTheDrawnPassedOverByALaterJoin(t *testing.T) {
	w := newWorld(t)
	q := testenv.Name(t)
	w.configured(q, 10, 0)
	seed, err := lottery.NewSeed()
	if err != nil {
		t.Fatal(err)
	}
	var pre []lottery.Entry
	for _, u := range []string{"a", "b", "c"} {
		seq := w.publish(event.EnterSubject(q), q+"/"+u+"/0", event.TypeJoined, time.Now(), event.Joined{Queue: q, User: u, PreQueue: true})
		pre = append(pre, lottery.Entry{Seq: seq, User: u})
	}
	order := lottery.Sorted(seed, pre)
	w.publish(event.LotteryDrawnSubject, "lottery/"+q, event.TypeLotteryDrawn, time.Now(), event.LotteryDrawn{Queue: q,
		Seed: hex.EncodeToString(seed), Commitment: lottery.Commitment(seed), Entries: 3, EntriesCursor: pre[2].Seq,
		OrderDigest: lottery.Digest(order)})
	late := w.join(q, "late")
	now := time.Now()
	// The tick admits the late joiner before the drawn at place 1, and
	// nobody admits place 2 or 3 at all.
	w.admit(q, late, "late", now, now.Add(time.Minute))
	w.admit(q, order[0].Seq, order[0].User, now.Add(time.Millisecond), now.Add(time.Minute))
	r := w.usherctl("audit", "--queue", q)
	for _, want := range []string{
		"VIOLATED admission in join order: 3 exception(s) (1 by join sequence, 3 drawn by lottery place ahead of them, 0 priority outside the order)",
		fmt.Sprintf("seq %d (%s, lottery place 1) was admitted (readyAt %s) after seq %d (late), placed behind every drawn entry",
			order[0].Seq, order[0].User, stamp(now.Add(time.Millisecond)), late),
		fmt.Sprintf("seq %d (%s, lottery place 2) was waiting when seq %d (late), placed behind it, was admitted at", order[1].Seq, order[1].User, late),
		fmt.Sprintf("seq %d (%s, lottery place 3) was waiting when seq %d (late), placed behind it, was admitted at", order[2].Seq, order[2].User, late),
		"ok       lottery (drawn order)",
	} {
		if r.code != exitFailure || !strings.Contains(r.stdout, want) {
			t.Fatalf("audit = exit %d\n%s\nwant exit 1 and %q", r.code, r.stdout, want)
		}
	}
}

// Whoever can write Redis can make the line hold an admission the admitter
// never made, and order on it. The audit lists every order whose token
// USHER_ADMISSIONS never admitted to the order's user, with what became of
// it; orders on recorded admissions pass.
func TestAuditListsOrdersOnTokensTheStreamNeverAdmitted(t *testing.T) {
	w := newWorld(t)
	q := testenv.Name(t)
	w.configured(q, 5, 0)
	var s []uint64
	for i := range 3 {
		s = append(s, w.join(q, fmt.Sprintf("u%d", i)))
	}
	now := time.Now()
	tok := func(i int) string { return waitqueue.TokenID(q, w.epoch, s[i]) }
	ordered := func(typ string, i int, user, id, status, reason string) {
		subj := event.OrderRequestedSubject(q)
		if typ == event.TypeOrderFailed {
			subj = event.OrderFailedSubject(q)
		}
		w.publish(subj, fmt.Sprintf("%s/%s", typ, id), typ, now, map[string]any{"queue": q, "tokenId": tok(i), "orderId": id,
			"user": user, "status": status, "reason": reason})
	}
	w.admit(q, s[0], "u0", now, now.Add(time.Minute))
	ordered(event.TypeOrderRequested, 0, "u0", "o-honest", "", "")
	// u1 was never admitted on the stream: Redis alone said so.
	ordered(event.TypeOrderRequested, 1, "u1", "o-forged", "", "")
	ordered(event.TypeOrderFailed, 1, "u1", "o-forged", "REJECTED", "token_unconfirmed")
	// mallory orders on u2's admission.
	w.admit(q, s[2], "u2", now, now.Add(time.Minute))
	ordered(event.TypeOrderRequested, 2, "mallory", "o-borrowed", "", "")

	r := w.usherctl("audit", "--queue", q)
	if r.code != exitFailure {
		t.Fatalf("audit exit = %d (%v), want %d\n%s", r.code, r.err, exitFailure, r.stdout)
	}
	for _, want := range []string{
		"VIOLATED every order's token admitted on the stream: 2 exception(s)",
		"order o-forged of u1: token " + tok(1) + ", which USHER_ADMISSIONS never admitted to them (REJECTED token_unconfirmed)",
		"order o-borrowed of mallory: token " + tok(2) + ", which USHER_ADMISSIONS never admitted to them (requested)",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("audit printed\n%s\nwant it to contain %q", r.stdout, want)
		}
	}
	if strings.Contains(r.stdout, "order o-honest") || strings.Contains(r.stdout, "no token redeemed twice: ") {
		t.Errorf("audit listed the order on a recorded admission:\n%s", r.stdout)
	}
}
