package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"usher/gateway/lineapi"
	"usher/internal/event"
	"usher/internal/testenv"
)

// lingers is the linger's timer in a test: a group's linger passes when
// the test says so (fire), never by the clock.
type lingers struct {
	mu  sync.Mutex
	due []func()
}

func (l *lingers) after(_ time.Duration, f func()) func() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.due = append(l.due, f)
	return func() bool { return true } // a group recorded before its linger ignores its timer
}

// pending are the lingers started and not passed yet.
func (l *lingers) pending() []func() {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.due)
}

// fire lets every linger started so far pass.
func (l *lingers) fire() {
	l.mu.Lock()
	due := l.due
	l.due = nil
	l.mu.Unlock()
	for _, f := range due {
		f()
	}
}

// grouping has h's gateway gather joins in groups of at most size (backlog:
// its default when 0), lingering until the test fires the timer.
func grouping(h *harness, size, backlog int) *lingers {
	h.t.Helper()
	l := &lingers{}
	h.gw.joins = lineapi.Grouping{Linger: time.Millisecond, Size: size, Backlog: backlog, After: l.after, Instance: "gw-test"}
	h.rebuild()
	return l
}

// gathering waits until n join requests wait for their groups.
func (h *harness) gathering(n int) {
	h.t.Helper()
	testenv.Eventually(h.t, 10*time.Second, func() error {
		if got := testenv.GatherValues(h.t, h.gw.metrics.reg).Value("usher_joins_gathering", nil); got != float64(n) {
			return fmt.Errorf("%v join requests gathered, want %d", got, n)
		}
		return nil
	}, "%d joins gathered", n)
}

// stored is one message of the harness queue's joins, as the stream holds it.
type stored struct {
	seq   uint64
	typ   string
	users []string
}

// storedJoins reads every message of the harness queue's enter subject.
func (h *harness) storedJoins() []stored {
	h.t.Helper()
	ctx := context.Background()
	subj := event.EnterSubject(h.queue)
	st, err := h.js.Stream(ctx, event.StreamEntries)
	if err != nil {
		h.t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		h.t.Fatal(err)
	}
	n := int(info.State.Subjects[subj])
	var out []stored
	var seq uint64
	for len(out) < n {
		m, err := st.GetMsg(ctx, seq+1, jetstream.WithGetMsgSubject(subj))
		if err != nil {
			h.t.Fatalf("message %d of %d on %s: %v", len(out)+1, n, subj, err)
		}
		seq = m.Sequence
		env, joins, _, err := event.UnmarshalEnter(m.Data, nil)
		if err != nil {
			h.t.Fatalf("message %d: %v", seq, err)
		}
		s := stored{seq: seq, typ: env.Type}
		for _, j := range joins {
			s.users = append(s.users, j.User)
		}
		out = append(out, s)
	}
	return out
}

// joinAll joins every user at once; wait returns each one's answer once
// all are answered.
func (h *harness) joinAll(users ...string) (wait func() []response) {
	out := make([]response, len(users))
	var wg sync.WaitGroup
	for i, u := range users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = h.join(u)
		}()
	}
	return func() []response { wg.Wait(); return out }
}

// placeOf is the place r's ticket names.
func (h *harness) placeOf(r response) uint64 {
	h.t.Helper()
	tk, err := h.gw.tickets.Parse(r.str("ticket"))
	if err != nil {
		h.t.Fatalf("answer %d %s: %v", r.status, r.raw, err)
	}
	return tk.Seq
}

// Joins of one queue that come together are recorded as one
// usher.joins.v2 message, which lists them in the order the gateway took
// them; each is answered 202 with its place in it (sequence × 1024 + index),
// the place the line gives it: first in the list, first in line. A join
// that comes alone waits for its linger, and is a group of one.
func TestConcurrentJoinsAreRecordedAsOneGroup(t *testing.T) {
	h := newHarness(t)
	const n = 40
	lingers := grouping(h, n, 0) // a full group is recorded at once
	users := make([]string, n)
	for i := range users {
		users[i] = fmt.Sprintf("shopper-%d", i)
	}
	answers := h.joinAll(users...)()
	msgs := h.storedJoins()
	if len(msgs) != 1 || msgs[0].typ != event.TypeJoins || len(msgs[0].users) != n {
		t.Fatalf("stored %+v, want one %s message listing %d joins", msgs, event.TypeJoins, n)
	}
	byUser := map[string]response{}
	for i, u := range users {
		byUser[u] = answers[i]
	}
	for i, u := range msgs[0].users {
		r := byUser[u]
		place := event.Place(msgs[0].seq, i, msgs[0].seq)
		if r.status != 202 || h.placeOf(r) != place || r.num("position") != int64(i+1) {
			t.Errorf("%s, listed at %d: answer %d %s; want 202 at place %d, position %d", u, i, r.status, r.raw, place, i+1)
			continue
		}
		if p := h.poll(r.str("ticket")); p.num("position") != int64(i+1) {
			t.Errorf("%s's poll = %s, want position %d: the answer's place is the line's", u, p.raw, i+1)
		}
	}
	late := h.joinAll("late")
	h.gathering(1)
	lingers.fire()
	r := late()[0]
	msgs = h.storedJoins()
	if len(msgs) != 2 || !slices.Equal(msgs[1].users, []string{"late"}) {
		t.Fatalf("stored %+v, want a second message listing late alone", msgs)
	}
	if r.status != 202 || h.placeOf(r) != event.Place(msgs[1].seq, 0, msgs[0].seq) || r.num("position") != n+1 {
		t.Errorf("late's answer = %d %s, want 202 at place %d, position %d", r.status, r.raw, event.Place(msgs[1].seq, 0, msgs[0].seq), n+1)
	}
}

// With groups off (USHER_JOIN_GROUPS=off) every join is its own
// usher.joined.v1 message, its place the message's sequence.
func TestWithGroupsOffEachJoinIsItsOwnMessage(t *testing.T) {
	h := newHarness(t)
	h.gw.joins = lineapi.Grouping{Off: true}
	h.rebuild()
	answers := []response{h.join("alice"), h.join("bob")}
	msgs := h.storedJoins()
	if len(msgs) != 2 {
		t.Fatalf("stored %+v, want two messages", msgs)
	}
	for i, m := range msgs {
		r := answers[slices.Index([]string{"alice", "bob"}, m.users[0])]
		if m.typ != event.TypeJoined || r.status != 202 || h.placeOf(r) != m.seq || r.num("position") != int64(i+1) {
			t.Errorf("message %+v, answer %d %s: want a %s message whose sequence is the place", m, r.status, r.raw, event.TypeJoined)
		}
	}
}

// Without a linger (the default) a join that finds no group of its queue
// being recorded goes at once, a group of one — no timer is ever started —
// and joins that come while groups are being recorded gather into the
// next: every one is answered 202 at the place the stream gave it.
func TestWithoutALingerAJoinGoesAtOnceAndACrowdInGroups(t *testing.T) {
	h := newHarness(t)
	l := &lingers{}
	h.gw.joins = lineapi.Grouping{Size: 64, After: l.after, Instance: "gw-test"}
	h.rebuild()
	r := h.join("alice")
	msgs := h.storedJoins()
	if r.status != 202 || len(msgs) != 1 || msgs[0].typ != event.TypeJoins || !slices.Equal(msgs[0].users, []string{"alice"}) {
		t.Fatalf("alice alone: %d %s, stored %+v; want 202 and one %s message listing her", r.status, r.raw, msgs, event.TypeJoins)
	}
	if p := l.pending(); len(p) != 0 {
		t.Fatalf("%d lingers started, want none", len(p))
	}
	const n = 64
	users := make([]string, n)
	for i := range users {
		users[i] = fmt.Sprintf("crowd-%d", i)
	}
	answers := h.joinAll(users...)()
	byUser := map[string]response{}
	for i, u := range users {
		byUser[u] = answers[i]
	}
	msgs = h.storedJoins()[1:]
	listed := 0
	for _, m := range msgs {
		for i, u := range m.users {
			listed++
			if a := byUser[u]; a.status != 202 || h.placeOf(a) != event.Place(m.seq, i, h.storedJoins()[0].seq) {
				t.Errorf("%s, listed at %d of message %d: answer %d %s; want 202 at place %d", u, i, m.seq, a.status, a.raw, event.Place(m.seq, i, 1))
			}
		}
	}
	if listed != n {
		t.Fatalf("the crowd's messages list %d joins, want %d", listed, n)
	}
	t.Logf("%d concurrent joins in %d messages", n, len(msgs))
}

// A double click whose two joins come in one group is listed once: both
// are answered with its one place, the second with 200 (it took no new
// place), as a double click recorded on its own is.
func TestADoubleClickInOneGroupIsOnePlace(t *testing.T) {
	h := newHarness(t)
	lingers := grouping(h, 64, 0)
	wait := h.joinAll("alice", "alice", "bob")
	h.gathering(3)
	lingers.fire()
	answers := wait()
	msgs := h.storedJoins()
	if len(msgs) != 1 || len(msgs[0].users) != 2 {
		t.Fatalf("stored %+v, want one message listing alice and bob once each", msgs)
	}
	a, b := answers[0], answers[1]
	if h.placeOf(a) != h.placeOf(b) || a.num("position") != b.num("position") {
		t.Fatalf("alice's two answers: %s and %s, want one place", a.raw, b.raw)
	}
	if got := []int{a.status, b.status}; !slices.Contains(got, 202) || !slices.Contains(got, 200) {
		t.Errorf("alice's two answers = %v, want one 202 (the place taken) and one 200", got)
	}
	if st, err := h.line.Stats(context.Background(), h.queue); err != nil || st.Waiting != 2 {
		t.Errorf("line = %+v, %v; want alice and bob waiting", st, err)
	}
	// A click after the group is in line finds alice's place there, as
	// it did before joins came in groups.
	if r := h.join("alice"); r.status != 200 || h.placeOf(r) != h.placeOf(a) {
		t.Errorf("alice again = %d %s, want 200 with her place %d", r.status, r.raw, h.placeOf(a))
	}
	if st, err := h.line.Stats(context.Background(), h.queue); err != nil || st.Waiting != 2 {
		t.Errorf("line = %+v, %v; want alice and bob waiting", st, err)
	}
}

// While a queue's groups are slow to record, the joins gathered and in
// flight are bounded: one past the backlog is refused with 503 and
// Retry-After at once, not held.
func TestJoinsPastTheBacklogAreRefused(t *testing.T) {
	h := newHarness(t)
	lingers := grouping(h, 64, 2)
	wait := h.joinAll("alice", "bob")
	h.gathering(2)
	if r := h.join("carol"); r.status != 503 || r.header.Get("Retry-After") == "" || !isProblem(r) {
		t.Fatalf("a join past the backlog = %d %s (Retry-After %q), want 503 with Retry-After", r.status, r.raw, r.header.Get("Retry-After"))
	}
	lingers.fire()
	for _, r := range wait() {
		if r.status != 202 {
			t.Errorf("a join within the backlog = %d %s, want 202", r.status, r.raw)
		}
	}
	retry := h.joinAll("carol")
	h.gathering(1)
	lingers.fire()
	if r := retry()[0]; r.status != 202 {
		t.Errorf("carol's retry = %d %s, want 202", r.status, r.raw)
	}
}

// A gateway answers at most USHER_JOINS_IN_FLIGHT joins at once: one past
// them is refused at once with 503, Retry-After and the reason, before it
// costs the line anything, and counted; the joins in flight are answered,
// and once they are, a retry takes its place.
func TestAJoinPastTheJoinsInFlightIsShedAtOnce(t *testing.T) {
	h := newHarness(t)
	h.gw.joinsInFlight = 2
	lingers := grouping(h, 64, 0)
	wait := h.joinAll("alice", "bob")
	h.gathering(2)
	r := h.join("carol")
	if r.status != 503 || r.header.Get("Retry-After") == "" || !isProblem(r) || !strings.Contains(r.str("detail"), "as many joins as it can answer") {
		t.Fatalf("a join past the joins in flight = %d %s (Retry-After %q), want 503 problem with Retry-After", r.status, r.raw, r.header.Get("Retry-After"))
	}
	if got := testenv.GatherValues(t, h.gw.metrics.reg).Value("usher_joins_shed_total", nil); got != 1 {
		t.Errorf("usher_joins_shed_total = %v, want 1", got)
	}
	if got := testenv.GatherValues(t, h.gw.metrics.reg).Value("usher_joins_in_flight_bound", nil); got != 2 {
		t.Errorf("usher_joins_in_flight_bound = %v, want 2", got)
	}
	lingers.fire()
	for _, r := range wait() {
		if r.status != 202 {
			t.Errorf("a join in flight = %d %s, want 202", r.status, r.raw)
		}
	}
	retry := h.joinAll("carol")
	h.gathering(1)
	lingers.fire()
	if r := retry()[0]; r.status != 202 {
		t.Errorf("carol's retry = %d %s, want 202", r.status, r.raw)
	}
	if st, err := h.line.Stats(context.Background(), h.queue); err != nil || st.Waiting != 3 {
		t.Errorf("line = %+v, %v; want 3 waiting: the shed join took no place, its retry one", st, err)
	}
}

// A group the stream cannot record (its server is down) answers every join
// of it 503, and loses nothing answered 202 before: once the server is
// back, the joins answered 202 are in the stream and in line at the places
// they were told, and a refused join's retry takes a place. (The client
// may still deliver the refused group once it reconnects, as it may a lone
// join whose answer timed out: such a join is the "may or may not be in
// line" of a lost answer, and the line knows its user by name.)
func TestAGroupNotRecordedAnswersEveryJoin503(t *testing.T) {
	dir := t.TempDir()
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	srv := natsOn(t, dir, port)
	h := newHarnessOn(t, srv.ClientURL())
	lingers := grouping(h, 64, 0)
	wait := h.joinAll("alice", "bob")
	h.gathering(2)
	lingers.fire()
	taken := wait()
	for _, r := range taken {
		if r.status != 202 {
			t.Fatalf("a join with the server up = %d %s, want 202", r.status, r.raw)
		}
	}
	srv.Shutdown()
	srv.WaitForShutdown()
	wait = h.joinAll("carol", "dave")
	h.gathering(2)
	lingers.fire()
	for _, r := range wait() {
		if r.status != 503 || r.header.Get("Retry-After") == "" || !isProblem(r) {
			t.Errorf("a join of a group not recorded = %d %s, want 503 with Retry-After", r.status, r.raw)
		}
	}
	natsOn(t, dir, port)
	testenv.Eventually(t, 30*time.Second, func() bool {
		wait := h.joinAll("carol")
		testenv.Eventually(t, 10*time.Second, func() bool { return len(lingers.pending()) > 0 }, "carol's group")
		lingers.fire()
		return wait()[0].status == 202
	}, "carol's retry taken once the server is back")
	var users []string
	for _, m := range h.storedJoins() {
		users = append(users, m.users...)
	}
	if len(users) < 3 || !slices.Contains(users[:2], "alice") || !slices.Contains(users[:2], "bob") || users[len(users)-1] != "carol" {
		t.Errorf("the stream holds the joins of %v, want alice and bob, then carol's retry last", users)
	}
	for _, r := range taken {
		if p := h.poll(r.str("ticket")); p.status != 200 || p.num("position") != r.num("position") {
			t.Errorf("poll of a join answered 202 at %d = %d %s, want the same position", r.num("position"), p.status, p.raw)
		}
	}
	if st, err := h.line.Stats(context.Background(), h.queue); err != nil || st.Waiting != 3 {
		t.Errorf("line = %+v, %v; want alice, bob and carol waiting", st, err)
	}
}

// natsOn starts a JetStream server on port storing in dir, so a test can
// stop it and start it again where its clients reconnect.
func natsOn(t *testing.T, dir string, port int) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server: not ready after 10s")
	}
	t.Cleanup(s.Shutdown)
	return s
}
