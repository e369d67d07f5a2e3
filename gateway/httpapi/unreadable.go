package httpapi

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
// (fasthttp's ErrorHandler): a problem through the error writer, like every
// other error answer, on a connection that then closes lingering (see
// lingerConn) — the client may still be sending the rest.
func answerUnreadable(app *fiber.App, w errorWriter) func(*fasthttp.RequestCtx, error) {
	return func(fctx *fasthttp.RequestCtx, err error) {
		lingerAfter(fctx)
		answerOutsideRouter(app, w, fctx, func(*fiber.Ctx) error { return unreadableProblem(err) })
	}
}

// routeUnknownMethods answers a request whose method app's router does not
// know at all — fiber would answer it a plain-text 400 before any route or
// the error handler saw it — as NotFound answers a method a path does not
// take: 405 with Allow, or 404, a problem either way.
func routeUnknownMethods(app *fiber.App, w errorWriter) {
	srv := app.Server()
	route, known := srv.Handler, app.Config().RequestMethods
	srv.Handler = func(fctx *fasthttp.RequestCtx) {
		for _, m := range known {
			if string(fctx.Method()) == m { // compared, not converted: no allocation per request
				route(fctx)
				return
			}
		}
		answerOutsideRouter(app, w, fctx, NotFound(app))
	}
}

// answerOutsideRouter writes the error answer of a request app's router
// never saw (fasthttp's error handler, a method fiber does not know) as
// the error writer writes every other: the error is what answer says of it.
func answerOutsideRouter(app *fiber.App, w errorWriter, fctx *fasthttp.RequestCtx, answer fiber.Handler) {
	c := app.AcquireCtx(fctx)
	defer app.ReleaseCtx(c)
	if err := w.write(c, answer(c)); err != nil {
		w.log.Debug("writing an answer outside the router", "err", err)
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
