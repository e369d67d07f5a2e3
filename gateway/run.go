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

	"usher/internal/adaptive"
	"usher/internal/config"
	"usher/internal/opshttp"
	"usher/internal/orders"
	"usher/internal/paybreaker"
	"usher/internal/pow"
	"usher/internal/ratelimit"
	"usher/internal/service"
	"usher/internal/waitqueue/roles"
)

// run wires the gateway and serves until ctx ends.
func run(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	s, err := loadSettings(config.New(getenv))
	if err != nil {
		return err
	}
	keys, tickets, err := s.keyFiles.Open()
	if err != nil {
		return err
	}
	challenges, err := pow.LoadOrCreateIssuer(s.powSecret, 0)
	if err != nil {
		return fmt.Errorf("USHER_CHALLENGE_SECRET_FILE=%s: %w", s.powSecret, err)
	}
	d, err := service.Open(ctx, s.Settings, "gateway", stdout)
	if err != nil {
		return err
	}
	defer d.Close()
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
	adminLn, err := listenAdmin(s.adminAddr) // nil: the admin API is served on ln
	if err != nil {
		ln.Close()
		return err
	}
	// Joins and polls are single script calls; batching coalesces the
	// concurrent ones into pipelines.
	d.Line.EnableBatching()
	line := roles.On(d.Line) // every role of the line, until each room takes the ones it uses
	api := &api{
		log:         d.Log,
		queues:      d.Queues,
		line:        line,
		events:      d.JS,
		tickets:     tickets,
		keys:        keys,
		orders:      orders.NewRecords(d.Redis),
		stock:       &migratedStock{store: db},
		sales:       db,
		adminToken:  []byte(s.adminToken),
		notifierURL: s.notifierURL,
		pageCSS:     s.pageCSS,
		pageLangs:   s.pageLangs,
		now:         d.Clock.Now,
		earliest:    d.Clock.Earliest,
		epoch:       d.Streams.Epoch,
		orderHold:   s.orderHold,
		rand:        rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x75736865)),
		ready:       d.Ready(),
	}
	users, refreshUsers, err := newUserAuth(s.protect.users, d.Clock.Now, d.Log)
	if err != nil {
		return err
	}
	api.users, api.ips, api.http = users, s.protect.ips, s.protect.http
	api.limiter = ratelimit.New(d.Line) // its script calls share the line's pipelines
	api.ops = opsDeps{breaker: paybreaker.New(d.Redis), outcomes: orders.NewRecords(d.Redis), limits: adaptive.NewStore(d.Redis)}
	api.door = newDoor(challenges, line)
	api.adminApart = adminLn != nil
	app := api.app()
	d.Log.Info("gateway listening", "addr", ln.Addr().String(), "nats", s.NATS.URLs, "redis", redactURL(s.Redis.URL))
	if adminLn != nil {
		d.Log.Info("gateway admin API listening", "addr", adminLn.Addr().String())
	}

	g, ctx := errgroup.WithContext(ctx)
	d.Go(ctx, g)
	g.Go(func() error { return d.Line.RunBatches(ctx, s.redisPipelines) })
	g.Go(func() error { return opshttp.ServeProfiles(ctx, s.Profiles) })
	if refreshUsers != nil {
		g.Go(func() error { return refreshUsers(ctx) })
	}
	serveApp(ctx, g, app, ln, s.Shutdown)
	if adminLn != nil {
		serveApp(ctx, g, api.admin, adminLn, s.Shutdown)
	}
	return g.Wait()
}

// redactURL hides a password in a Redis URL before it is logged.
func redactURL(u string) string {
	if p, err := url.Parse(u); err == nil {
		return p.Redacted()
	}
	return "(unparsable)"
}
