package main

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"usher/internal/adaptive"
	"usher/internal/catalog"
	"usher/internal/keyspace"
	"usher/internal/orders"
	"usher/internal/testenv"
)

func adaptiveCfg() catalog.Config {
	c := queueCfg(20)
	c.Adaptive = &catalog.Adaptive{Enabled: true, Min: 1, Max: 40, WindowMs: 100}
	return c
}

// windows sums the queue's decision windows in Redis, and checks each
// lives no longer than keyspace says.
func (w *world) windows() map[string]int64 {
	w.t.Helper()
	ctx := context.Background()
	sum := map[string]int64{}
	iter := w.rdb.Scan(ctx, 0, keyspace.Of(w.queue).Prefix()+"ow:*", 100).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		if ttl := w.rdb.TTL(ctx, k).Val(); ttl <= 0 || ttl > keyspace.OrderWindowTTL(100*time.Millisecond) {
			w.t.Errorf("%s lives %v, want (0, %v]", k, ttl, keyspace.OrderWindowTTL(100*time.Millisecond))
		}
		for f, v := range w.rdb.HGetAll(ctx, k).Val() {
			n, _ := strconv.ParseInt(v, 10, 64)
			if f == "maxMs" || f == "holdMaxUs" {
				sum[f] = max(sum[f], n)
			} else {
				sum[f] += n
			}
		}
	}
	if err := iter.Err(); err != nil {
		w.t.Fatal(err)
	}
	return sum
}

// Every finished order of an adaptive queue adds its latency and its
// database holds to the queue's decision windows; a queue that is not
// adaptive gets none.
func TestOrdersFeedTheAdaptiveWindows(t *testing.T) {
	w := newWorld(t, adaptiveCfg(), 10, 20)
	plain := *w // another queue on the same servers, one worker for both
	plain.queue = w.queue + "-plain"
	cfg := queueCfg(20)
	cfg.Name, cfg.SKU = plain.queue, plain.sku()
	if _, err := w.queues.Put(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := w.db.SetStock(context.Background(), plain.sku(), 10); err != nil {
		t.Fatal(err)
	}
	toks, plainToks := w.admit(5), plain.admit(2)
	w.start(hooks{})
	var ids, plainIDs []string
	for _, tok := range toks {
		ids = append(ids, w.request(tok, ""))
	}
	for _, tok := range plainToks {
		plainIDs = append(plainIDs, plain.request(tok, ""))
	}
	w.waitFinal(20*time.Second, ids...)
	plain.waitFinal(20*time.Second, plainIDs...)
	var got map[string]int64
	testenv.Eventually(t, 5*time.Second, func() bool {
		got = w.windows()
		return got["n"] == 5
	}, "5 orders in the windows")
	// Each order holds a connection at least twice (placed, paid).
	if got["latMs"] < 5*20 || got["maxMs"] < 20 || got["holds"] < 10 || got["failed"] != 0 || got["timeouts"] != 0 || got["deferred"] != 0 {
		t.Errorf("windows %v, want 5 orders of ≥ 20 ms, ≥ 10 DB holds, no failure, timeout or wait", got)
	}
	if len(plain.windows()) != 0 {
		t.Errorf("a queue that is not adaptive has windows: %v", plain.windows())
	}
}

// A payment gateway that does not answer shows in the window: every
// unanswered charge call, and the order put back to wait.
func TestUnansweredPaymentsShowInTheWindow(t *testing.T) {
	w := newWorld(t, adaptiveCfg(), 10, 5)
	w.setMode("slow", 2000) // beyond the worker's 500 ms payment timeout
	tok := w.admit(1)[0]
	w.start(hooks{})
	id := w.request(tok, "")
	var got map[string]int64
	testenv.Eventually(t, 20*time.Second, func() bool {
		got = w.windows()
		return got["deferred"] >= 1
	}, "the waiting order in the windows")
	if got["timeouts"] < 1 || got["n"] != 0 {
		t.Errorf("windows %v, want unanswered payment calls and no finished order", got)
	}
	w.setMode("normal", 0)
	w.waitFinal(30*time.Second, id)
	testenv.Eventually(t, 5*time.Second, func() bool { return w.windows()["n"] == 1 }, "the order finished in the windows")
}

// What one attempt adds: a finished order its latency (a FAILED one as a
// failure, unless the shopper's card was declined), an order put back to
// wait a wait; the payment calls and holds in any case.
func TestAttemptSample(t *testing.T) {
	requested := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	now := requested.Add(250 * time.Millisecond)
	attemptWith := func(final *orders.Order) *attempt {
		ctx, a := withAttempt(context.Background())
		notePaymentCall(ctx, "ok")
		notePaymentCall(ctx, "unavailable")
		noteHold(ctx, 2*time.Millisecond)
		noteHold(ctx, 25*time.Millisecond)
		if final != nil {
			noteFinal(ctx, *final)
		}
		return a
	}
	base := adaptive.Sample{Timeouts: 1, Holds: 2, SlowHolds: 1, HoldMs: 27, HoldMaxMs: 25}
	tests := []struct {
		name  string
		final *orders.Order
		err   error
		want  adaptive.Sample
	}{
		{"paid", &orders.Order{Status: orders.Paid}, nil, adaptive.Sample{Orders: 1, LatencyMs: 250, MaxMs: 250}},
		{"failed by the order path", &orders.Order{Status: orders.Failed, Reason: orders.ReasonDeadline}, nil,
			adaptive.Sample{Orders: 1, LatencyMs: 250, MaxMs: 250, Failed: 1}},
		{"declined", &orders.Order{Status: orders.Failed, Reason: orders.ReasonDeclined}, nil, adaptive.Sample{Orders: 1, LatencyMs: 250, MaxMs: 250}},
		{"put back to wait", nil, retryLater{after: time.Second}, adaptive.Sample{Deferred: 1}},
		// An order whose admission reaches the line a moment after it (the
		// follower's lag) waits for nothing the order path lacks.
		{"waiting a moment for its admission", nil, retryLater{after: time.Second, moment: true}, adaptive.Sample{}},
		{"a step failed", nil, errors.New("redis down"), adaptive.Sample{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := tt.want
			want.Add(base)
			if got := attemptWith(tt.final).sample(requested, now, tt.err); got != want {
				t.Errorf("sample = %+v, want %+v", got, want)
			}
		})
	}
}
