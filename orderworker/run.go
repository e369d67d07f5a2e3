package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"usher/shared/bus"
	"usher/shared/config"
	"usher/shared/opshttp"
)

func run(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	env := config.New(getenv)
	addr := env.String("USHER_ORDERWORKER_ADDR", "127.0.0.1:8083")
	natsURLs := env.List("USHER_NATS_URL", "nats://127.0.0.1:4222")
	replicas := env.Int("USHER_STREAM_REPLICAS", 1, 1)
	level := env.String("USHER_LOG_LEVEL", "info")
	shutdown := env.Duration("USHER_SHUTDOWN_TIMEOUT", 5*time.Second)
	if err := env.Err(); err != nil {
		return err
	}
	log, err := config.Logger(stdout, level)
	if err != nil {
		return err
	}
	nc, _, err := bus.Open(ctx, natsURLs, "usher-orderworker", replicas)
	if err != nil {
		return err
	}
	defer nc.Drain()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	mux := opshttp.Mux(prometheus.NewRegistry(), func(context.Context) error {
		if !nc.IsConnected() {
			return fmt.Errorf("nats: %s", nc.Status())
		}
		return nil
	})
	log.Info("orderworker running", "addr", ln.Addr().String())
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return opshttp.Serve(ctx, ln, mux, shutdown) })
	return g.Wait()
}
