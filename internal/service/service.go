// Package service is the start and the end every usher service shares: the
// settings they all read alike, the logger, the broker with its streams,
// the queue catalog, the Redis line, the one clock and the streams'
// identities — connected in that order, run in the background under the
// service's errgroup, and closed in reverse within the shutdown bound.
//
// A service's run reads its own settings beside Settings, calls Open, wires
// its own pieces on Deps, starts Deps.Go and its own loops in one errgroup,
// and defers Deps.Close: every service starts and stops the same way.
package service

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"usher/internal/bus"
	"usher/internal/catalog"
	"usher/internal/clock"
	"usher/internal/config"
	"usher/internal/opshttp"
	"usher/internal/waitqueue"
)

// Settings are what every service reads alike.
type Settings struct {
	NATS     bus.Settings
	Redis    waitqueue.Settings
	LogLevel string
	// Shutdown bounds how long stopping may take (HTTP servers, draining
	// the broker connection).
	Shutdown time.Duration
	// Local is the host's clock (shifted in fault tests); decisions follow
	// Deps.Clock, Redis's.
	Local func() time.Time
	// Profiles is where the Go runtime profiles are served
	// (USHER_PPROF_ADDR; "" off), loopback only.
	Profiles string
}

// Load reads the shared settings; redisPool is the service's default pool.
func Load(env *config.Env, redisPool int) Settings {
	s := Settings{
		NATS:     bus.LoadSettings(env),
		Redis:    waitqueue.LoadSettings(env, redisPool),
		LogLevel: env.String("USHER_LOG_LEVEL", "info"),
		Shutdown: env.Duration("USHER_SHUTDOWN_TIMEOUT", 5*time.Second),
		Local:    env.LocalClock(),
		Profiles: env.Addr("USHER_PPROF_ADDR", ""),
	}
	// The level is checked here, with every other setting, so a bad one is
	// reported beside the rest rather than alone on the next start.
	if _, err := config.Logger(io.Discard, s.LogLevel); err != nil {
		env.Check(err)
	}
	if s.Profiles != "" && !config.IsLoopback(s.Profiles) {
		env.Check(fmt.Errorf("USHER_PPROF_ADDR=%s serves Go profiles (memory, goroutines) to whoever connects: set it to a loopback address such as 127.0.0.1:6060, or unset it", s.Profiles))
	}
	return s
}

// Deps are what every service is connected to.
type Deps struct {
	Log    *slog.Logger
	NC     *nats.Conn
	JS     jetstream.JetStream
	Queues *catalog.Catalog
	Redis  redis.UniversalClient
	// Line is the Redis line's client: the service takes the roles of
	// the line it needs on it (line.New, admission.New, …).
	Line    *waitqueue.Client
	Clock   *clock.Synced
	Streams *bus.Identities

	shutdown  time.Duration
	stopWatch context.CancelFunc
}

// Open connects the service called name (it names its broker connection
// and its role, see bus.Role) to NATS (declaring the streams, or waiting for
// the admitter to), the catalog and Redis, syncs the clock
// to Redis's and reads the streams' identities. On error, what was opened
// is closed.
//
// What go-redis logs itself goes to the service's logger, at debug level
// (see waitqueue.LogRedisTo).
func Open(ctx context.Context, s Settings, name string, stdout io.Writer) (d *Deps, err error) {
	d = &Deps{shutdown: s.Shutdown}
	defer func() {
		if err != nil {
			d.Close()
			d = nil
		}
	}()
	if d.Log, err = config.Logger(stdout, s.LogLevel); err != nil {
		return d, err
	}
	// Every line says whose it is: the services' logs are read together.
	d.Log = d.Log.With("service", name)
	// go-redis's own lines (dial failures, pool trouble) join the service's
	// JSON log instead of stderr; the first Open of a process sets it.
	waitqueue.LogRedisTo(d.Log)
	// The service's role on the broker is its name: its key, its inbox, and
	// whether it declares the streams and the catalog or waits for them.
	broker := s.NATS.As(bus.Role(name), d.Log)
	if d.NC, d.JS, err = bus.Open(ctx, broker, "usher-"+name); err != nil {
		return d, err
	}
	// The catalog's watch lives until Close, not until ctx ends: the
	// service's loops may still read the catalog while they wind down.
	watchCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	d.stopWatch = stop
	err = bus.Retry(ctx, d.Log, "open the queue catalog", func(ctx context.Context) error {
		var err error
		if broker.Declares(d.NC) {
			d.Queues, err = catalog.Open(watchCtx, d.JS, s.NATS.Replicas)
		} else {
			d.Queues, err = catalog.Attach(watchCtx, d.JS)
		}
		return err
	})
	if err != nil {
		return d, err
	}
	if d.Redis, err = waitqueue.Connect(ctx, s.Redis.As(name)); err != nil {
		return d, err
	}
	d.Line = waitqueue.NewClient(d.Redis)
	d.Line.SetTombstoneTTL(s.Redis.Tombstones)
	d.Clock = clock.New(d.Line, s.Local, d.Log)
	if err = d.Clock.Sync(ctx); err != nil {
		return d, fmt.Errorf("sync the clock to redis: %w", err)
	}
	err = bus.Retry(ctx, d.Log, "read the streams' identities", func(ctx context.Context) error {
		var err error
		d.Streams, err = bus.NewIdentities(ctx, d.JS, d.Log)
		return err
	})
	if err != nil {
		return d, err
	}
	return d, nil
}

// Go runs what keeps Deps current — the catalog's watch, the clock's
// sync, the streams' identities — in g until ctx ends.
func (d *Deps) Go(ctx context.Context, g *errgroup.Group) {
	g.Go(func() error { return d.Queues.Run(ctx) })
	g.Go(func() error { return d.Clock.Run(ctx, time.Second) })
	g.Go(func() error { return d.Streams.Run(ctx, time.Second) })
}

// Ready is the readiness check every service answers on /readyz: NATS and
// Redis reachable, plus the service's own checks.
func (d *Deps) Ready(more ...opshttp.Check) func(context.Context) error {
	return opshttp.All(append([]opshttp.Check{opshttp.NATS(d.NC), opshttp.Redis(d.Redis)}, more...)...)
}

// Close stops the catalog's watch, drains the broker connection (waiting
// at most the shutdown bound for it to close) and closes Redis. It is safe
// on a partly opened Deps.
func (d *Deps) Close() {
	if d.stopWatch != nil {
		d.stopWatch()
	}
	if d.NC != nil {
		drain(d.NC, d.shutdown)
	}
	if d.Redis != nil {
		d.Redis.Close()
	}
}

// drain drains the NATS connection and waits (within timeout) until it has
// closed, so no subscription goroutine outlives the service.
func drain(nc *nats.Conn, timeout time.Duration) {
	closed := make(chan struct{})
	nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
	if err := nc.Drain(); err != nil {
		nc.Close()
		return
	}
	select {
	case <-closed:
	case <-time.After(timeout):
		nc.Close()
	}
}
