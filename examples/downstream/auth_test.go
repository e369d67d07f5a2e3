package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"usher/internal/bus"
	"usher/internal/event"
	"usher/internal/testenv"
)

// On a broker with authentication, the example follows admissions as the
// downstream reader named like its durable consumer, with that reader's
// key, and the broker refuses it nothing it does.
func TestTheExampleReadsAsItsOwnDownstreamReader(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	const durable = "example-downstream"
	key := func(r bus.Role) string { return filepath.Join(dir, string(r)+".nk") }
	if _, err := bus.WriteAuth(bus.Policy{Downstream: []string{durable}}, dir, key); err != nil {
		t.Fatal(err)
	}
	conf, err := os.ReadFile("../../nats.conf")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "nats.conf"), conf, 0o600); err != nil {
		t.Fatal(err)
	}
	log := &testenv.NATSLog{}
	url := testenv.NATSFromConfig(t, filepath.Join(dir, "nats.conf"), log).ClientURL()

	// The admitter declares the streams and the reader's durable consumer,
	// and publishes an admission.
	nc, js, err := bus.Open(ctx, bus.Settings{URLs: []string{url}, Replicas: 1, Role: bus.Admitter, NKeyFile: key(bus.Admitter)}, "admitter")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := bus.EnsureDurables(ctx, js, bus.Policy{Downstream: []string{durable}}.Durables(bus.OrderWork{AckWait: time.Minute})); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Truncate(time.Millisecond)
	body, _ := event.Marshal("demo:7", event.TypeAdmitted, "alice", at, event.Admitted{
		Queue: "demo", User: "alice", Seq: 7, TokenID: "demo:7", ReadyAt: at, ExpiresAt: at.Add(time.Minute)})
	if _, err := js.Publish(ctx, event.AdmittedSubject("demo"), body, jetstream.WithMsgID("demo:7")); err != nil {
		t.Fatal(err)
	}

	var out testenv.Buffer
	done := make(chan error, 1)
	fctx, stop := context.WithCancel(ctx)
	go func() {
		done <- run(fctx, []string{"-nats", url, "-queue", "demo", "-nkey", key(bus.Downstream(durable))}, &out)
	}()
	testenv.Eventually(t, 5*time.Second, func() bool {
		return strings.Contains(out.String(), "admitted alice to demo (place 7), token demo:7")
	}, "the example did not print the admission: %q", out.String())
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if v := log.Violations(); len(v) > 0 {
		t.Errorf("the broker refused the example:\n%s", strings.Join(v, "\n"))
	}

	// Without its key it is not let in.
	if err := run(ctx, []string{"-nats", url, "-queue", "demo"}, &out); err == nil {
		t.Error("the example ran without credentials")
	}
}
