package httpapi

import (
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"usher/internal/problem"
)

// errorWriter is the one place where errors become responses.
type errorWriter struct {
	log *slog.Logger
}

// write answers err: a Problem is sent as it is, a fiber error keeps its
// status, a dependency that failed (Unavailable) is logged with its cause
// and answered 503, anything else is logged and answered with a 500 that
// reveals nothing.
func (w errorWriter) write(c *fiber.Ctx, err error) error {
	var p problem.Problem
	var fe *fiber.Error
	var un UnavailableError
	switch {
	case errors.As(err, &un):
		w.log.Warn("request failed: dependency unavailable", "method", methodLabel(c.Method()), "route", c.Route().Path, "err", un.Cause)
		p = un.Problem
	case errors.As(err, &p):
	case errors.As(err, &fe):
		p = problem.New(fe.Code, slugOf(fe.Code), fe.Message)
	default:
		w.log.Error("request failed", "method", c.Method(), "route", c.Route().Path, "err", err)
		p = problem.New(fiber.StatusInternalServerError, "internal", "the request could not be completed; it is safe to retry")
	}
	if p.Status < 500 {
		// The route template, never the path: paths carry tickets.
		w.log.Debug("client error", "method", methodLabel(c.Method()), "route", c.Route().Path, "status", p.Status, "type", p.Type)
	}
	if p.RetryAfter > 0 {
		c.Set(fiber.HeaderRetryAfter, strconv.Itoa(p.RetryAfter))
	}
	c.Set(fiber.HeaderCacheControl, "no-store")
	c.Set(fiber.HeaderContentType, problem.ContentType)
	return c.Status(p.Status).Send(p.JSON())
}

// StatusOf is the status the error writer answers err with.
func StatusOf(err error) int {
	var p problem.Problem
	var fe *fiber.Error
	var un UnavailableError
	switch {
	case errors.As(err, &un):
		return un.Problem.Status
	case errors.As(err, &p):
		return p.Status
	case errors.As(err, &fe):
		return fe.Code
	}
	return fiber.StatusInternalServerError
}

func slugOf(status int) string {
	if t := http.StatusText(status); t != "" {
		return strings.ReplaceAll(strings.ToLower(t), " ", "-")
	}
	return "error"
}

// Unavailable answers 503 (retry) for a failure of the broker or the line,
// logged once by the error writer with its cause.
func Unavailable(cause error, detail string) error {
	return UnavailableError{Cause: cause, Problem: problem.Problem{Type: "https://usher.dev/problems/unavailable",
		Title: "Service Unavailable", Status: fiber.StatusServiceUnavailable, Detail: detail, RetryAfter: 1}}
}

// LineDown answers 503 for a failed read or write of the line (Redis).
func LineDown(err error) error {
	return Unavailable(err, "the line cannot be read right now; retry")
}

// UnavailableError is a 503 with the failure behind it.
type UnavailableError struct {
	Cause   error
	Problem problem.Problem
}

// Error is the cause's message: what is logged, never what is answered.
func (u UnavailableError) Error() string { return u.Cause.Error() }

// Unwrap is the failure behind the 503.
func (u UnavailableError) Unwrap() error { return u.Cause }

// NotFound answers a request no route of app took: 405 with Allow when its
// path is a resource of app under other methods (RFC 9110 §15.5.6), else
// 404. It goes last, after every route.
func NotFound(app *fiber.App) fiber.Handler {
	return func(c *fiber.Ctx) error {
		if allow := allowed(app, c.Path()); allow != "" {
			c.Set(fiber.HeaderAllow, allow)
			return problem.New(fiber.StatusMethodNotAllowed, "method-not-allowed",
				c.Method()+" is not a method of "+c.Path()+"; it allows "+allow)
		}
		return problem.New(fiber.StatusNotFound, "not-found", "no such resource")
	}
}
