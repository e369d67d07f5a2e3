package main

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"usher/internal/bus"
	"usher/internal/catalog"
	"usher/internal/event"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
)

// newPrivateWorld is a world whose Redis is its own, so the test can wipe it.
func newPrivateWorld(t *testing.T, cfg catalog.Config) (*world, func()) {
	t.Helper()
	url, stop := testenv.RedisServer(t)
	w := &world{t: t, natsURL: testenv.NATS(t), redisURL: url, queue: testenv.Name(t)}
	w.init(cfg)
	return w, stop
}

// Redis losing everything under a running admitter heals itself, without
// an operator: every acked join is back at its place, every admitted
// shopper is admitted again with the same token (same id, readyAt and
// expiresAt), the held slots are held again, and nobody is admitted twice
// or on top of the slots the loss hid — while joins continue.
func TestALineWipedUnderTheAdmitterHealsItself(t *testing.T) {
	w, _ := newPrivateWorld(t, cfg(5, 20, 300))
	rdb, err := waitqueue.DialURL(w.redisURL, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	var seqs []uint64
	for i := range 12 {
		seqs = append(seqs, w.join(fmt.Sprintf("u%d", i)))
	}
	w.start(hooks{})
	testenv.Eventually(t, 10*time.Second, func() bool { return len(w.admissions()) == 5 }, "5 admissions")
	before := map[uint64]waitqueue.Entry{}
	for _, s := range seqs {
		e, _ := w.line.Poll(context.Background(), w.queue, s)
		e.Rate = 0
		before[s] = e
	}

	if err := rdb.FlushAll(context.Background()).Err(); err != nil { // total loss
		t.Fatal(err)
	}
	for i := 12; i < 15; i++ { // joins continue
		seqs = append(seqs, w.join(fmt.Sprintf("u%d", i)))
	}

	testenv.Eventually(t, 10*time.Second, func() error {
		st, err := w.line.Stats(context.Background(), w.queue)
		if err == nil && (st.Active != 5 || st.Waiting != 10) {
			err = fmt.Errorf("%d active, %d waiting", st.Active, st.Waiting)
		}
		return err
	}, "the line back: 5 slots held, 10 waiting")
	for _, s := range seqs[:12] {
		e, err := w.line.Poll(context.Background(), w.queue, s)
		if err != nil {
			t.Fatal(err)
		}
		e.Rate = 0
		want := before[s]
		want.Waiting += 3 // the joins made after the wipe
		if !reflect.DeepEqual(e, want) {
			t.Errorf("seq %d after the wipe = %+v, want %+v", s, e, want)
		}
	}
	for i, s := range seqs[12:] {
		if e, _ := w.line.Poll(context.Background(), w.queue, s); e.Status != waitqueue.Waiting || e.Position != int64(8+i) {
			t.Errorf("join %d made after the wipe = %+v, want waiting at %d", s, e, 8+i)
		}
	}
	// Some ticks later still nobody is admitted on top of the healed slots.
	time.Sleep(200 * time.Millisecond)
	if got := w.admissions(); len(got) != 5 {
		t.Fatalf("%d admissions after the wipe, want still the 5 from before", len(got))
	}
}

// One queue's unreadable events never stop another queue, nor the queue
// itself: the follower passes them.
func TestAPoisonEventHoldsNobodyBack(t *testing.T) {
	w := newWorld(t, cfg(5, 20, 300))
	other := newWorldOn(t, w, cfg(5, 20, 300))
	if _, err := w.js.Publish(context.Background(), event.EnterSubject(w.queue), []byte("not an event")); err != nil {
		t.Fatal(err)
	}
	a := w.join("alice")
	b := other.join("bob")
	w.start(hooks{})
	testenv.Eventually(t, 10*time.Second, func() bool {
		return w.status(a) == waitqueue.Admitted && other.status(b) == waitqueue.Admitted
	}, "alice (behind a poison event) and bob (another queue) admitted")
}

// A recreated entries stream numbers its joins from 1 again: the line of
// the old one is cleared, never mixed with the new one, and the new
// entries' token ids carry the new stream's identity, so nobody is handed
// another's place (nor an old order's id).
func TestARecreatedEntriesStreamNeverHandsOneUserAnothersPlace(t *testing.T) {
	w := newWorld(t, cfg(5, 20, 300))
	ctx := context.Background()
	alice := w.join("alice")
	w.start(hooks{})
	testenv.Eventually(t, 10*time.Second, func() bool { return w.status(alice) == waitqueue.Admitted }, "alice admitted")
	old, _ := bus.StreamID(ctx, w.js, event.StreamEntries)

	if err := w.js.DeleteStream(ctx, event.StreamEntries); err != nil {
		t.Fatal(err)
	}
	if err := bus.EnsureStreams(ctx, w.js, 1); err != nil {
		t.Fatal(err)
	}
	bob := w.join("bob")
	if bob != alice {
		t.Fatalf("the new stream gave bob seq %d; the test needs it to reuse alice's %d", bob, alice)
	}
	now, _ := bus.StreamID(ctx, w.js, event.StreamEntries)
	testenv.Eventually(t, 10*time.Second, func() bool {
		e, err := w.line.Poll(ctx, w.queue, bob)
		return err == nil && e.User == "bob" && e.Status == waitqueue.Admitted && e.TokenID == waitqueue.TokenID(w.queue, now, bob)
	}, "bob admitted at seq %d with a token id of the new stream (%s, not %s)", bob, now, old)
}

// A follower whose consumer goes silent while the stream holds the
// queue's events — an ordered consumer on a replica a NATS node's kill
// left behind keeps its heartbeats and can deliver nothing for a minute
// or more — follows the stream with a new consumer, so the queue's
// admission does not wait for that replica. Here the consumer is paused: silent, heartbeats and all.
func TestASilentConsumerIsReplaced(t *testing.T) {
	w := newWorld(t, cfg(5, 20, 300))
	w.start(hooks{})
	a := w.join("alice")
	testenv.Eventually(t, 10*time.Second, func() bool { return w.status(a) == waitqueue.Admitted }, "alice admitted")

	ctx := context.Background()
	st, err := w.js.Stream(ctx, event.StreamEntries)
	if err != nil {
		t.Fatal(err)
	}
	paused := 0
	for info := range st.ListConsumers(ctx).Info() {
		if !slices.Contains(info.Config.FilterSubjects, event.EnterSubject(w.queue)) {
			continue
		}
		if _, err := st.PauseConsumer(ctx, info.Name, time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		paused++
	}
	if paused == 0 {
		t.Fatal("no consumer of the queue's joins to pause")
	}
	b := w.join("bob")
	testenv.Eventually(t, 15*time.Second, func() bool { return w.status(b) == waitqueue.Admitted }, "bob, joined after the pause, admitted")
}
