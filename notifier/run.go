package main

import (
	"context"
	"fmt"
	"io"
	"net"

	"github.com/nats-io/nats.go"
	"golang.org/x/sync/errgroup"

	"usher/internal/config"
	"usher/internal/opshttp"
	"usher/internal/service"
	"usher/internal/waitqueue/line"
)

// run wires the notifier and serves until ctx ends.
func run(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	s, err := loadSettings(config.New(getenv))
	if err != nil {
		return err
	}
	keys, tickets, err := s.keyFiles.Open()
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
	reads := line.New(d.Line) // polls, ranks and presence: the notifier's Redis user may do no more
	m := newMetrics()
	m.reg.MustRegister(opshttp.RedisPools(d.Redis))
	h := newHub(d.Log, reads, d.Queues, d.Clock.Now, s.timing, m)
	d.Queues.OnChange(h.onConfig)
	// One core subscription each, for every queue: admissions, order
	// events and leaves name the entries whose streams hear of them.
	for _, sub := range []struct {
		subject string
		handle  nats.MsgHandler
	}{
		{admissionsSubject, admissionHandler(d.Log, h)},
		{ordersSubject, orderHandler(d.Log, h)},
		{leavesSubject, leaveHandler(d.Log, h)},
	} {
		if err := subscribe(d.NC, sub.subject, sub.handle); err != nil {
			return err
		}
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
		log: d.Log, hub: h, line: reads, queues: d.Queues, tickets: tickets, epoch: d.Streams.Epoch, keys: mint,
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

// subscribe subscribes handle to subject with pending limits a burst of
// events does not reach: NATS must not drop this subscriber.
func subscribe(nc *nats.Conn, subject string, handle nats.MsgHandler) error {
	sub, err := nc.Subscribe(subject, handle)
	if err == nil {
		err = sub.SetPendingLimits(1<<20, 256<<20)
	}
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", subject, err)
	}
	return nil
}
