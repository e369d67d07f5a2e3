package main

import (
	"fmt"
	"net"
	"usher/gateway/httpapi"

	"github.com/gofiber/fiber/v2"
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
	a.admin.Get("/healthz", httpapi.Healthz)
	a.admin.Get("/readyz", httpapi.Readyz(a.ready))
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
