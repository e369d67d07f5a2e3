package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"usher/internal/bus"
	"usher/internal/catalog"
	"usher/internal/event"
	"usher/internal/keyspace"
	"usher/internal/orders"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/linetest"
	"usher/internal/waitqueue/roles"
)

func TestMain(m *testing.M) {
	if os.Getenv(asMain) == "1" { // re-executed by admitterProcess
		main()
		os.Exit(0)
	}
	code := m.Run()
	testenv.Stop()
	os.Exit(code)
}

// world is a NATS server and a Redis shared by the admitters of one test.
type world struct {
	t        *testing.T
	natsURL  string
	redisURL string
	js       jetstream.JetStream
	queues   *catalog.Catalog
	line     *roles.All
	queue    string
	dbURL    string // where the admitter reads the stock ("": the default, none in tests)
}

func newWorld(t *testing.T, cfg catalog.Config) *world {
	t.Helper()
	w := &world{t: t, natsURL: testenv.NATS(t), redisURL: testenv.RedisURL(t), queue: testenv.Name(t)}
	w.init(cfg)
	return w
}

// newWorldOn is another queue on the servers of w.
func newWorldOn(t *testing.T, w *world, cfg catalog.Config) *world {
	t.Helper()
	o := &world{t: t, natsURL: w.natsURL, redisURL: w.redisURL, queue: testenv.Name(t) + "-2"}
	o.init(cfg)
	return o
}

func (w *world) init(cfg catalog.Config) {
	t := w.t
	t.Helper()
	nc, js, err := bus.Open(context.Background(), bus.Settings{URLs: []string{w.natsURL}, Replicas: 1}, "admitter-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	w.js = js
	if w.queues, err = catalog.Open(context.Background(), js, 1); err != nil {
		t.Fatal(err)
	}
	rdb, err := waitqueue.DialURL(w.redisURL, 8)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	w.line = roles.New(rdb)
	cfg.Name = w.queue
	w.configure(cfg)
}

func (w *world) configure(cfg catalog.Config) {
	w.t.Helper()
	if _, err := w.queues.Put(context.Background(), cfg); err != nil {
		w.t.Fatal(err)
	}
}

// start runs an admitter until the test ends; its error comes on the channel.
func (w *world) start(h hooks) <-chan error {
	w.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	done := make(chan struct{})
	env := map[string]string{
		"USHER_NATS_URL": w.natsURL, "USHER_REDIS_URL": w.redisURL,
		"USHER_ADMITTER_ADDR": "127.0.0.1:0", "USHER_LOG_LEVEL": "error",
	}
	if w.dbURL != "" {
		env["USHER_DATABASE_URL"] = w.dbURL
	}
	go func() {
		defer close(done)
		errc <- runWith(ctx, func(k string) string { return env[k] }, io.Discard, h)
	}()
	w.t.Cleanup(func() { cancel(); <-done })
	return errc
}

// join publishes a join as the gateway does and returns its sequence.
func (w *world) join(user string) uint64 {
	w.t.Helper()
	id := fmt.Sprintf("%s/%s/%d", w.queue, user, time.Now().UnixNano())
	body, _ := event.Marshal(id, event.TypeJoined, user, time.Now(), event.Joined{Queue: w.queue, User: user})
	ack, err := w.js.Publish(context.Background(), event.EnterSubject(w.queue), body, jetstream.WithMsgID(id))
	if err != nil {
		w.t.Fatal(err)
	}
	return ack.Sequence
}

func (w *world) status(seq uint64) waitqueue.Status {
	w.t.Helper()
	e, err := w.line.Poll(context.Background(), w.queue, seq)
	if err != nil {
		w.t.Fatal(err)
	}
	return e.Status
}

// each hands every event of subject in stream, decoded as type typ into
// a value of its own, to f with its metadata, in stream order.
func each[T any](w *world, stream, subject, typ string, f func(T, *jetstream.MsgMetadata)) {
	w.t.Helper()
	cons, err := w.js.OrderedConsumer(context.Background(), stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		w.t.Fatal(err)
	}
	for {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(200*time.Millisecond))
		if err != nil {
			w.t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			var v T
			if _, err := event.Unmarshal(m.Data(), typ, &v); err != nil {
				w.t.Fatal(err)
			}
			md, err := m.Metadata()
			if err != nil {
				w.t.Fatal(err)
			}
			f(v, md)
			n++
		}
		if n == 0 {
			return
		}
	}
}

// admissions reads every admission event of the queue from the stream.
func (w *world) admissions() []event.Admitted {
	w.t.Helper()
	var out []event.Admitted
	each(w, event.StreamAdmissions, event.AdmittedSubject(w.queue), event.TypeAdmitted, func(a event.Admitted, _ *jetstream.MsgMetadata) {
		out = append(out, a)
	})
	return out
}

func cfg(target, tickMs, ttl int) catalog.Config {
	c := catalog.Defaults("")
	c.TargetActive, c.TickMs, c.TokenTTLSeconds = target, tickMs, ttl
	return c
}

// adaptiveCfg is an adaptive queue starting at targetActive target, its
// limit between 2 and 24, decided every 100 ms.
func adaptiveCfg(target int) catalog.Config {
	c := cfg(target, 20, 300)
	c.Adaptive = &catalog.Adaptive{Enabled: true, Min: 2, Max: 24, WindowMs: 100}
	return c
}

func TestAdmitsInJoinOrderUpToTargetActive(t *testing.T) {
	w := newWorld(t, cfg(5, 20, 2))
	var seqs []uint64
	for i := 0; i < 12; i++ {
		seqs = append(seqs, w.join(fmt.Sprintf("u%d", i)))
	}
	w.start(hooks{})
	testenv.Eventually(t, 5*time.Second, func() bool { return len(w.admissions()) == 5 }, "5 admissions")
	for i, s := range seqs {
		want := waitqueue.Waiting
		if i < 5 {
			want = waitqueue.Admitted
		}
		if got := w.status(s); got != want {
			t.Errorf("shopper %d: %s, want %s", i, got, want)
		}
	}
	// When the first five tokens expire unused, the next five follow.
	testenv.Eventually(t, 10*time.Second, func() bool { return len(w.admissions()) == 10 }, "10 admissions")
	for i, a := range w.admissions() {
		if a.Seq != seqs[i] {
			t.Fatalf("admission %d is seq %d, want %d (join order)", i, a.Seq, seqs[i])
		}
	}
	if got := w.status(seqs[0]); got != waitqueue.Expired {
		t.Errorf("first shopper after TTL: %s, want expired", got)
	}
}

func TestAJoinSeenTwiceDoesNotMoveTheShopper(t *testing.T) {
	c := cfg(1, 20, 300)
	c.State = catalog.StatePaused
	w := newWorld(t, c)
	a := w.join("alice")
	w.join("bob")
	w.join("alice") // a retried join that got past the dedup window
	w.start(hooks{})
	testenv.Eventually(t, 5*time.Second, func() bool {
		st, _ := w.line.Stats(context.Background(), w.queue)
		return st.Waiting == 2
	}, "alice and bob in line once each")
	e, _ := w.line.Poll(context.Background(), w.queue, a)
	if e.Position != 1 {
		t.Fatalf("alice = %+v, want position 1", e)
	}
}

func TestConfigChangesApplyWithoutRestart(t *testing.T) {
	c := cfg(10, 20, 300)
	c.State = catalog.StatePaused
	w := newWorld(t, c)
	for i := 0; i < 3; i++ {
		w.join(fmt.Sprintf("u%d", i))
	}
	w.start(hooks{})
	testenv.Eventually(t, 5*time.Second, func() bool {
		st, _ := w.line.Stats(context.Background(), w.queue)
		return st.Waiting == 3
	}, "three waiting while paused")
	c.Name, c.State = w.queue, catalog.StateOpen
	w.configure(c)
	testenv.Eventually(t, time.Second, func() bool { return len(w.admissions()) == 3 }, "admitted within a second of resuming")
}

// A queue taken out of the catalog ends its work in the admitter; put back
// under the same name, it is worked on again — its joins followed into the
// line and its shoppers admitted — not left to the gateway's admit-at-once
// with nobody to free a slot or follow the stream.
func TestAQueuePutBackInTheCatalogIsWorkedOnAgain(t *testing.T) {
	c := cfg(5, 20, 300)
	c.State = catalog.StatePaused
	w := newWorld(t, c)
	w.start(hooks{})
	w.join("before")
	testenv.Eventually(t, 5*time.Second, func() bool {
		st, _ := w.line.Stats(context.Background(), w.queue)
		return st.Waiting == 1
	}, "the first join followed into the line")

	kv, err := w.js.KeyValue(context.Background(), catalog.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(context.Background(), w.queue); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // many of the admitter's 20 ms ticks: its loop has seen the queue go

	c.Name, c.State = w.queue, catalog.StateOpen
	w.configure(c)
	after := w.join("after")
	testenv.Eventually(t, 5*time.Second, func() bool { return len(w.admissions()) == 2 }, "both shoppers admitted once the queue is back")
	if got := w.status(after); got != waitqueue.Admitted {
		t.Errorf("the join made after the queue came back: %s, want admitted", got)
	}
}

// A deleted queue's line leaves Redis: removed by the admitter that worked
// on it once its work has stopped, and by an admitter that starts after a
// deletion it did not see.
func TestADeletedQueuesLineLeavesRedis(t *testing.T) {
	w := newDeletable(t)
	w.start(hooks{})
	seq := w.join("alice")
	testenv.Eventually(t, 5*time.Second, func() bool { return w.status(seq) == waitqueue.Waiting }, "alice in line")
	w.delete()
	testenv.Eventually(t, 5*time.Second, w.noKeys, "the deleted queue's line removed by the admitter that worked on it")
}

// A deleted queue leaves the admitter's metrics too: no gauge goes on
// showing its last line, and queues deleted over a long sale do not pile
// up in memory and in every scrape.
func TestADeletedQueuesMetricsLeaveTheAdmitter(t *testing.T) {
	w := newDeletable(t)
	addr := freeAddr(t)
	w.startAt(addr)
	w.join("alice")
	series := func() int { return testenv.QueueSeries("http://"+addr+"/metrics", w.queue) }
	testenv.Eventually(t, 5*time.Second, func() bool { return series() > 0 }, "the queue's series on /metrics")
	w.delete()
	testenv.Eventually(t, 5*time.Second, func() bool { return series() == 0 }, "no series of the deleted queue left")
}

// So do an adaptive queue's: its limit and the controller's series, its
// counters of decisions among them.
func TestADeletedAdaptiveQueuesMetricsLeaveTheAdmitter(t *testing.T) {
	w := newDeletableOf(t, adaptiveCfg(5))
	addr := freeAddr(t)
	w.startAt(addr)
	w.join("alice")
	adaptive := func() int {
		return testenv.QueueSeries("http://"+addr+"/metrics", w.queue, "usher_adaptive_limit", "usher_adaptive_decisions_total")
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return adaptive() >= 2 }, "the queue's adaptive limit and decisions on /metrics")
	w.delete()
	series := func() int { return testenv.QueueSeries("http://"+addr+"/metrics", w.queue) }
	testenv.Eventually(t, 5*time.Second, func() bool { return series() == 0 }, "no series of the deleted queue left")
}

func TestALineLeftByAQueueDeletedWhileNoAdmitterRanLeavesAtStart(t *testing.T) {
	w := newDeletable(t)
	if _, err := w.line.ClosedSince(context.Background(), w.queue, true); err != nil { // a line in Redis
		t.Fatal(err)
	}
	w.delete()
	if w.noKeys() == nil {
		t.Fatal("no line to remove: the test made none")
	}
	w.start(hooks{})
	testenv.Eventually(t, 5*time.Second, w.noKeys, "the line of a queue deleted before the admitter started removed by it")
}

// deletable is a world whose queue the test deletes.
type deletable struct {
	*world
	rdb redis.UniversalClient
}

func newDeletable(t *testing.T) deletable {
	c := cfg(5, 20, 300)
	c.State = catalog.StatePaused
	return newDeletableOf(t, c)
}

func newDeletableOf(t *testing.T, c catalog.Config) deletable {
	w := newWorld(t, c)
	rdb, err := waitqueue.DialURL(w.redisURL, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	return deletable{w, rdb}
}

// delete closes the queue and deletes it, as the gateway's DELETE does.
func (w deletable) delete() {
	w.t.Helper()
	ctx := context.Background()
	if _, _, err := w.queues.Update(ctx, w.queue, func(c *catalog.Config) bool { c.State = catalog.StateClosed; return true }); err != nil {
		w.t.Fatal(err)
	}
	if _, err := w.queues.Delete(ctx, w.queue, time.Now(), func(catalog.Config) error { return nil }); err != nil {
		w.t.Fatal(err)
	}
}

// noKeys says which of the queue's keys Redis still holds, if any.
func (w deletable) noKeys() error {
	ks, err := w.rdb.Keys(context.Background(), keyspace.Of(w.queue).Pattern()).Result()
	if err == nil && len(ks) > 0 {
		err = fmt.Errorf("left in Redis: %v", ks)
	}
	return err
}

func TestTwoAdmittersNeverOverAdmitNorAdmitTwice(t *testing.T) {
	w := newWorld(t, cfg(10, 10, 1))
	const n = 50
	for i := 0; i < n; i++ {
		w.join(fmt.Sprintf("u%d", i))
	}
	w.start(hooks{})
	w.start(hooks{})
	var maxActive atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // watch the slot count the whole time
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			st, err := w.line.Stats(context.Background(), w.queue)
			if err == nil && st.Active > maxActive.Load() {
				maxActive.Store(st.Active)
			}
		}
	}()
	testenv.Eventually(t, 30*time.Second, func() bool { return len(w.admissions()) == n }, "all %d admitted", n)
	close(done)
	wg.Wait()
	if m := maxActive.Load(); m > 10 {
		t.Fatalf("saw %d slots held, targetActive is 10", m)
	}
	seen := map[uint64]bool{}
	var last uint64
	for _, a := range w.admissions() {
		if seen[a.Seq] {
			t.Fatalf("seq %d admitted twice", a.Seq)
		}
		seen[a.Seq] = true
		if a.Seq < last {
			t.Fatalf("seq %d admitted after %d", a.Seq, last)
		}
		last = a.Seq
	}
}

var errCrash = errors.New("simulated crash")

// An admitter that dies between the admission script and the publish loses
// nobody: the next one announces each admission exactly once.
func TestCrashBetweenAdmitAndPublish(t *testing.T) {
	w := newWorld(t, cfg(3, 20, 300))
	for i := 0; i < 3; i++ {
		w.join(fmt.Sprintf("u%d", i))
	}
	// It dies at the first tick that admitted anyone (the follower may
	// not have applied all three joins by then: waiting for the outbox to
	// hold exactly three could wait forever once a tick admitted fewer).
	crashed := w.start(hooks{afterAdmit: func(q string) error {
		if out, _ := w.line.Outbox(context.Background(), q, 10); len(out) > 0 {
			return errCrash
		}
		return nil
	}})
	testenv.EndsWith(t, crashed, 30*time.Second, errCrash)
	if got := len(w.admissions()); got != 0 {
		t.Fatalf("%d admissions published before the crash, want 0", got)
	}
	w.start(hooks{})
	testenv.Eventually(t, 5*time.Second, func() bool { return len(w.admissions()) >= 3 }, "3 admissions after restart")
	assertOnceEach(t, w.admissions(), 3)
}

// An admitter that dies after publishing but before trimming its outbox
// makes the next one publish again; the stream's dedup drops the repeats.
func TestCrashAfterPublishBeforeTrim(t *testing.T) {
	w := newWorld(t, cfg(3, 20, 300))
	for i := 0; i < 3; i++ {
		w.join(fmt.Sprintf("u%d", i))
	}
	crashed := w.start(hooks{afterPublish: func(string) error { return errCrash }})
	if err := <-crashed; !errors.Is(err, errCrash) {
		t.Fatalf("first admitter ended with %v, want the simulated crash", err)
	}
	w.start(hooks{})
	testenv.Eventually(t, 5*time.Second, func() bool {
		out, _ := w.line.Outbox(context.Background(), w.queue, 10)
		return len(out) == 0
	}, "outbox drained by the second admitter")
	assertOnceEach(t, w.admissions(), 3)
}

func assertOnceEach(t *testing.T, got []event.Admitted, want int) {
	t.Helper()
	ids := map[string]int{}
	for _, a := range got {
		ids[a.TokenID]++
	}
	if len(got) != want || len(ids) != want {
		t.Fatalf("stream holds %d admissions with %d distinct token ids, want %d each once", len(got), len(ids), want)
	}
}

// At closesAt the sale is over: nobody more is admitted, and the admitter
// closes the queue in the catalog with reason ended (an audited change), so
// every service tells the shoppers still in line CLOSED.
func TestAtClosesAtNobodyMoreIsAdmittedAndTheQueueCloses(t *testing.T) {
	c := cfg(1, 20, 300)
	closesAt := time.Now().Add(1500 * time.Millisecond)
	c.ClosesAt = &closesAt
	w := newWorld(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go w.queues.Run(ctx) // follow the admitter's change
	first, second := w.join("u0"), w.join("u1")
	w.start(hooks{})
	testenv.Eventually(t, 5*time.Second, func() bool { return w.status(first) == waitqueue.Admitted }, "the first admitted")
	testenv.Eventually(t, 5*time.Second, func() bool {
		got, _ := w.queues.Get(w.queue)
		return got.State == catalog.StateClosed && got.ClosedReason == catalog.ReasonEnded
	}, "the queue closed with reason ended")
	if time.Now().Before(closesAt) {
		t.Fatal("closed before closesAt")
	}
	// The first shopper's slot comes free: before closesAt the second would
	// be admitted at the next tick.
	if _, err := linetest.Leave(ctx, w.line, w.queue, first, "u0"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // fifteen ticks
	if st := w.status(second); st != waitqueue.Waiting {
		t.Fatalf("the second shopper is %s after closesAt; want still waiting (told CLOSED), never admitted", st)
	}
	if n := len(w.admissions()); n != 1 {
		t.Fatalf("%d admissions; want the first only", n)
	}
}

// closedLine is a queue with one shopper admitted with a token of ttl,
// closed by hand, and an admitter whose clock the test sets: drop(at) runs
// its cleanup of closed lines at that time and reports whether the
// shopper's entry record and user pointer are still in Redis (what a poll
// and a redeem read). It returns the world, the shopper's entry and when
// the queue closed, on Redis's time.
func closedLine(t *testing.T, ttl time.Duration) (w *world, shopper waitqueue.Entry, closedAt time.Time, drop func(at time.Time) bool) {
	t.Helper()
	w = newWorld(t, cfg(1, 20, int(ttl.Seconds())))
	ctx := t.Context()
	seq := w.join("u0")
	if _, err := w.line.Ingest(ctx, w.queue, testenv.Epoch, seq, "u0", 0); err != nil {
		t.Fatal(err)
	}
	testenv.Applied(t, w.line, w.queue, testenv.Epoch, seq)
	testenv.Tick(t, w.line, w.queue, waitqueue.Tick{TargetActive: 1, TickLength: 20 * time.Millisecond, TokenTTL: ttl})
	shopper, err := w.line.Poll(ctx, w.queue, seq)
	if err != nil {
		t.Fatal(err)
	}
	if shopper.Status != waitqueue.Admitted {
		t.Fatalf("the shopper is %s, want admitted", shopper.Status)
	}
	closed := cfg(1, 20, int(ttl.Seconds()))
	closed.Name, closed.State = w.queue, catalog.StateClosed
	w.configure(closed)
	if closedAt, err = w.line.ClosedSince(ctx, w.queue, true); err != nil {
		t.Fatal(err)
	}
	rdb, err := waitqueue.DialURL(w.redisURL, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	var clock time.Time
	a := &admitter{log: slog.New(slog.DiscardHandler), queues: w.queues, admission: w.line.Admission,
		projection: w.line.Projection, drop: w.line.Drop, claims: w.line.Claims, js: w.js, events: w.js,
		now: func() time.Time { return clock }, metrics: newMetrics()}
	k := keyspace.Of(w.queue)
	return w, shopper, closedAt, func(at time.Time) bool {
		t.Helper()
		clock = at
		if err := a.dropIfClosedLong(ctx, closed); err != nil {
			t.Fatal(err)
		}
		n, err := rdb.Exists(ctx, k.Entry(seq), k.User("u0")).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n == 2
	}
}

// A closed queue's line leaves Redis ClosedGrace after the closing once
// the tokens it issued have expired: the expired shopper's record too.
func TestAClosedQueuesLineIsRemovedAfterTheGrace(t *testing.T) {
	w, shopper, closedAt, drop := closedLine(t, 2*time.Second)
	// A closed queue's ticks (paused) still free the slots of expired tokens.
	testenv.Eventually(t, 5*time.Second, func() bool {
		testenv.Tick(t, w.line, w.queue, waitqueue.Tick{TargetActive: 1, TickLength: 20 * time.Millisecond, TokenTTL: 2 * time.Second, Paused: true})
		return w.status(shopper.Seq) == waitqueue.Expired
	}, "the shopper's token expired")
	if !drop(closedAt.Add(keyspace.ClosedGrace - time.Minute)) {
		t.Fatal("the line was removed before ClosedGrace had passed")
	}
	if drop(closedAt.Add(keyspace.ClosedGrace)) {
		t.Fatal("the line is still in Redis ClosedGrace after the closing, with every token expired")
	}
}

// A shopper admitted before the closing orders until their token expires,
// even when it outlives ClosedGrace: the line stays in Redis until then.
// It was removed an hour after the closing, and a READY shopper with a
// two-hour token was told 503 token-unconfirmed on every order after it.
func TestAClosedQueuesLineStaysUntilItsTokensExpire(t *testing.T) {
	_, shopper, closedAt, drop := closedLine(t, 2*time.Hour)
	if !drop(closedAt.Add(keyspace.ClosedGrace + 5*time.Minute)) {
		t.Fatal("the READY shopper's entry was removed 1h05 after the closing; their token expires at " + shopper.ExpiresAt.String())
	}
	if !drop(shopper.ExpiresAt.Add(-time.Second)) {
		t.Fatal("the READY shopper's entry was removed a second before their token expires")
	}
	if drop(shopper.ExpiresAt) {
		t.Fatal("the line is still in Redis once the last token has expired and the grace has passed")
	}
}

// storedAt reads when the stream stored each event of subject (of type
// typ), by the event's sequence field (a join's place for a leave or an admission).
func (w *world) storedAt(stream, subject, typ string) map[uint64]time.Time {
	w.t.Helper()
	out := map[uint64]time.Time{}
	each(w, stream, subject, typ, func(d struct {
		Seq uint64 `json:"seq"`
	}, md *jetstream.MsgMetadata) {
		out[d.Seq] = md.Timestamp
	})
	return out
}

// Shoppers a tick finds gone and the admission that then passes them are
// recorded in that order: the leaves first. The tick takes the gone out of
// the line before it admits anyone behind them; an admission announced
// before the leaves were recorded would show the streams someone admitted
// past shoppers still waiting, and usherctl audit (which judges from the
// streams alone) would report "VIOLATED admission in join order" for a
// fair line.
func TestAbandonedShoppersAreRecordedBeforeTheAdmissionPassingThem(t *testing.T) {
	c := cfg(1, 100, 300)
	after := 10
	c.AbandonAfterSeconds = &after
	w := newWorld(t, c)
	w.start(hooks{})
	holder := w.join("holder")
	testenv.Eventually(t, 5*time.Second, func() bool { return w.status(holder) == waitqueue.Admitted }, "the holder admitted")
	gone1, gone2, next := w.join("gone1"), w.join("gone2"), w.join("next")
	testenv.Eventually(t, 5*time.Second, func() bool { return w.status(next) == waitqueue.Waiting }, "the line applied")

	// In one step: gone1 and gone2 were last seen long ago, and the
	// holder's token has expired. The next tick frees the slot, takes the
	// two out and admits next, all at once.
	rdb, err := waitqueue.DialURL(w.redisURL, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	k := keyspace.Of(w.queue)
	_, err = rdb.TxPipelined(context.Background(), func(p redis.Pipeliner) error {
		p.ZAdd(context.Background(), k.Seen(), redis.Z{Score: 1, Member: gone1}, redis.Z{Score: 1, Member: gone2})
		p.ZAdd(context.Background(), k.Active(), redis.Z{Score: 1, Member: holder})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var left, admitted map[uint64]time.Time
	testenv.Eventually(t, 10*time.Second, func() bool {
		left = w.storedAt(event.StreamEntries, event.LeaveSubject(w.queue), event.TypeLeft)
		admitted = w.storedAt(event.StreamAdmissions, event.AdmittedSubject(w.queue), event.TypeAdmitted)
		return len(left) == 2 && !admitted[next].IsZero()
	}, "two leaves and next's admission")
	for _, g := range []uint64{gone1, gone2} {
		if left[g].IsZero() || !left[g].Before(admitted[next]) {
			t.Errorf("seq %d's leave stored at %s, next's admission at %s: want the leave first", g, left[g], admitted[next])
		}
	}
}

// A shopper's leave the line took but its gateway never stored — its
// publish failed, or it stopped between the line and the stream — is
// recorded by the admitter, under the id the gateway would have used (the
// gateway's own record, coming late, is dropped as a repeat), and only
// then is the slot it kept given to the next shopper: the stream says the
// slot came back before it says it went again.
func TestALeaveTheGatewayDidNotStoreIsRecordedByTheAdmitter(t *testing.T) {
	w := newWorld(t, cfg(1, 50, 300))
	w.start(hooks{})
	holder, bob := w.join("holder"), w.join("bob")
	testenv.Eventually(t, 5*time.Second, func() bool {
		return w.status(holder) == waitqueue.Admitted && w.status(bob) == waitqueue.Waiting
	}, "holder admitted, bob in line")
	if had, toRecord, err := w.line.Leave(t.Context(), w.queue, holder, "holder"); err != nil || had != waitqueue.Admitted || !toRecord {
		t.Fatalf("Leave(holder) = %s, %t, %v; want admitted, to record", had, toRecord, err)
	}
	var left, admitted map[uint64]time.Time
	testenv.Eventually(t, 10*time.Second, func() bool {
		left = w.storedAt(event.StreamEntries, event.LeaveSubject(w.queue), event.TypeLeft)
		admitted = w.storedAt(event.StreamAdmissions, event.AdmittedSubject(w.queue), event.TypeAdmitted)
		return !left[holder].IsZero() && !admitted[bob].IsZero()
	}, "holder's leave recorded, bob admitted")
	if !left[holder].Before(admitted[bob]) {
		t.Errorf("holder's leave stored at %s, bob's admission at %s: want the leave first", left[holder], admitted[bob])
	}
	if toRecord, err := w.line.LeavesToRecord(t.Context(), w.queue, 10); err != nil || len(toRecord) != 0 {
		t.Errorf("leaves to record = %+v, %v; want none", toRecord, err)
	}
	id, body, err := event.NewLeft(event.Left{Queue: w.queue, User: "holder", Seq: holder}, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ack, err := w.js.Publish(t.Context(), event.LeaveSubject(w.queue), body, jetstream.WithMsgID(id))
	if err != nil || !ack.Duplicate {
		t.Fatalf("the gateway's record, late: %+v, %v; want a duplicate", ack, err)
	}
	if n := len(w.storedAt(event.StreamEntries, event.LeaveSubject(w.queue), event.TypeLeft)); n != 1 {
		t.Fatalf("%d leaves stored, want holder's once", n)
	}
}

// A passthrough join into a new stock-aware queue is READY in its own
// answer: the gateway admits it at once (AdmitEntry) as soon as the queue
// has ticked, and the first tick knows the stock, which the admitter reads
// before it. It read it after: the first tick found the stock unknown
// (nothing sellable), and every join until the next tick — a minute here,
// 100 ms by default — answered WAITING.
func TestAStockAwareQueuesFirstTickKnowsItsStock(t *testing.T) {
	ctx := context.Background()
	db := testenv.PostgresURL(t)
	store, err := orders.Open(db, orders.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	// A SKU of its own: the stock ledger is shared by every queue that
	// sells a SKU, across tests too.
	sku := testenv.Name(t) + "-shoe"
	if _, err := store.SetStock(ctx, sku, 10); err != nil {
		t.Fatal(err)
	}
	c := cfg(20, 60000, 300) // one tick in the test: the next is a minute away
	c.Mode, c.SKU = catalog.ModePassthrough, sku
	w := newWorld(t, c)
	w.dbURL = db
	w.start(hooks{})
	testenv.Eventually(t, 10*time.Second, func() bool {
		st, err := w.line.Stats(ctx, w.queue)
		return err == nil && !st.LastTick.IsZero()
	}, "the queue never ticked")

	seq := w.join("alice")
	testenv.Eventually(t, 10*time.Second, func() bool { return w.status(seq) == waitqueue.Waiting }, "alice not in line")
	epoch, err := bus.StreamID(ctx, w.js, event.StreamEntries)
	if err != nil {
		t.Fatal(err)
	}
	got, err := w.line.AdmitEntry(ctx, w.queue, epoch, seq, waitqueue.AtOnce{TokenTTL: 5 * time.Minute, TickLength: time.Minute,
		StockAware: true, Share: waitqueue.Share{SKUs: []string{sku}}})
	if err != nil || len(got) != 1 || got[0] != seq {
		st, _ := w.line.Stats(ctx, w.queue)
		t.Fatalf("AdmitEntry after the first tick = %v, %v (stock %q); want alice (%d) admitted at once", got, err, st.Stock, seq)
	}
}
