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

	"usher/gateway/admin"
	"usher/gateway/gate"
	"usher/gateway/httpapi"
	"usher/gateway/userauth"
	"usher/internal/adaptive"
	"usher/internal/config"
	"usher/internal/opshttp"
	"usher/internal/orders"
	"usher/internal/paybreaker"
	"usher/internal/pow"
	"usher/internal/ratelimit"
	"usher/internal/service"
	"usher/internal/ticket"
	"usher/internal/token"
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
	var gateKeys *gate.Keys
	if len(s.gate.Rules) > 0 {
		if gateKeys, err = gate.LoadOrCreateKeys(s.gateKeyFile); err != nil {
			return fmt.Errorf("USHER_GATE_KEY_FILE=%s: %w", s.gateKeyFile, err)
		}
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
	users, refreshUsers, err := userauth.New(s.protect.users, d.Clock.Now, d.Log)
	if err != nil {
		return err
	}
	// Listen before serving, so a taken port fails start-up synchronously.
	ln, adminLn, err := listen(s)
	if err != nil {
		return err
	}
	// Joins and polls are single script calls; batching coalesces the
	// concurrent ones into pipelines.
	d.Line.EnableBatching()
	g := newGateway(s, d, db, keys, tickets, challenges, users)
	g.adminApart = adminLn != nil
	g.gate, g.gateKeys = s.gate, gateKeys
	app := g.app()
	ln = httpapi.CapConns(ln, s.maxConns, g.metrics.reg)
	d.Log.Info("gateway listening", "addr", ln.Addr().String(), "nats", s.NATS.URLs, "redis", redactURL(s.Redis.URL))
	if adminLn != nil {
		d.Log.Info("gateway admin API listening", "addr", adminLn.Addr().String())
	}

	eg, ctx := errgroup.WithContext(ctx)
	d.Go(ctx, eg)
	eg.Go(func() error { return d.Line.RunBatches(ctx, s.redisPipelines) })
	eg.Go(func() error { return opshttp.ServeProfiles(ctx, s.Profiles) })
	eg.Go(func() error { return g.gateRoom.RunSweeper(ctx, g.gateRoom.SweepEvery()) })
	if refreshUsers != nil {
		eg.Go(func() error { return refreshUsers(ctx) })
	}
	httpapi.Serve(ctx, eg, app, ln, s.Shutdown)
	if adminLn != nil {
		httpapi.Serve(ctx, eg, g.admin, adminLn, s.Shutdown)
	}
	return eg.Wait()
}

// newGateway is what the rooms are built from in a running gateway: its
// settings s, connections d and db, keys and user authentication.
func newGateway(s settings, d *service.Deps, db *orders.Store, keys *token.Keyring, tickets *ticket.Signer,
	challenges *pow.Issuer, users userauth.Auth) *gateway {
	m := newMetrics()
	m.reg.MustRegister(opshttp.RedisPools(d.Redis))
	return &gateway{
		metrics:       m,
		log:           d.Log,
		queues:        d.Queues,
		line:          d.Line,
		events:        d.JS,
		tickets:       tickets,
		keys:          keys,
		orders:        orders.NewRecords(d.Redis),
		stock:         admin.NewMigratedStock(db),
		sales:         db,
		adminToken:    []byte(s.adminToken),
		users:         users,
		limiter:       ratelimit.New(d.Line), // its script calls share the line's pipelines
		ips:           s.protect.ips,
		http:          s.protect.http,
		notifierURL:   s.notifierURL,
		epoch:         d.Streams.Epoch,
		orderHold:     s.orderHold,
		joins:         s.joins,
		joinsInFlight: s.joinsInFlight,
		joinLatency:   s.joinLatency,
		readyWait:     s.readyWait,
		gateRecheck:   s.gateRecheck,
		pageCSS:       s.pageCSS,
		pageLangs:     s.pageLangs,
		now:           d.Clock.Now,
		earliest:      d.Clock.Earliest,
		ready:         d.Ready(),
		jitter:        lockedJitter(rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x75736865))),
		ops:           opsDeps{breaker: paybreaker.New(d.Redis), outcomes: orders.NewRecords(d.Redis), limits: adaptive.NewStore(d.Redis)},
		challenges:    challenges,
	}
}

// listen opens the public listener and, with USHER_ADMIN_ADDR, the admin
// API's own (nil: the admin API is served on the public one).
func listen(s settings) (public, adminLn net.Listener, err error) {
	public, err = net.Listen("tcp", s.addr)
	if err != nil {
		return nil, nil, fmt.Errorf("listen %s: %w", s.addr, err)
	}
	if s.adminAddr == "" {
		return public, nil, nil
	}
	adminLn, err = net.Listen("tcp", s.adminAddr)
	if err != nil {
		public.Close()
		return nil, nil, fmt.Errorf("listen %s (USHER_ADMIN_ADDR): %w", s.adminAddr, err)
	}
	return public, adminLn, nil
}

// redactURL hides a password in a Redis URL before it is logged.
func redactURL(u string) string {
	if p, err := url.Parse(u); err == nil {
		return p.Redacted()
	}
	return "(unparsable)"
}
