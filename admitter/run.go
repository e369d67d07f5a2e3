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

	"usher/shared/bus"
	"usher/shared/catalog"
	"usher/shared/clock"
	"usher/shared/config"
	"usher/shared/event"
	"usher/shared/opshttp"
	"usher/shared/paybreaker"
	"usher/shared/waitqueue"
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
	log, err := config.Logger(stdout, s.logLevel)
	if err != nil {
		return err
	}
	nc, js, err := bus.Open(ctx, s.natsURLs, "usher-admitter", s.replicas)
	if err != nil {
		return err
	}
	defer nc.Drain()
	queues, err := catalog.Open(ctx, js, s.replicas)
	if err != nil {
		return err
	}
	rdb, err := waitqueue.Connect(ctx, s.redisURL, s.redisPool)
	if err != nil {
		return err
	}
	defer rdb.Close()
	line := waitqueue.New(rdb)
	line.SetTombstoneTTL(s.tombstones)
	clk := clock.New(line, s.local, log)
	if err := clk.Sync(ctx); err != nil {
		return err
	}
	ids, err := bus.NewIdentities(ctx, js, log)
	if err != nil {
		return err
	}
	streams := &streamHeads{Identities: ids, js: js}
	// Before the followers, admission had one durable consumer; it holds
	// nothing anyone needs any more.
	if err := js.DeleteConsumer(ctx, event.StreamEntries, "admitter"); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		log.Warn("remove the old ingest consumer", "err", err)
	}
	m := newMetrics()
	adm := &admitter{
		log: log, queues: queues, line: line, js: js, events: js, streams: streams, breaker: paybreaker.New(rdb),
		now: clk.Now, rand: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x61646d)),
		orderHold: s.orderHold, hooks: h, metrics: m,
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", s.addr, err)
	}
	mux := opshttp.Mux(m.reg, opshttp.All(opshttp.NATS(nc), opshttp.Redis(rdb)))
	log.Info("admitter running", "addr", ln.Addr().String(), "nats", s.natsURLs, "epoch", streams.Epoch())
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return queues.Run(ctx) })
	g.Go(func() error { return clk.Run(ctx, time.Second) })
	g.Go(func() error { return streams.Run(ctx, time.Second) })
	g.Go(func() error { return adm.Run(ctx) })
	g.Go(func() error { return opshttp.Serve(ctx, ln, mux, s.shutdown) })
	return g.Wait()
}
