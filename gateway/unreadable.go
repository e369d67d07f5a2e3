package main

import (
	"errors"
	"net"
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"usher/internal/problem"
)

// answerUnreadable is app's answer to a request its server could not read
// (fasthttp's ErrorHandler): a problem through writeError, like every
// other error answer, on a connection that then closes lingering (see
// lingerConn) — the client may still be sending the rest.
func (a *api) answerUnreadable(app *fiber.App) func(*fasthttp.RequestCtx, error) {
	return func(fctx *fasthttp.RequestCtx, err error) {
		lingerAfter(fctx)
		a.answerOutsideRouter(app, fctx, func(*fiber.Ctx) error { return unreadableProblem(err) })
	}
}

// answerOutsideRouter writes the error answer of a request app's router
// never saw (fasthttp's error handler, a method fiber does not know) as
// writeError writes every other: the error is what answer says of it.
func (a *api) answerOutsideRouter(app *fiber.App, fctx *fasthttp.RequestCtx, answer fiber.Handler) {
	c := app.AcquireCtx(fctx)
	defer app.ReleaseCtx(c)
	if err := a.writeError(c, answer(c)); err != nil {
		a.log.Debug("writing an answer outside the router", "err", err)
	}
}

// unreadableProblem is the problem a request that could not be read gets:
// 431 for headers beyond the limit, 413 for a body beyond it, 408 for a
// client too slow, else a 400 whose detail is fixed. Never the parser's
// message: it quotes the request's bytes, credentials included.
func unreadableProblem(err error) problem.Problem {
	var small *fasthttp.ErrSmallBuffer
	var ne net.Error
	status, detail := fiber.StatusBadRequest, "the request could not be parsed"
	switch {
	case errors.As(err, &small):
		status = fiber.StatusRequestHeaderFieldsTooLarge
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		status = fiber.StatusRequestEntityTooLarge
	case errors.As(err, &ne) && ne.Timeout(), strings.Contains(err.Error(), "timeout"):
		status = fiber.StatusRequestTimeout
	}
	if status != fiber.StatusBadRequest {
		detail = http.StatusText(status)
	}
	return problem.New(status, slugOf(status), detail)
}
