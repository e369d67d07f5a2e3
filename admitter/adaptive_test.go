package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"usher/internal/adaptive"
	"usher/internal/event"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
)

// feeder stands in for the order workers: it adds a sample to the queue's
// current decision window every 20 ms, until the test ends.
func feeder(t *testing.T, st *adaptive.Store, q string, window time.Duration, sample *atomic.Pointer[adaptive.Sample]) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if err := st.Record(ctx, q, window, *sample.Load()); err != nil && ctx.Err() == nil {
				t.Error(err)
				return
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// limitEvents reads the queue's usher.ops.limit_changed events.
func (w *world) limitEvents() []event.LimitChanged {
	w.t.Helper()
	ctx := context.Background()
	cons, err := w.js.OrderedConsumer(ctx, event.StreamOps, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{event.LimitChangedSubject},
	})
	if err != nil {
		w.t.Fatal(err)
	}
	var out []event.LimitChanged
	for {
		batch, err := cons.Fetch(100, jetstream.FetchMaxWait(200*time.Millisecond))
		if err != nil {
			w.t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			var c event.LimitChanged
			if _, err := event.Unmarshal(m.Data(), event.TypeLimitChanged, &c); err != nil {
				w.t.Fatal(err)
			}
			if c.Queue == w.queue {
				out = append(out, c)
			}
		}
		if n == 0 {
			return out
		}
	}
}

// An adaptive queue starts at its targetActive; while the order path is
// fast and shoppers wait, the limit rises and the admitter admits past the
// configured targetActive (never past max); the window in which orders
// fail cuts it at once; large moves are on USHER_OPS and every change is
// on /metrics, labelled by queue and reason only.
func TestAdaptiveLimitFollowsTheOrderPath(t *testing.T) {
	c := adaptiveCfg(4)
	w := newWorld(t, c)
	addr := freeAddr(t)
	w.startAt(addr)

	rdb, err := waitqueue.DialURL(w.redisURL, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	st := adaptive.NewStore(rdb)
	var sample atomic.Pointer[adaptive.Sample]
	sample.Store(&adaptive.Sample{Orders: 2, LatencyMs: 2 * 200, MaxMs: 250, Holds: 4})
	feeder(t, st, w.queue, 100*time.Millisecond, &sample)

	for i := range 60 {
		w.join(fmt.Sprintf("adaptive-%d", i))
	}
	active := func() int64 {
		s, err := w.line.Stats(context.Background(), w.queue)
		if err != nil {
			t.Fatal(err)
		}
		return s.Active
	}
	// Nobody releases a slot here: active only grows, as far as the limit.
	testenv.Eventually(t, 15*time.Second, func() bool { return active() >= 12 }, "active never passed 12 (targetActive 4, max 24)")
	status, err := st.Status(context.Background(), w.queue)
	if err != nil {
		t.Fatal(err)
	}
	if !status.Found || status.Limit < 12 {
		t.Fatalf("status %+v, want a limit of 12 or more", status)
	}

	// Orders fail: the next decision cuts.
	sample.Store(&adaptive.Sample{Orders: 2, LatencyMs: 2 * 200, Failed: 1})
	testenv.Eventually(t, 10*time.Second, func() bool {
		s, err := st.Status(context.Background(), w.queue)
		return err == nil && s.Reason == adaptive.ReasonFailures && s.Limit < status.Limit
	}, "failing orders did not cut the limit below %d", status.Limit)
	if got := active(); got > 24 {
		t.Errorf("active %d, above the adaptive max 24", got)
	}

	var events []event.LimitChanged
	testenv.Eventually(t, 5*time.Second, func() bool {
		events = w.limitEvents()
		for _, e := range events {
			if e.Reason == string(adaptive.ReasonFailures) && e.Limit < e.Previous && e.Failed > 0 {
				return true
			}
		}
		return false
	}, "no usher.ops.limit_changed for the cut")
	if e := events[0]; e.Reason != string(adaptive.ReasonRaise) || e.Previous != 4 || e.Min != 2 || e.Max != 24 || e.WindowMs != 100 {
		t.Errorf("first recorded move %+v, want a raise from 4 within [2, 24] over 100 ms windows", e)
	}

	s := testenv.Scrape(t, "http://"+addr+"/metrics")
	s.Check(t, []string{"usher_adaptive_limit", "usher_adaptive_limit_reason", "usher_adaptive_decisions_total",
		"usher_adaptive_order_latency_seconds", "usher_adaptive_baseline_latency_seconds"}, "adaptive-0", "adaptive-1")
	for _, ls := range s["usher_adaptive_decisions_total"] {
		if ls["queue"] != w.queue || ls["reason"] == "" || len(ls) != 2 {
			t.Errorf("decision metric labelled %v, want the queue and a reason", ls)
		}
	}
}

// A queue that is not adaptive keeps its configured targetActive, and
// the admitter keeps no adaptive state for it.
func TestAQueueNotAdaptiveKeepsItsTargetActive(t *testing.T) {
	w := newWorld(t, cfg(3, 20, 300))
	w.start(hooks{})
	for i := range 10 {
		w.join(fmt.Sprintf("fixed-%d", i))
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		s, err := w.line.Stats(context.Background(), w.queue)
		return err == nil && s.Active == 3
	}, "active never reached targetActive 3")
	time.Sleep(300 * time.Millisecond) // a few more ticks
	s, err := w.line.Stats(context.Background(), w.queue)
	if err != nil {
		t.Fatal(err)
	}
	if s.Active != 3 {
		t.Fatalf("active %d, want targetActive 3", s.Active)
	}
	rdb, err := waitqueue.DialURL(w.redisURL, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	if st, err := adaptive.NewStore(rdb).Status(context.Background(), w.queue); err != nil || st.Found {
		t.Fatalf("Status = %+v, %v; want no adaptive state", st, err)
	}
}

// Every decision the admitter makes is on its log at debug level with
// what it was made from — the window's figures, the line, the baseline,
// the reason and the new limit — as adaptive.Trace has it, the same the
// simulation tests print: a run on the real stack can be read window by
// window.
func TestEveryAdaptiveDecisionIsLoggedWithItsTrace(t *testing.T) {
	c := adaptiveCfg(4)
	w := newWorld(t, c)
	c.Name = w.queue
	rdb, err := waitqueue.DialURL(w.redisURL, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	st := adaptive.NewStore(rdb)
	var sample atomic.Pointer[adaptive.Sample]
	sample.Store(&adaptive.Sample{Orders: 2, LatencyMs: 2 * 200, MaxMs: 250, Holds: 4, HoldMs: 4})
	feeder(t, st, w.queue, 100*time.Millisecond, &sample)
	var out testenv.Buffer
	log := slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	l := newAdaptiveLimits(st, nil, w.js, log, time.Now, prometheus.NewRegistry())

	type line struct {
		Msg, Queue string
		Window     int64
		Trace      map[string]any
	}
	var decisions []line
	testenv.Eventually(t, 10*time.Second, func() bool {
		l.target(context.Background(), c)
		decisions = nil
		for _, s := range strings.Split(out.String(), "\n") {
			var rec line
			if json.Unmarshal([]byte(s), &rec) == nil && rec.Msg == "adaptive decision" {
				decisions = append(decisions, rec)
			}
		}
		return len(decisions) >= 3
	}, "fewer than 3 adaptive decisions logged:\n%s", &out)
	for _, d := range decisions {
		tr := d.Trace
		if d.Queue != w.queue || d.Window == 0 || tr["reason"] == "" || tr["limit"] == nil || tr["baselineMs"] == nil || tr["waiting"] == nil {
			t.Errorf("decision line %+v, want the queue, the window and the trace", d)
		}
	}
	if last := decisions[len(decisions)-1].Trace; last["orders"] == float64(0) || last["meanMs"] != float64(200) {
		t.Errorf("the last decision's window: %v orders, mean %v ms; want the feeder's orders at 200 ms", last["orders"], last["meanMs"])
	}
}
