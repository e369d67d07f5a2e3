package main

import (
	"context"
	"fmt"
	"io"
	"net"

	"golang.org/x/sync/errgroup"

	"usher/shared/config"
	"usher/shared/opshttp"
	"usher/shared/service"
	"usher/shared/ticket"
	"usher/shared/token"
)

// run wires the notifier and serves until ctx ends.
func run(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	s, err := loadSettings(config.New(getenv))
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
	d, err := service.Open(ctx, s.Settings, "notifier", stdout)
	if err != nil {
		return err
	}
	defer d.Close()
	// Each admission event makes its clients read the line (one Poll
	// each): batching coalesces a burst of them into pipelines.
	d.Line.EnableBatching()
	m := newMetrics()
	h := newHub(d.Log, d.Line, d.Queues, d.Clock.Now, s.timing, m)
	d.Queues.OnChange(h.onConfig)
	sub, err := d.NC.Subscribe(admissionsSubject, admissionHandler(d.Log, h))
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", admissionsSubject, err)
	}
	// A burst of admissions must not make NATS drop this subscriber.
	if err := sub.SetPendingLimits(1<<20, 256<<20); err != nil {
		return err
	}
	orders, err := d.NC.Subscribe(ordersSubject, orderHandler(d.Log, h))
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", ordersSubject, err)
	}
	if err := orders.SetPendingLimits(1<<20, 256<<20); err != nil {
		return err
	}
	leaves, err := d.NC.Subscribe(leavesSubject, leaveHandler(d.Log, h))
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", leavesSubject, err)
	}
	if err := leaves.SetPendingLimits(1<<20, 256<<20); err != nil {
		return err
	}
	// Listen before serving, so a taken port fails start-up synchronously.
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", s.addr, err)
	}
	mux := opshttp.Mux(m.reg, d.Ready())
	g, ctx := errgroup.WithContext(ctx)
	mint := newMinter(ctx, keys)
	st := &streams{
		log: d.Log, hub: h, line: d.Line, queues: d.Queues, tickets: tickets, epoch: d.Streams.Epoch, keys: mint,
		origins: s.corsOrigins, now: d.Clock.Now, earliest: d.Clock.Earliest, timing: s.timing, metrics: m, base: ctx,
	}
	st.routes(mux)
	d.Log.Info("notifier listening", "addr", ln.Addr().String(), "nats", s.NATS.URLs)
	d.Go(ctx, g)
	g.Go(func() error { return mint.Run(ctx) })
	g.Go(func() error { return d.Line.RunBatches(ctx, 2) })
	g.Go(func() error { return h.Run(ctx) })
	g.Go(func() error { return opshttp.ServeProfiles(ctx, s.Profiles) })
	g.Go(func() error { return opshttp.Serve(ctx, ln, exactPaths(mux), s.Shutdown) })
	err = g.Wait()
	st.detached.Wait() // the streams taken over from net/http end with ctx
	return err
}
