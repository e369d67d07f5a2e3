// Package bus connects to NATS and declares usher's JetStream streams.
//
// Streams are created or updated idempotently at start-up by every service,
// so a fresh cluster, a restarted one and a rolling upgrade all converge on
// the same definitions. Retention and dedup windows:
//
//	USHER_ENTRIES     usher.enter.<q>, usher.leave.<q>   7 days, dedup 2 min
//	USHER_ADMISSIONS  usher.admitted.<q>                 7 days, dedup 2 min
//	USHER_ORDERS      usher.order.<kind>.<q>             30 days, dedup 2 min
//	USHER_OPS         usher.ops.>                        365 days
//
// Seven days covers a drop and its post-mortem: ops can replay or rebuild a
// queue from its events for a week. The dedup window only needs to outlive a
// publisher's retries (seconds); two minutes is JetStream's default.
package bus

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"usher/shared/config"
	"usher/shared/event"
)

// Settings say how a process reaches NATS.
type Settings struct {
	URLs []string // a server's or a cluster's seeds
	// Replicas is the replica count of the streams and the KV bucket (1 on
	// one server, 3 on a cluster).
	Replicas int
}

// LoadSettings reads USHER_NATS_URL and USHER_STREAM_REPLICAS.
func LoadSettings(env *config.Env) Settings {
	return Settings{
		URLs:     env.List("USHER_NATS_URL", "nats://127.0.0.1:4222"),
		Replicas: env.Int("USHER_STREAM_REPLICAS", 1, 1),
	}
}

// Connect dials any of the NATS URLs (a cluster's seeds) as name and keeps
// reconnecting forever.
func Connect(s Settings, name string) (*nats.Conn, error) {
	nc, err := nats.Connect(strings.Join(s.URLs, ","),
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
		nats.RetryOnFailedConnect(false),
	)
	if err != nil {
		return nil, fmt.Errorf("connect nats %v: %w", s.URLs, err)
	}
	return nc, nil
}

// Streams returns the names, subjects and retention of usher's streams.
func Streams() []jetstream.StreamConfig {
	day := 24 * time.Hour
	subj := event.StreamSubjects()
	return []jetstream.StreamConfig{
		{Name: event.StreamEntries, Subjects: subj[event.StreamEntries], MaxAge: 7 * day},
		{Name: event.StreamAdmissions, Subjects: subj[event.StreamAdmissions], MaxAge: 7 * day},
		{Name: event.StreamOrders, Subjects: subj[event.StreamOrders], MaxAge: 30 * day},
		{Name: event.StreamOps, Subjects: subj[event.StreamOps], MaxAge: 365 * day},
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
func Open(ctx context.Context, s Settings, name string) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := Connect(s, name)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	if err := EnsureStreams(ctx, js, s.Replicas); err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// StreamID is the identity of one incarnation of a stream: its creation
// time in microseconds, base 36. A stream deleted and created again starts
// its sequences at 1 again; its new identity keeps the new sequences (and
// every token id and order id derived from them) apart from the old ones.
func StreamID(ctx context.Context, js jetstream.JetStream, name string) (string, error) {
	st, err := js.Stream(ctx, name)
	if err != nil {
		return "", fmt.Errorf("stream %s: %w", name, err)
	}
	return strconv.FormatInt(st.CachedInfo().Created.UnixMicro(), 36), nil
}

// Identities keeps the identities of usher's streams (see StreamID)
// current in a long-running process: an operator who deletes and recreates
// a stream gives it a new identity, which every process sees within a
// refresh. It is safe for concurrent use.
type Identities struct {
	js  jetstream.JetStream
	log *slog.Logger

	mu  sync.RWMutex
	ids map[string]string
}

// NewIdentities reads the identity of every stream.
func NewIdentities(ctx context.Context, js jetstream.JetStream, log *slog.Logger) (*Identities, error) {
	i := &Identities{js: js, log: log, ids: map[string]string{}}
	return i, i.refresh(ctx)
}

func (i *Identities) refresh(ctx context.Context) error {
	for _, cfg := range Streams() {
		id, err := StreamID(ctx, i.js, cfg.Name)
		if err != nil {
			return err
		}
		i.mu.Lock()
		if old := i.ids[cfg.Name]; old != "" && old != id {
			i.log.Warn("stream recreated: it has a new identity", "stream", cfg.Name, "was", old, "now", id)
		}
		i.ids[cfg.Name] = id
		i.mu.Unlock()
	}
	return nil
}

// Run refreshes the identities every interval until ctx ends.
func (i *Identities) Run(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := i.refresh(ctx); err != nil && ctx.Err() == nil {
			i.log.Warn("refresh stream identities", "err", err)
		}
	}
}

// Of returns the identity of stream name.
func (i *Identities) Of(name string) string {
	i.mu.RLock()
	defer i.mu.RUnlock()
	return i.ids[name]
}

// Epoch is the identity of USHER_ENTRIES: the sequence space of places in
// line, carried by every ticket and token id.
func (i *Identities) Epoch() string { return i.Of(event.StreamEntries) }
