package main

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/gofiber/fiber/v2"
	"golang.org/x/sync/errgroup"

	"usher/internal/problem"
)

// The admin API (/v1/admin/…) and the ops dashboard (/ops) are served by
// the public listener, or — with USHER_ADMIN_ADDR — by a listener of their
// own, on an address only ops can reach (loopback, a management network),
// while the public listener answers 404 for them as for any unknown path.
// The bearer token still guards every admin call either way.

// adminRouter is where app adds the admin API and the ops dashboard: the
// public app itself, or, when the admin API has its own listener
// (a.adminApart), a second app, a.admin, with the same limits, error
// writer and metrics, that serves them, /healthz and /readyz only.
func (a *api) adminRouter(public *fiber.App) fiber.Router {
	if !a.adminApart {
		return public
	}
	a.admin = a.newFiber("usher-gateway-admin")
	a.admin.Get("/healthz", func(c *fiber.Ctx) error { return c.SendString("ok\n") })
	a.admin.Get("/readyz", func(c *fiber.Ctx) error {
		ctx, cancel := context.WithTimeout(c.UserContext(), time.Second)
		defer cancel()
		if err := a.ready(ctx); err != nil {
			return problem.New(fiber.StatusServiceUnavailable, "not-ready", err.Error())
		}
		return c.SendString("ready\n")
	})
	return a.admin
}

// listenAdmin opens the admin API's own listener; nil when addr is empty
// (the admin API is on the public listener).
func listenAdmin(addr string) (net.Listener, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s (USHER_ADMIN_ADDR): %w", addr, err)
	}
	return ln, nil
}

// serveApp serves app on ln in g until ctx ends, then shuts it down within
// timeout. A stop that comes before the server has started serving still
// ends it: fasthttp's shutdown does nothing to a server that holds no
// listener yet (and clears its stop flag again), so the listener is closed
// here too, which ends the Accept the server would otherwise wait in
// forever; the error that Accept then returns is the stop, not a failure.
func serveApp(ctx context.Context, g *errgroup.Group, app *fiber.App, ln net.Listener, timeout time.Duration) {
	g.Go(func() error {
		err := listen(app, ln)
		if ctx.Err() != nil {
			return nil
		}
		return err
	})
	g.Go(func() error {
		<-ctx.Done()
		err := app.ShutdownWithTimeout(timeout)
		ln.Close()
		return err
	})
}
