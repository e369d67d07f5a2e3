package main

import (
	"testing"
	"time"

	"usher/internal/bus"
	"usher/internal/catalog"
	"usher/internal/event"
	"usher/internal/testenv"
)

// A drop's PAID orders and its sold-out close are read from the streams
// with usherctl's key on make run's broker, which may create no consumer.
func TestADropsEventsAreReadWithUsherctlsKey(t *testing.T) {
	dir := t.TempDir()
	key := func(r bus.Role) string { return bus.DefaultKeyFile(dir, r) }
	if _, err := bus.WriteAuth(bus.Policy{}, dir, key); err != nil {
		t.Fatal(err)
	}
	log := &testenv.NATSLog{}
	url := testenv.NATSFromConfig(t, dir+"/"+bus.AuthFile, log).ClientURL()
	ctx := t.Context()
	publish := func(r bus.Role, subject string, data any) {
		t.Helper()
		nc, js, err := bus.Open(ctx, bus.Settings{URLs: []string{url}, Replicas: 1, Role: r, NKeyFile: key(r)}, "loadtest-test")
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		body, _ := event.Marshal(subject+time.Now().String(), "test", "u", time.Now(), data)
		if _, err := js.Publish(ctx, subject, body); err != nil {
			t.Fatal(err)
		}
	}
	// The admitter declares the streams and the catalog.
	nc, js, err := bus.Open(ctx, bus.Settings{URLs: []string{url}, Replicas: 1, Role: bus.Admitter, NKeyFile: key(bus.Admitter)}, "admitter")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := catalog.Open(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	publish(bus.OrderWorker, event.OrderCompletedSubject("drop"), struct{}{})
	publish(bus.OrderWorker, event.OrderCompletedSubject("drop"), struct{}{})
	publish(bus.OrderWorker, event.OrderCompletedSubject("other"), struct{}{})
	publish(bus.Admitter, event.ConfigChangedSubject, map[string]any{"queue": "drop",
		"config": map[string]string{"state": "closed", "closedReason": "sold_out"}})

	got, err := readDropEvents(ctx, url, key(bus.Usherctl), "drop", start)
	if err != nil {
		t.Fatal(err)
	}
	if got.paid != 2 || got.closed.IsZero() {
		t.Errorf("read %d PAID orders, closed at %v; want 2 and the close", got.paid, got.closed)
	}
	if v := log.Violations(); len(v) > 0 {
		t.Errorf("the broker refused the read:\n%v", v)
	}
}
