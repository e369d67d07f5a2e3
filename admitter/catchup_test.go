package main

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"usher/internal/bus"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
)

// noConsumers is the broker as a follower meets it while the cluster's
// metadata leader cannot answer (its disk stalled): no consumer is made,
// while the streams still answer.
type noConsumers struct{ jetstream.JetStream }

func (noConsumers) OrderedConsumer(context.Context, string, jetstream.OrderedConsumerConfig) (jetstream.Consumer, error) {
	return nil, context.DeadlineExceeded
}

// A follower that cannot make its consumer applies the queue's events
// with direct gets, which every replica answers, and keeps doing so as
// more come: the line does not wait for the metadata leader, and neither
// does the queue's admission.
func TestAFollowerWithoutAConsumerReadsOnWithDirectGets(t *testing.T) {
	w := newWorld(t, cfg(5, 20, 300))
	ctx := context.Background()
	alice, bob := w.join("alice"), w.join("bob")
	follow(t, entriesFollower(followingAdmitter(t, w, noConsumers{w.js}), w.queue))

	for user, seq := range map[string]uint64{"alice": alice, "bob": bob} {
		testenv.Eventually(t, 10*time.Second, func() bool { return w.status(seq) == waitqueue.Waiting }, "%s (seq %d) in line", user, seq)
	}
	carol := w.join("carol")
	testenv.Eventually(t, 10*time.Second, func() bool { return w.status(carol) == waitqueue.Waiting }, "carol, who joined later, in line")
	if e, err := w.line.Poll(ctx, w.queue, carol); err != nil || e.Position != 3 {
		t.Fatalf("Poll(carol) = %+v, %v; want third in line", e, err)
	}
}

// followingAdmitter is an admitter of w's queues, enough to run their
// followers, that makes its consumers through js (the broker as a test
// has it behave).
func followingAdmitter(t *testing.T, w *world, js jetstream.JetStream) *admitter {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	ids, err := bus.NewIdentities(context.Background(), w.js, log)
	if err != nil {
		t.Fatal(err)
	}
	return &admitter{log: log, queues: w.queues, projection: w.line.Projection, js: js, events: w.js,
		streams: &streamHeads{Identities: ids, js: w.js}, metrics: newMetrics()}
}

// follow runs f until the test ends.
func follow(t *testing.T, f *follower) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = f.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}
