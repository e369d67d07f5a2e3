// Package bus connects to NATS and declares usher's JetStream streams.
//
// Streams are created or updated idempotently at start-up by every service,
// so a fresh cluster, a restarted one and a rolling upgrade all converge on
// the same definitions. Retention and dedup windows:
//
//	USHER_ENTRIES     usher.enter.<q>, usher.leave.<q>   7 days, dedup 2 min
//	USHER_ADMISSIONS  usher.admitted.<q>                 7 days, dedup 2 min
//	USHER_ORDERS      usher.order.>                      30 days, dedup 2 min
//	USHER_OPS         usher.ops.>                        365 days
//
// Seven days covers a drop and its post-mortem: ops can replay or rebuild a
// queue from its events for a week. The dedup window only needs to outlive a
// publisher's retries (seconds); two minutes is JetStream's default.
package bus

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"usher/shared/event"
)

// Connect dials any of the comma-separated NATS URLs (a cluster's seeds) and
// keeps reconnecting forever.
func Connect(urls []string, name string) (*nats.Conn, error) {
	nc, err := nats.Connect(strings.Join(urls, ","),
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
		nats.RetryOnFailedConnect(false),
	)
	if err != nil {
		return nil, fmt.Errorf("connect nats %v: %w", urls, err)
	}
	return nc, nil
}

// Streams returns the names, subjects and retention of usher's streams.
func Streams() []jetstream.StreamConfig {
	day := 24 * time.Hour
	return []jetstream.StreamConfig{
		{Name: event.StreamEntries, Subjects: []string{"usher.enter.*", "usher.leave.*"}, MaxAge: 7 * day},
		{Name: event.StreamAdmissions, Subjects: []string{"usher.admitted.*"}, MaxAge: 7 * day},
		{Name: event.StreamOrders, Subjects: []string{"usher.order.>"}, MaxAge: 30 * day},
		{Name: event.StreamOps, Subjects: []string{"usher.ops.>"}, MaxAge: 365 * day},
	}
}

// EnsureStreams creates or updates every stream, as file-backed streams
// with the given replica count (1 on one node, 3 on a cluster).
func EnsureStreams(ctx context.Context, js jetstream.JetStream, replicas int) error {
	for _, cfg := range Streams() {
		cfg.Storage = jetstream.FileStorage
		cfg.Retention = jetstream.LimitsPolicy
		cfg.Duplicates = 2 * time.Minute
		cfg.Replicas = replicas
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("ensure stream %s: %w", cfg.Name, err)
		}
	}
	return nil
}

// Open connects to NATS, declares the streams and returns the connection
// and its JetStream context. The caller drains the connection.
func Open(ctx context.Context, urls []string, name string, replicas int) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := Connect(urls, name)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	if err := EnsureStreams(ctx, js, replicas); err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}
