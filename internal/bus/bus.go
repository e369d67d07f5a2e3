// Package bus connects to NATS and declares usher's JetStream streams, and
// says what each process may do on the broker.
//
// Every process connects as a Role: with its own NKey (the seed in
// USHER_NATS_NKEY_FILE, by default <USHER_DATA_DIR>/nats/<role>.nk), its own
// reply subjects (Role.Inbox) and, on a broker configured from Policy, only
// the permissions Policy.Permissions derives for it from the subjects and
// streams in package event. USHER_NATS_TLS_CA, USHER_NATS_TLS_CERT and
// USHER_NATS_TLS_KEY turn on TLS (and client certificates).
//
// Streams (and the catalog's bucket) are created or updated idempotently at
// start-up by the one role that owns them, the admitter, so a fresh cluster,
// a restarted one and a rolling upgrade all converge on the same
// definitions; every other role waits until they exist and never changes
// them. On a broker that authenticates nobody (unit tests, the fault
// harness) every process declares them, as any of them may. Retention and
// dedup windows:
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
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"usher/internal/config"
	"usher/internal/event"
)

// Settings say how a process reaches NATS and who it is there.
type Settings struct {
	URLs []string // a server's or a cluster's seeds
	// Replicas is the replica count of the streams and the KV bucket (1 on
	// one server, 3 on a cluster).
	Replicas int
	// Role is who the process is on the broker (set with As): it names the
	// reply subjects (Role.Inbox) and the default NKey file. Empty: the
	// default inbox and no default key (tests' own connections).
	Role Role
	// NKeyFile holds the seed of the process's NKey (USHER_NATS_NKEY_FILE).
	// Empty: the role's file in the data folder, <dataDir>/nats/<role>.nk,
	// when it exists — and only when the server asks for NKeys — else none.
	NKeyFile string
	// TLS is the client side of TLS; zero: plain TCP (unless the URL says
	// tls://).
	TLS TLS
	// Log is where Open says that it waits for the streams (nil: nowhere).
	Log *slog.Logger

	dataDir string
}

// TLS is the client side of TLS to NATS: a CA to verify the server with
// (empty: the system's roots) and, for a server that verifies clients, a
// certificate and its key.
type TLS struct {
	CA, Cert, Key string
}

// LoadSettings reads USHER_NATS_URL, USHER_STREAM_REPLICAS,
// USHER_NATS_NKEY_FILE, USHER_DATA_DIR (for the default key) and
// USHER_NATS_TLS_CA, USHER_NATS_TLS_CERT, USHER_NATS_TLS_KEY.
func LoadSettings(env *config.Env) Settings {
	s := Settings{
		URLs:     env.List("USHER_NATS_URL", "nats://127.0.0.1:4222"),
		Replicas: env.Int("USHER_STREAM_REPLICAS", 1, 1),
		NKeyFile: env.String("USHER_NATS_NKEY_FILE", ""),
		TLS: TLS{
			CA:   env.String("USHER_NATS_TLS_CA", ""),
			Cert: env.String("USHER_NATS_TLS_CERT", ""),
			Key:  env.String("USHER_NATS_TLS_KEY", ""),
		},
		dataDir: env.String("USHER_DATA_DIR", ".usher"),
	}
	if (s.TLS.Cert == "") != (s.TLS.Key == "") {
		env.Check(errors.New("USHER_NATS_TLS_CERT and USHER_NATS_TLS_KEY: set both (a client certificate and its key) or neither"))
	}
	if s.Replicas > MaxReplicas {
		// JetStream refuses the streams, and the declaration would be
		// retried until the start is given up on: say so now.
		env.Check(fmt.Errorf("USHER_STREAM_REPLICAS=%d: JetStream keeps at most %d replicas of a stream (1 on one server, 3 on a cluster)", s.Replicas, MaxReplicas))
		s.Replicas = 1
	}
	return s
}

// MaxReplicas is the most replicas JetStream keeps of a stream.
const MaxReplicas = 5

// As returns s for a process of role r, logging to log.
func (s Settings) As(r Role, log *slog.Logger) Settings {
	s.Role, s.Log = r, log
	return s
}

// keyFile returns the NKey seed file to connect with and whether it was
// configured explicitly ("" when none).
func (s Settings) keyFile() (path string, explicit bool) {
	if s.NKeyFile != "" {
		return s.NKeyFile, true
	}
	if s.Role == "" {
		return "", false
	}
	p := DefaultKeyFile(s.dataDir, s.Role)
	if _, err := os.Stat(p); err != nil {
		return "", false
	}
	return p, false
}

// DefaultKeyFile is where a role's NKey seed lives in a data folder:
// <dataDir>/nats/<role>.nk, as make run generates it.
func DefaultKeyFile(dataDir string, r Role) string {
	return filepath.Join(dataDir, "nats", string(r)+".nk")
}

// Connect dials any of the NATS URLs (a cluster's seeds) as name and keeps
// reconnecting forever. It authenticates with the role's NKey when it has
// one; the key found by default in the data folder is left out when the
// server authenticates nobody (it asks for no NKey), an explicit one never
// is.
func Connect(s Settings, name string) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.RetryOnFailedConnect(false),
	}
	if s.Role != "" {
		opts = append(opts, nats.CustomInboxPrefix(s.Role.Inbox()))
	}
	if s.TLS.CA != "" {
		opts = append(opts, nats.RootCAs(s.TLS.CA))
	}
	if s.TLS.Cert != "" {
		opts = append(opts, nats.ClientCert(s.TLS.Cert, s.TLS.Key))
	}
	url := strings.Join(s.URLs, ",")
	key, explicit := s.keyFile()
	if key == "" {
		return dial(url, s.URLs, opts)
	}
	withKey, err := nats.NkeyOptionFromSeed(key)
	if err != nil {
		return nil, Permanent(fmt.Errorf("nats credentials %s: %w", key, err))
	}
	nc, err := dial(url, s.URLs, append(opts, withKey))
	if errors.Is(err, nats.ErrNkeysNotSupported) && !explicit {
		return dial(url, s.URLs, opts)
	}
	return nc, err
}

func dial(url string, urls []string, opts []nats.Option) (*nats.Conn, error) {
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect nats %v: %w", urls, err)
	}
	return nc, nil
}

// authenticated reports whether nc proved an identity to the server.
func authenticated(nc *nats.Conn) bool { return nc.Opts.Nkey != "" }

// Streams returns the names, subjects and retention of usher's streams,
// and what each republishes live once stored (event.Live): leaves,
// admissions and order events, which the notifier follows.
func Streams() []jetstream.StreamConfig {
	day := 24 * time.Hour
	subj := event.StreamSubjects()
	return []jetstream.StreamConfig{
		{Name: event.StreamEntries, Subjects: subj[event.StreamEntries], MaxAge: 7 * day,
			RePublish: live(event.LeaveSubject(event.All))},
		{Name: event.StreamAdmissions, Subjects: subj[event.StreamAdmissions], MaxAge: 7 * day,
			RePublish: live(event.AdmittedSubject(event.All))},
		{Name: event.StreamOrders, Subjects: subj[event.StreamOrders], MaxAge: 30 * day,
			RePublish: live(event.OrderSubjects(event.All))},
		{Name: event.StreamOps, Subjects: subj[event.StreamOps], MaxAge: 365 * day},
	}
}

// live republishes what a stream stores on source to its live subjects,
// each wildcard token kept.
func live(source string) *jetstream.RePublish {
	tokens := strings.Split(source, ".")
	n := 0
	for i, tok := range tokens {
		if tok == "*" {
			n++
			tokens[i] = "{{wildcard(" + strconv.Itoa(n) + ")}}"
		}
	}
	return &jetstream.RePublish{Source: source, Destination: event.Live(strings.Join(tokens, "."))}
}

// EnsureStreams creates or updates every stream, as file-backed streams
// with the given replica count (1 on one node, 3 on a cluster).
func EnsureStreams(ctx context.Context, js jetstream.JetStream, replicas int) error {
	for _, cfg := range Streams() {
		cfg.Storage = jetstream.FileStorage
		cfg.Retention = jetstream.LimitsPolicy
		cfg.Duplicates = 2 * time.Minute
		cfg.Replicas = replicas
		// Read with direct gets: roles that may create no consumer
		// (usherctl) read them so.
		cfg.AllowDirect = true
		if err := declareStream(ctx, js, cfg); err != nil {
			return fmt.Errorf("ensure stream %s: %w", cfg.Name, err)
		}
	}
	return nil
}

// declareStream creates the stream, or updates it only when it exists with
// another configuration. Every service declares the streams at start when
// the broker authenticates nobody; creating a stream that already has this
// configuration changes nothing on the server, while an update rewrites its
// store's configuration even when nothing differs — racing inside
// nats-server with consumers being created on it.
func declareStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) error {
	_, err := js.CreateStream(ctx, cfg)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		_, err = js.UpdateStream(ctx, cfg)
	}
	return err
}

// Open connects to NATS as s.Role and returns the connection and its
// JetStream context once the streams exist. Every publish through that
// context on a subject one of usher's streams stores names that stream,
// and no other stores it (see stamped). It declares them (EnsureStreams)
// when the role owns them (Role.Declares) or the broker authenticated
// nobody; otherwise it waits until they exist (WaitStreams), the catalog's
// bucket included, changing nothing. The caller drains the connection.
//
// A broker that is not there yet, or a fresh cluster still electing its
// leaders, is waited for (see Retry) until ctx ends: services started
// together with their broker, or before it, come up once it does.
func Open(ctx context.Context, s Settings, name string) (*nats.Conn, jetstream.JetStream, error) {
	var nc *nats.Conn
	err := Retry(ctx, s.Log, "connect to NATS", func(context.Context) error {
		var err error
		nc, err = Connect(s, name)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	watch := newStrandWatch(nc, s.Log)
	js, err := jetstream.New(nc, append(watched(watch), jetstream.WithPublishAsyncMaxPending(4096))...)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	if s.Declares(nc) {
		err = Retry(ctx, s.Log, "declare the streams", func(ctx context.Context) error {
			actx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			return EnsureStreams(actx, js, s.Replicas)
		})
	} else {
		err = WaitStreams(ctx, js, s.Log)
	}
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, newStamped(js, watch), nil
}

// Declares reports whether the process connected as nc declares the
// streams and the catalog's bucket: its role owns them, it has no role, or
// the broker authenticated nobody (so nobody is refused anything).
func (s Settings) Declares(nc *nats.Conn) bool {
	return s.Role == "" || s.Role.Declares() || !authenticated(nc)
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
