package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"time"

	"golang.org/x/sync/errgroup"

	"usher/shared/bus"
	"usher/shared/catalog"
	"usher/shared/clock"
	"usher/shared/config"
	"usher/shared/opshttp"
	"usher/shared/orders"
	"usher/shared/paybreaker"
	"usher/shared/ratelimit"
	"usher/shared/ticket"
	"usher/shared/token"
	"usher/shared/waitqueue"
)

// run wires the gateway and serves until ctx ends.
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
	nc, js, err := bus.Open(ctx, s.natsURLs, "usher-gateway", s.replicas)
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

	// PostgreSQL serves the admin stock endpoint only, never the hot path;
	// the pool connects on first use, so the gateway starts without it.
	db, err := orders.Open(s.databaseURL, orders.Options{MaxConns: 4})
	if err != nil {
		return err
	}
	defer db.Close()

	// Listen before serving, so a taken port fails start-up synchronously.
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", s.addr, err)
	}
	// Joins and polls are single script calls; batching coalesces the
	// concurrent ones into pipelines.
	line := waitqueue.New(rdb)
	line.SetTombstoneTTL(s.tombstones)
	line.EnableBatching()
	clk := clock.New(line, s.local, log)
	if err := clk.Sync(ctx); err != nil {
		return err
	}
	ids, err := bus.NewIdentities(ctx, js, log)
	if err != nil {
		return err
	}
	api := &api{
		log:         log,
		queues:      queues,
		line:        line,
		events:      js,
		tickets:     tickets,
		keys:        keys,
		orders:      orders.NewRecords(rdb),
		stock:       &migratedStock{store: db},
		adminToken:  []byte(s.adminToken),
		notifierURL: s.notifierURL,
		pageCSS:     s.pageCSS,
		now:         clk.Now,
		epoch:       ids.Epoch,
		orderHold:   s.orderHold,
		rand:        rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x75736865)),
		ready:       opshttp.All(opshttp.NATS(nc), opshttp.Redis(rdb)),
	}
	users, refreshUsers, err := newUserAuth(s.protect.users, clk.Now, log)
	if err != nil {
		return err
	}
	api.users, api.ips, api.http = users, s.protect.ips, s.protect.http
	api.limiter = ratelimit.New(line) // its script calls share the line's pipelines
	api.ops = opsDeps{breaker: paybreaker.New(rdb), outcomes: orders.NewRecords(rdb)}
	app := api.app()
	log.Info("gateway listening", "addr", ln.Addr().String(), "nats", s.natsURLs, "redis", redactURL(s.redisURL))

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return queues.Run(ctx) })
	g.Go(func() error { return clk.Run(ctx, time.Second) })
	g.Go(func() error { return ids.Run(ctx, time.Second) })
	g.Go(func() error { return line.RunBatches(ctx, s.redisPipelines) })
	g.Go(func() error { return opshttp.ServeProfiles(ctx, s.pprofAddr) })
	if refreshUsers != nil {
		g.Go(func() error { return refreshUsers(ctx) })
	}
	g.Go(func() error { return app.Listener(ln) })
	g.Go(func() error {
		<-ctx.Done()
		return app.ShutdownWithTimeout(s.shutdown)
	})
	return g.Wait()
}

// redactURL hides a password in a Redis URL before it is logged.
func redactURL(u string) string {
	if p, err := url.Parse(u); err == nil {
		return p.Redacted()
	}
	return "(unparsable)"
}
