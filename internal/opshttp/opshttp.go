// Package opshttp serves the operational endpoints every usher service
// has: /healthz (the process runs), /readyz (its dependencies answer) and
// /metrics (Prometheus, from the service's own registry).
package opshttp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"usher/internal/problem"
)

// Mux returns a ServeMux with the three endpoints. ready is asked on each
// /readyz and should answer within a second.
func Mux(reg *prometheus.Registry, ready func(context.Context) error) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		defer cancel()
		if err := ready(ctx); err != nil {
			problem.Write(w, problem.New(http.StatusServiceUnavailable, "not-ready", err.Error()))
			return
		}
		w.Write([]byte("ready\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return mux
}

// Serve serves h on ln until ctx ends, then shuts down within timeout.
// Listening is the caller's job, so a bind error surfaces before anything
// starts. Every request's context is ctx's child, so long-lived responses
// (event streams) end as soon as shutdown begins instead of holding it up
// until the timeout.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, timeout time.Duration) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       60 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// Check is one dependency's readiness probe.
type Check func(context.Context) error

// NATS is ready while the connection is up (it reconnects by itself).
func NATS(nc *nats.Conn) Check {
	return func(context.Context) error {
		if !nc.IsConnected() {
			return fmt.Errorf("nats: %s", nc.Status())
		}
		return nil
	}
}

// Redis is ready while it answers PING.
func Redis(rdb redis.UniversalClient) Check {
	return func(ctx context.Context) error { return rdb.Ping(ctx).Err() }
}

// All is ready when every check is, and reports the first that is not.
func All(checks ...Check) func(context.Context) error {
	return func(ctx context.Context) error {
		for _, c := range checks {
			if err := c(ctx); err != nil {
				return err
			}
		}
		return nil
	}
}
