package httpapi

import (
	"context"
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
	"golang.org/x/sync/errgroup"
)

// A request the server cannot read — headers or a body beyond the limits,
// a malformed request line, a client too slow — is answered with a problem
// and its connection closed, often while the client is still sending the
// rest of it. Closing a socket with input unread makes the kernel reset the
// connection, and the client, still writing, sees "connection reset"
// instead of the 431 or 413 that explains what to fix. So such a connection
// is closed as net/http and nginx close one (a lingering close): the answer
// is sent, the write side shut, what the client still sends read and
// dropped — at most lingerBytes, for at most lingerTime — and only then is
// the socket closed. Connections closed for any other reason close at once.
const (
	lingerBytes = 256 << 10
	lingerTime  = time.Second
)

// lingerListener hands out connections that linger when closed after an
// unreadable request.
type lingerListener struct{ net.Listener }

func (l lingerListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &lingerConn{Conn: c}, nil
}

type lingerConn struct {
	net.Conn
	linger atomic.Bool // the request could not be read; drain before closing
}

// Close closes at once, or — after an unreadable request — shuts the write
// side and drains in the background, so the server's worker is not held.
func (c *lingerConn) Close() error {
	if !c.linger.CompareAndSwap(true, false) {
		return c.Conn.Close()
	}
	go func() {
		c.Conn.SetReadDeadline(time.Now().Add(lingerTime))
		lingerClose(c.Conn)
	}()
	return nil
}

// lingerClose shuts c's write side, reads and drops what the client still
// sends — at most lingerBytes, until c's read deadline, which the caller
// sets — and closes c.
func lingerClose(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	io.CopyN(io.Discard, c, lingerBytes)
	c.Close()
}

// lingerAfter marks the connection of a request the server could not read
// (see answerUnreadable) to linger when closed.
func lingerAfter(ctx *fasthttp.RequestCtx) {
	if c, ok := ctx.Conn().(*lingerConn); ok {
		c.linger.Store(true)
	}
}

// Listen serves app on ln until the app shuts down or ln fails.
func Listen(app *fiber.App, ln net.Listener) error {
	return app.Listener(lingerListener{ln})
}

// Serve serves app on ln in g until ctx ends, then shuts it down within
// timeout. A stop that comes before the server has started serving still
// ends it: fasthttp's shutdown does nothing to a server that holds no
// listener yet (and clears its stop flag again), so the listener is closed
// here too, which ends the Accept the server would otherwise wait in
// forever; the error that Accept then returns is the stop, not a failure.
func Serve(ctx context.Context, g *errgroup.Group, app *fiber.App, ln net.Listener, timeout time.Duration) {
	g.Go(func() error {
		err := Listen(app, ln)
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
