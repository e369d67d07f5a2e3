package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"usher/internal/catalog"
	"usher/internal/event"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
)

// joins publishes one usher.joins.v2 message listing users (each with
// prev 0), as a group-committing gateway does, and returns its sequence.
func (w *world) joins(users ...string) uint64 {
	w.t.Helper()
	js := event.Joins{Queue: w.queue}
	for _, u := range users {
		js.Joins = append(js.Joins, event.Join{User: u, JoinedAt: time.Now().UTC()})
	}
	id := fmt.Sprintf("joins/%s/test/%d", w.queue, time.Now().UnixNano())
	body, err := event.Marshal(id, event.TypeJoins, w.queue, time.Now(), js)
	if err != nil {
		w.t.Fatal(err)
	}
	ack, err := w.js.Publish(context.Background(), event.EnterSubject(w.queue), body, jetstream.WithMsgID(id))
	if err != nil {
		w.t.Fatal(err)
	}
	return ack.Sequence
}

// placed is a join as the test expects it in line: its user, and the
// message and index that give its place.
type placed struct {
	user  string
	seq   uint64
	index int
}

// inLine waits until the line holds exactly the given joins waiting, each
// at its place (event.Place, the queue's first group at since) and in
// that order.
func (w *world) inLine(want []placed, since uint64, what string) {
	w.t.Helper()
	testenv.Eventually(w.t, 10*time.Second, func() error {
		st, err := w.line.Stats(context.Background(), w.queue)
		if err != nil {
			return err
		}
		if st.Waiting != int64(len(want)) {
			return fmt.Errorf("%d waiting, want %d", st.Waiting, len(want))
		}
		for i, p := range want {
			id := event.Place(p.seq, p.index, since)
			e, err := w.line.Poll(context.Background(), w.queue, id)
			if err != nil {
				return err
			}
			if e.Status != waitqueue.Waiting || e.Position != int64(i+1) || e.Seq != id {
				return fmt.Errorf("%s at %d = %+v, want waiting at %d", p.user, id, e, i+1)
			}
		}
		return nil
	}, what)
}

// A usher.joins.v2 message is applied as its joins one per message
// would be: every join at its place (event.Place), in stream order across
// v1 messages before and after the first group; a follower that starts
// again mid-stream, and one that replays the stream after Redis lost
// everything, give the same ids; a double click listed twice in one
// message, or in two messages, is one place; a joins message listing none
// holds nobody back; and FIFO admission admits in place order.
func TestGroupedJoinsAreAppliedAndAdmittedAtTheirPlaces(t *testing.T) {
	c := cfg(20, 20, 300)
	c.State = catalog.StatePaused
	w, _ := newPrivateWorld(t, c)
	rdb, err := waitqueue.DialURL(w.redisURL, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })

	var want []placed
	seen := map[string]bool{} // users in line: another join of theirs is a double click, not a place
	v1 := func(u string) { want = append(want, placed{user: u, seq: w.join(u)}); seen[u] = true }
	v2 := func(users ...string) uint64 {
		seq := w.joins(users...)
		for i, u := range users {
			if !seen[u] {
				want = append(want, placed{user: u, seq: seq, index: i})
			}
			seen[u] = true
		}
		return seq
	}
	v1("u0")
	v1("u1")
	since := v2("u2", "u3", "u2") // u2's double click within the message
	v1("u4")
	// A joins message listing nobody: applied as nothing.
	body, _ := event.Marshal("joins/empty", event.TypeJoins, w.queue, time.Now(), event.Joins{Queue: w.queue})
	if _, err := w.js.Publish(context.Background(), event.EnterSubject(w.queue), body); err != nil {
		t.Fatal(err)
	}
	v2("u5", "u3") // u3 again, in a later message
	v1("u6")

	stop := w.runStoppable()
	w.inLine(want, since, "the joins of v1 and v2 messages at their places")
	stop()

	// The follower starts again from the cursor, past the first group.
	v2("u7", "u8")
	v1("u9")
	w.runStoppable()
	w.inLine(want, since, "the later joins at their places after a restart")

	// Redis loses everything: the follower replays the stream from its start.
	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	w.inLine(want, since, "the same places after the line was rebuilt from the stream")

	c.Name, c.State = w.queue, catalog.StateOpen
	w.configure(c)
	testenv.Eventually(t, 10*time.Second, func() bool { return len(w.admissions()) == len(want) }, "everyone admitted")
	for i, a := range w.admissions() {
		if id := event.Place(want[i].seq, want[i].index, since); a.Seq != id || a.User != want[i].user {
			t.Errorf("admission %d = %s at %d, want %s at %d (place order)", i, a.User, a.Seq, want[i].user, id)
		}
	}
}

// Large groups are applied whole: a batch of messages listing more joins
// than one script call carries is cut between messages, and every join
// of each message is in line, at its place, in order.
func TestLargeGroupsAreAppliedWhole(t *testing.T) {
	c := cfg(20, 20, 300)
	c.State = catalog.StatePaused
	w := newWorld(t, c)
	var want []placed
	var since uint64
	for g := range 3 {
		users := make([]string, 600)
		for i := range users {
			users[i] = fmt.Sprintf("g%d-u%d", g, i)
		}
		seq := w.joins(users...)
		if since == 0 {
			since = seq
		}
		for i, u := range users {
			want = append(want, placed{user: u, seq: seq, index: i})
		}
	}
	w.start(hooks{})
	testenv.Eventually(t, 10*time.Second, func() bool {
		st, _ := w.line.Stats(context.Background(), w.queue)
		return st.Waiting == int64(len(want))
	}, "every join of the three groups in line")
	for _, i := range []int{0, 599, 600, 1199, 1200, len(want) - 1} {
		p := want[i]
		if e, err := w.line.Poll(context.Background(), w.queue, event.Place(p.seq, p.index, since)); err != nil || e.Position != int64(i+1) {
			t.Errorf("%s = %+v, %v; want waiting at %d", p.user, e, err, i+1)
		}
	}
}
