package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"testing"
	"time"

	"usher/internal/analytics"
	"usher/internal/bus"
	"usher/internal/catalog"
	"usher/internal/event"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
)

// startAt runs an admitter serving its metrics at addr until the test ends.
func (w *world) startAt(addr string) {
	w.t.Helper()
	env := map[string]string{
		"USHER_NATS_URL": w.natsURL, "USHER_REDIS_URL": w.redisURL,
		"USHER_ADMITTER_ADDR": addr, "USHER_LOG_LEVEL": "error",
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runWith(ctx, func(k string) string { return env[k] }, io.Discard, hooks{}) }()
	w.t.Cleanup(func() { cancel(); <-done })
}

func freeAddr(t *testing.T) string {
	t.Helper()
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", port)
}

// joinedAt is when the entries stream stored the join with sequence seq.
func (w *world) joinedAt(seq uint64) time.Time {
	w.t.Helper()
	st, err := w.js.Stream(context.Background(), event.StreamEntries)
	if err != nil {
		w.t.Fatal(err)
	}
	m, err := st.GetMsg(context.Background(), seq)
	if err != nil {
		w.t.Fatal(err)
	}
	return m.Time
}

// expectedWait is the time in line of every admission the stream holds,
// in seconds: readyAt less the join's stored time.
func (w *world) expectedWait() float64 {
	w.t.Helper()
	var sum float64
	for _, a := range w.admissions() {
		sum += a.ReadyAt.Sub(w.joinedAt(a.Seq)).Seconds()
	}
	return sum
}

// Two admitters work on one queue: every admitted shopper's time in line
// is observed once between them (by the one whose publish the stream
// stored), with the join's time as the line recorded it (the stream's,
// to the millisecond) and the admission's readyAt, and
// every token that expires unused is counted once as the outcome
// "expired" (by the admitter whose tick expired it), as many as
// usher_tokens_expired_total. The labels are the queue and the outcome.
func TestTwoAdmittersCountEachShoppersJourneyOnce(t *testing.T) {
	c := cfg(10, 20, 1)
	c.State = catalog.StatePaused
	w := newWorld(t, c)
	const n = 8
	users := make([]string, n)
	for i := range users {
		users[i] = fmt.Sprintf("journey-u%d", i)
		w.join(users[i])
	}
	addrs := []string{freeAddr(t), freeAddr(t)}
	for _, addr := range addrs {
		w.startAt(addr)
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		st, _ := w.line.Stats(context.Background(), w.queue)
		return st.Waiting == n
	}, "%d waiting while paused", n)
	time.Sleep(300 * time.Millisecond) // a wait to measure
	c.Name, c.State = w.queue, catalog.StateOpen
	w.configure(c)
	testenv.Eventually(t, 10*time.Second, func() bool { return len(w.admissions()) == n }, "%d admissions", n)

	q := map[string]string{"queue": w.queue}
	expired := map[string]string{"queue": w.queue, "outcome": analytics.Expired}
	var waits, outcomes, tokensExpired, sum float64
	var scrapes []testenv.Values
	testenv.Eventually(t, 15*time.Second, func() bool {
		waits, outcomes, tokensExpired, sum, scrapes = 0, 0, 0, 0, nil
		for _, addr := range addrs {
			v := testenv.ScrapeValues(t, "http://"+addr+"/metrics")
			scrapes = append(scrapes, v)
			waits += v.Value(analytics.TimeInLine, q)
			sum += v.HistogramSum(analytics.TimeInLine, q)
			outcomes += v.Value(analytics.Outcomes, expired)
			tokensExpired += v.Value("usher_tokens_expired_total", q)
		}
		return waits >= n && outcomes >= n
	}, "time in line observed %v times, expired counted %v times, want %d each", waits, outcomes, n)
	time.Sleep(200 * time.Millisecond) // nothing more may come
	if waits != n || outcomes != n || tokensExpired != n {
		t.Fatalf("time in line observed %v times, outcome expired %v, tokens expired %v: want %d each", waits, outcomes, tokensExpired, n)
	}
	// The line keeps the join's time in milliseconds: within a millisecond
	// of the stream's each, for joins its follower applied.
	if want := w.expectedWait(); math.Abs(sum-want) > n*0.001 {
		t.Errorf("time in line adds up to %.6f s, want %.6f s (readyAt less the join's stored time, to the ms)", sum, want)
	}
	if sum < n*0.3 {
		t.Errorf("time in line adds up to %.3f s, less than the %d × 0.3 s they waited while paused", sum, n)
	}
	for _, v := range scrapes {
		for _, ls := range v.Labels(analytics.TimeInLine) {
			if len(ls) != 1 || ls["queue"] != w.queue {
				t.Errorf("%s labelled %v, want the queue only", analytics.TimeInLine, ls)
			}
		}
		for _, ls := range v.Labels(analytics.Outcomes) {
			if len(ls) != 2 || ls["queue"] != w.queue || ls["outcome"] != analytics.Expired {
				t.Errorf("%s labelled %v, want the queue and the outcome", analytics.Outcomes, ls)
			}
		}
	}
}

// An admitter that published admissions and died before trimming its
// outbox measured them; the next one publishes them again, the stream
// drops the repeats, and it measures nothing: one observation each.
func TestTimeInLineIsObservedByTheAdmitterWhosePublishWasStored(t *testing.T) {
	w := newWorld(t, cfg(10, 20, 300))
	ctx := t.Context()
	epoch, err := bus.StreamID(ctx, w.js, event.StreamEntries)
	if err != nil {
		t.Fatal(err)
	}
	var last uint64
	for i := range 3 {
		user := fmt.Sprintf("u%d", i)
		last = w.join(user)
		if _, err := w.line.Ingest(ctx, w.queue, epoch, last, user, 0); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Applied(t, w.line, w.queue, epoch, last)
	time.Sleep(100 * time.Millisecond)
	testenv.Tick(t, w.line, w.queue, waitqueue.Tick{Epoch: epoch, TargetActive: 10, TickLength: 20 * time.Millisecond, TokenTTL: time.Minute})

	newAdmitter := func(h hooks) *admitter {
		m := newMetrics()
		a := &admitter{log: slog.New(slog.DiscardHandler), queues: w.queues, admission: w.line.Admission,
			projection: w.line.Projection, drop: w.line.Drop, claims: w.line.Claims, js: w.js, events: w.js,
			now: time.Now, metrics: m, hooks: h}
		a.waits = newWaits(a.log, w.js, func() string { return epoch }, m)
		go a.waits.Run(ctx)
		return a
	}
	first := newAdmitter(hooks{afterPublish: func(string) error { return errCrash }})
	if err := first.announce(ctx, w.queue); err == nil {
		t.Fatal("the first admitter's announce went through its crash point")
	}
	second := newAdmitter(hooks{})
	if err := second.announce(ctx, w.queue); err != nil {
		t.Fatal(err)
	}
	assertOnceEach(t, w.admissions(), 3)

	q := map[string]string{"queue": w.queue}
	var got testenv.Values
	testenv.Eventually(t, 5*time.Second, func() bool {
		got = testenv.GatherValues(t, first.metrics.reg)
		return got.Value(analytics.TimeInLine, q) == 3
	}, "the first admitter measured %v admissions, want 3", got.Value(analytics.TimeInLine, q))
	// Ingested joins: the line's time is the ingest's, after the stream
	// stored them (at most the stream's time to the millisecond, 1 ms
	// each) and at least the 100 ms slept between the last ingest and the
	// tick. How much after depends on the machine's load (30 ms and more
	// after the publish on a loaded one), so only the stream's times bound
	// it from above.
	if most, sum := w.expectedWait(), got.HistogramSum(analytics.TimeInLine, q); sum > most+3*0.001 || sum < 0.3 {
		t.Errorf("time in line adds up to %.6f s, want 0.3 s to %.6f s (the stream's times)", sum, most)
	}
	time.Sleep(100 * time.Millisecond)
	if n := testenv.GatherValues(t, second.metrics.reg).Value(analytics.TimeInLine, q); n != 0 {
		t.Errorf("the admitter whose publishes were repeats measured %v admissions, want 0", n)
	}
}

// A shopper who joined a scheduled drop's pre-queue waits in line from
// the opening; a join after it from the join; an opening after the
// admission (the queue's next drop) changes nothing; a token of another
// incarnation of the entries stream is not measured.
func TestTimeInLineOfAPreQueueJoinCountsFromTheOpening(t *testing.T) {
	w := newWorld(t, cfg(10, 20, 300))
	ctx := t.Context()
	epoch, err := bus.StreamID(ctx, w.js, event.StreamEntries)
	if err != nil {
		t.Fatal(err)
	}
	seq := w.join("early-bird")
	joined := w.joinedAt(seq)
	ws := newWaits(slog.New(slog.DiscardHandler), w.js, func() string { return epoch }, newMetrics())
	adm := func(readyAt time.Time, ep string) waitqueue.Admission {
		return waitqueue.Admission{Queue: w.queue, Seq: seq, User: "early-bird", TokenID: waitqueue.TokenID(w.queue, ep, seq), ReadyAt: readyAt}
	}
	opens := joined.Add(10 * time.Second)
	later := joined.Add(time.Hour)
	for _, tc := range []struct {
		name    string
		opensAt *time.Time
		a       waitqueue.Admission
		want    time.Duration
		ok      bool
	}{
		{"pre-queue join", &opens, adm(joined.Add(12*time.Second), epoch), 2 * time.Second, true},
		{"no schedule", nil, adm(joined.Add(12*time.Second), epoch), 12 * time.Second, true},
		{"the next drop's opening", &later, adm(joined.Add(12*time.Second), epoch), 12 * time.Second, true},
		{"another stream's token", nil, adm(joined.Add(12*time.Second), "old-epoch"), 0, false},
	} {
		got, ok := ws.inLine(ctx, waitBatch{queue: w.queue, opensAt: tc.opensAt}, tc.a)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: inLine = %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}
