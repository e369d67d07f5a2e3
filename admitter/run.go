package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"usher/internal/adaptive"
	"usher/internal/bus"
	"usher/internal/config"
	"usher/internal/event"
	"usher/internal/opshttp"
	"usher/internal/orders"
	"usher/internal/paybreaker"
	"usher/internal/service"
	"usher/internal/waitqueue/admission"
	"usher/internal/waitqueue/claims"
	"usher/internal/waitqueue/drop"
	"usher/internal/waitqueue/projection"
)

// run wires the admitter and works until ctx ends.
func run(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	return runWith(ctx, getenv, stdout, hooks{})
}

func runWith(ctx context.Context, getenv func(string) string, stdout io.Writer, h hooks) error {
	s, err := loadSettings(config.New(getenv))
	if err != nil {
		return err
	}
	d, err := service.Open(ctx, s.Settings, "admitter", stdout)
	if err != nil {
		return err
	}
	defer d.Close()
	// The durable consumers the order workers and the downstream readers
	// bind to: no other role may create a consumer (see bus.Durable).
	err = bus.Retry(ctx, d.Log, "declare the durable consumers", func(ctx context.Context) error {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return bus.EnsureDurables(dctx, d.JS, s.durables)
	})
	if err != nil {
		return err
	}
	// The durable consumer admitter on USHER_ENTRIES, which admitters of
	// earlier releases read, is read by nothing now: it is removed.
	if err := d.JS.DeleteConsumer(ctx, event.StreamEntries, "admitter"); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		d.Log.Warn("remove the old ingest consumer", "err", err)
	}
	// The stock of the queues' SKUs, read every second; the pool connects
	// on first use, so the admitter starts (and admits, for queues that
	// sell nothing) without the database.
	db, err := orders.Open(s.databaseURL, orders.Options{MaxConns: 2})
	if err != nil {
		return err
	}
	defer db.Close()
	m := newMetrics()
	m.reg.MustRegister(opshttp.RedisPools(d.Redis))
	adm := &admitter{
		log: d.Log, queues: d.Queues, admission: admission.New(d.Line), projection: projection.New(d.Line),
		drop: drop.New(d.Line), claims: claims.New(d.Line), js: d.JS, events: d.JS,
		streams: &streamHeads{Identities: d.Streams, js: d.JS}, breaker: paybreaker.New(d.Redis), stock: db,
		now: d.Clock.Now, rand: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x61646d)),
		orderHold: s.orderHold, hooks: h, metrics: m,
	}
	// Adaptive queues' targetActive: the controller's limit, kept in Redis.
	adm.adaptive = newAdaptiveLimits(adaptive.NewStore(d.Redis), adm.breaker, d.JS, d.Log, d.Clock.Now, m.reg)
	adm.waits = newWaits(d.Log, d.JS, adm.epoch, m)
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", s.addr, err)
	}
	d.Log.Info("admitter running", "addr", ln.Addr().String(), "nats", s.NATS.URLs, "epoch", d.Streams.Epoch())
	g, ctx := errgroup.WithContext(ctx)
	d.Go(ctx, g)
	g.Go(func() error { return adm.Run(ctx) })
	g.Go(func() error { return adm.waits.Run(ctx) })
	g.Go(func() error { return opshttp.Serve(ctx, ln, opshttp.Mux(m.reg, d.Ready()), s.Shutdown) })
	g.Go(func() error { return opshttp.ServeProfiles(ctx, s.Profiles) })
	return g.Wait()
}
