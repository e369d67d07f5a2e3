package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"time"

	"golang.org/x/sync/errgroup"

	"usher/shared/bus"
	"usher/shared/catalog"
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
	m := newMetrics()
	in, err := newIngester(ctx, log, js, line, s.batch)
	if err != nil {
		return err
	}
	in.observed = func(n int) { m.ingested.Add(float64(n)) }
	m.reg.MustRegister(bus.NewLagCollector(event.StreamEntries, ingestConsumer, in.cons, time.Second))
	adm := &admitter{
		log: log, queues: queues, line: line, events: js, watermark: in, breaker: paybreaker.New(rdb),
		now: time.Now, rand: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x61646d)),
		hooks: h, metrics: m,
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", s.addr, err)
	}
	mux := opshttp.Mux(m.reg, opshttp.All(opshttp.NATS(nc), opshttp.Redis(rdb)))
	log.Info("admitter running", "addr", ln.Addr().String(), "nats", s.natsURLs)

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return queues.Run(ctx) })
	g.Go(func() error { return in.Run(ctx) })
	g.Go(func() error { return adm.Run(ctx) })
	g.Go(func() error { return opshttp.Serve(ctx, ln, mux, s.shutdown) })
	return g.Wait()
}
