// Command pgsim is a payment-gateway (PG) simulator for usher, the virtual
// waiting room. The order worker's tests and the load tool charge it
// instead of a real PG.
//
// It serves POST /v1/payments with idempotency keys (a key is charged at
// most once; retries get the same payment id), a log-normal latency model
// with a long tail, a configurable failure rate (502), admin-switched
// outage (503), slow, capture-hang (captured, never answered) and decline
// (402, the issuer's refusal) modes, and, with PGSIM_KEY_IN_USE=conflict,
// Stripe's answer to a key whose charge is still in flight (409);
// GET /v1/payments/{key} to look up what was captured under a key and
// POST /v1/payments/{key}/void to give it back; admin endpoints to inspect
// the ledger (each charge and its status) and reset state, /healthz and
// Prometheus /metrics. It logs JSON to stdout; the first line after start
// is "listening" with the bound address.
//
// Configuration is read from PGSIM_* environment variables; see config.go.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
)

// shutdownTimeout bounds the graceful shutdown after ctx is canceled.
const shutdownTimeout = 5 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "pgsim:", err)
		stop()
		os.Exit(1)
	}
}

// run starts pgsim and serves until ctx is canceled, then shuts down
// gracefully. Configuration and listen errors are returned before serving.
func run(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	cfg, err := loadConfig(getenv)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	logger := slog.New(slog.NewJSONHandler(stdout, nil))

	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}

	clock := realClock{}
	gw := NewGateway(GatewayOptions{
		LatencyMean: cfg.LatencyMean,
		LatencyTail: cfg.LatencyTail,
		FailureRate: cfg.FailureRate,
		SlowLatency: cfg.SlowLatency,
		KeyInUse:    cfg.KeyInUse,
		Clock:       clock,
		Rand:        rand.New(rand.NewPCG(cfg.Seed, cfg.Seed)),
	})
	// Shutdown ends the requests capture-hang mode holds; otherwise it
	// would wait for their clients to give up.
	hung := make(chan struct{})
	srv := &http.Server{
		Handler:           newHandler(gw, NewMetrics(), clock, cfg.AdminToken, logger, hung),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		// No WriteTimeout: slow mode deliberately answers late.
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	srv.RegisterOnShutdown(func() { close(hung) })

	logger.Info("listening",
		"addr", ln.Addr().String(),
		"latencyMeanMs", cfg.LatencyMean.Milliseconds(),
		"latencyTail", cfg.LatencyTail,
		"failureRate", cfg.FailureRate,
		"seed", cfg.Seed,
		"slowMs", cfg.SlowLatency.Milliseconds(),
		"keyInUse", string(cfg.KeyInUse),
	)
	if cfg.AdminToken == defaultAdminToken {
		logger.Warn("using the default admin token; set PGSIM_ADMIN_TOKEN outside development")
	}

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		logger.Info("shutting down")
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			_ = srv.Close()
			return fmt.Errorf("shutdown: %w", err)
		}
		return nil
	})
	if err := g.Wait(); err != nil {
		return err
	}
	logger.Info("stopped")
	return nil
}
