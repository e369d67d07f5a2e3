// Package httpapi is the HTTP plumbing every room of the gateway shares:
// the fiber application with its limits against oversized and slow
// clients, the one error writer that turns errors into problems, the
// request's readers (its body as the API document reads it, its path
// parameters, its client address, its bearer token) and the listener that
// closes an unreadable request's connection gently.
package httpapi

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"usher/internal/catalog"
	"usher/internal/problem"
)

// NewApp is a fiber app of the gateway's, the public one or the admin
// listener's: limits against oversized and slow clients, errors as
// problems (logged on log), every request through measure first.
func NewApp(name string, lim Limits, log *slog.Logger, measure fiber.Handler) *fiber.App {
	lim = lim.OrDefault()
	w := errorWriter{log: log}
	app := fiber.New(fiber.Config{
		AppName:               name,
		DisableStartupMessage: true,
		BodyLimit:             lim.Body,
		ReadBufferSize:        lim.Header,
		ReadTimeout:           lim.Read,
		WriteTimeout:          lim.Write,
		IdleTimeout:           lim.Idle,
		ErrorHandler:          w.write,
		// A path is the document's, exactly: /V1/QUEUES/q and
		// /v1/queues/q/ are no resource (404), not another spelling.
		CaseSensitive: true,
		StrictRouting: true,
		// A body is read as JSON whatever its Content-Type says (the API
		// document): fasthttp must not parse one labelled
		// multipart/form-data as a form while reading the request, which
		// refused a JSON order so labelled as unparseable (400) before any
		// handler saw it. The page's form reads its fields when it asks.
		DisablePreParseMultipartForm: true,
	})
	app.Server().ErrorHandler = answerUnreadable(app, w)
	routeUnknownMethods(app, w)
	app.Use(measure)
	return app
}

// Healthz answers that the process is up.
func Healthz(c *fiber.Ctx) error { return c.SendString("ok\n") }

// Readyz answers whether ready finds every dependency reachable, within a
// second.
func Readyz(ready func(context.Context) error) fiber.Handler {
	return func(c *fiber.Ctx) error {
		ctx, cancel := context.WithTimeout(c.UserContext(), time.Second)
		defer cancel()
		if err := ready(ctx); err != nil {
			return problem.New(fiber.StatusServiceUnavailable, "not-ready", err.Error())
		}
		return c.SendString("ready\n")
	}
}

// allowed lists the methods app's routes take at path, "" when none does.
func allowed(app *fiber.App, path string) string {
	var methods []string
	for _, r := range app.GetRoutes(true) {
		if routeMatches(r.Path, path) && !slices.Contains(methods, r.Method) {
			methods = append(methods, r.Method)
		}
	}
	slices.Sort(methods)
	return strings.Join(methods, ", ")
}

// routeMatches reports whether path is one of route's (fiber's spelling:
// ':name' is one segment, '*' the rest; case and a trailing slash count,
// as they do for the router: CaseSensitive, StrictRouting).
func routeMatches(route, path string) bool {
	rs := strings.Split(route, "/")
	ps := strings.Split(path, "/")
	for i, r := range rs {
		if r == "*" {
			return true
		}
		if i >= len(ps) || (ps[i] != r && (!strings.HasPrefix(r, ":") || ps[i] == "")) {
			return false
		}
	}
	return len(rs) == len(ps)
}

// BearerCredentials is the token of an Authorization value in the Bearer
// scheme: the scheme's name in any case (RFC 9110 §11.1), then one or more
// spaces. ok is false for another scheme or no token.
func BearerCredentials(v string) (tok string, ok bool) {
	scheme, tok, _ := strings.Cut(v, " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimLeft(tok, " ")
	return tok, tok != ""
}

// Queues finds a queue's configuration by name: the catalog.
type Queues interface {
	Get(name string) (catalog.Config, bool)
}

// Queue is the configuration of the queue the request's path names, or
// the 404 UnknownQueue.
func Queue(c *fiber.Ctx, queues Queues) (catalog.Config, error) {
	name := PathParam(c, "queue")
	cfg, ok := queues.Get(name)
	if !ok {
		return cfg, UnknownQueue(name)
	}
	return cfg, nil
}

// UnknownQueue is the 404 for a queue name the catalog does not hold.
func UnknownQueue(name string) error {
	return problem.New(fiber.StatusNotFound, "unknown-queue", "no queue named "+strconv.Quote(name))
}
