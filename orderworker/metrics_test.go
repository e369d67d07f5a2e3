package main

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"usher/internal/catalog"
	"usher/internal/orders"
	"usher/internal/testenv"
)

// A finished order shows on the worker's /metrics under the names
// docs/operations.md lists (outcomes and latency, connection hold,
// breaker, payment latency, consumer lag), with no shopper's id in any
// label, and in the queue's outcome counts in Redis that the ops
// dashboard reads.
func TestMetricsAfterAnOrder(t *testing.T) {
	w := newWorld(t, queueCfg(20), 5, 5)
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	tok := w.admit(1)[0]
	w.start(hooks{}, "USHER_ORDERWORKER_ADDR", addr)
	id := w.request(tok, "")
	w.waitFinal(20*time.Second, id)

	want := []string{
		"usher_orders_total", "usher_order_duration_seconds", "usher_db_connection_hold_seconds",
		"usher_payment_breaker_open", "usher_payment_attempts_total", "usher_payment_duration_seconds",
		"usher_orders_deferred_total", "usher_consumer_pending_messages", "usher_consumer_ack_pending_messages",
	}
	// The order is final in the store before the worker publishes its
	// outcome, counts it and acks it: wait for the counts themselves (an
	// unlabelled histogram is on the page from the start, at zero).
	metrics := "http://" + addr + "/metrics"
	testenv.Eventually(t, 10*time.Second, func() bool {
		v := testenv.ScrapeValues(t, metrics)
		return v.Value("usher_orders_total", map[string]string{"status": string(orders.Paid)}) == 1 &&
			v.Value("usher_order_duration_seconds", nil) == 1
	}, "the order never counted on /metrics")
	testenv.Scrape(t, metrics).Check(t, want, tok, id, w.order(id).User)

	var got map[orders.Status]int64
	wantCounts := map[orders.Status]int64{orders.Paid: 1}
	testenv.Eventually(t, 10*time.Second, func() bool {
		got, err = w.records.Outcomes(context.Background(), w.queue)
		return err == nil && maps.Equal(got, wantCounts)
	}, "Outcomes(%q) = %v, %v, want %v", w.queue, got, err, wantCounts)

	// Once the queue is deleted, its series leave the worker: each queue
	// ever deleted would otherwise stay in every scrape.
	queueSeries := func() int { return testenv.QueueSeries(metrics, w.queue) }
	if n := queueSeries(); n == 0 {
		t.Fatal("no series of the queue before its deletion: the test shows nothing")
	}
	if _, err := w.queues.Delete(context.Background(), w.queue, time.Now(), func(catalog.Config) error { return nil }); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return queueSeries() == 0 }, "series of the deleted queue left on /metrics")
}
