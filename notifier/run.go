package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/sync/errgroup"

	"usher/shared/bus"
	"usher/shared/catalog"
	"usher/shared/clock"
	"usher/shared/config"
	"usher/shared/opshttp"
	"usher/shared/ticket"
	"usher/shared/token"
	"usher/shared/waitqueue"
)

// run wires the notifier and serves until ctx ends.
func run(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	s, err := loadSettings(config.New(getenv))
	if err != nil {
		return err
	}
	log, err := config.Logger(stdout, s.logLevel)
	if err != nil {
		return err
	}
	keys, err := token.LoadKeyring(s.signingKeyFile, s.verifyKeyFiles)
	if err != nil {
		return err
	}
	tickets, err := ticket.LoadOrCreateSigner(s.ticketSecret)
	if err != nil {
		return err
	}
	nc, js, err := bus.Open(ctx, s.natsURLs, "usher-notifier", s.replicas)
	if err != nil {
		return err
	}
	defer drain(nc, s.shutdown)
	// The watch lives until run returns, not until ctx ends: ending both at
	// once races catalog.Run into reporting a closed watch as an error.
	watchCtx, endWatch := context.WithCancel(context.WithoutCancel(ctx))
	defer endWatch()
	queues, err := catalog.Open(watchCtx, js, s.replicas)
	if err != nil {
		return err
	}
	rdb, err := waitqueue.Connect(ctx, s.redisURL, s.redisPool)
	if err != nil {
		return err
	}
	defer rdb.Close()
	wq := waitqueue.New(rdb)
	clk := clock.New(wq, s.local, log)
	if err := clk.Sync(ctx); err != nil {
		return err
	}
	ids, err := bus.NewIdentities(ctx, js, log)
	if err != nil {
		return err
	}
	m := newMetrics()
	h := newHub(log, wq, queues, clk.Now, s.timing, m)

	sub, err := nc.Subscribe(admissionsSubject, admissionHandler(log, h))
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", admissionsSubject, err)
	}
	// A burst of admissions must not make NATS drop this subscriber.
	if err := sub.SetPendingLimits(1<<20, 256<<20); err != nil {
		return err
	}
	defer sub.Unsubscribe()
	orders, err := nc.Subscribe(ordersSubject, orderHandler(log, h))
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", ordersSubject, err)
	}
	if err := orders.SetPendingLimits(1<<20, 256<<20); err != nil {
		return err
	}
	defer orders.Unsubscribe()

	// Listen before serving, so a taken port fails start-up synchronously.
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", s.addr, err)
	}
	mux := opshttp.Mux(m.reg, opshttp.All(opshttp.NATS(nc), opshttp.Redis(rdb)))
	st := &streams{
		log: log, hub: h, line: wq, queues: queues, tickets: tickets, epoch: ids.Epoch, keys: keys,
		origins: s.corsOrigins, now: clk.Now, timing: s.timing, metrics: m,
	}
	st.routes(mux)
	log.Info("notifier listening", "addr", ln.Addr().String(), "nats", s.natsURLs)

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return queues.Run(ctx) })
	g.Go(func() error { return clk.Run(ctx, time.Second) })
	g.Go(func() error { return ids.Run(ctx, time.Second) })
	g.Go(func() error { return h.Run(ctx) })
	g.Go(func() error { return opshttp.Serve(ctx, ln, mux, s.shutdown) })
	return g.Wait()
}

// drain drains the NATS connection and waits (within timeout) until it has
// closed, so no subscription goroutine outlives run.
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
