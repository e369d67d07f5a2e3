package httpapi

import (
	"bufio"
	"io"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/prometheus/client_golang/prometheus"

	"usher/internal/problem"
)

// A gateway's memory grows with the connections it holds — each has a
// goroutine and its read and write buffers, tens of KiB under load — and
// the server takes as many as clients open. CapConns bounds them, so a
// crowd of clients meets a ceiling of memory the operator chose, not the
// kernel's OOM killer. A connection past the bound is answered with a
// 503 problem and Retry-After once its request's head has come — read and
// dropped, never parsed, routed or handled — and closed; the client
// retries on a connection freed meanwhile.

// refusedWait bounds how long a refused connection may take to send its
// request's head and then to take the answer: a refusal must stay cheap.
const refusedWait = time.Second

// refusedHead bounds the bytes of a refused request's head that are read
// (the gateway's header limit is 8 KiB).
const refusedHead = 16 << 10

// capListener hands out at most max open connections at once.
type capListener struct {
	net.Listener
	max     int64
	open    atomic.Int64
	refused prometheus.Counter
}

// CapConns returns ln bounded to max open connections (0: ln as it is),
// with its metrics registered on reg.
func CapConns(ln net.Listener, max int, reg prometheus.Registerer) net.Listener {
	if max <= 0 {
		return ln
	}
	l := &capListener{Listener: ln, max: int64(max), refused: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "usher_http_connections_refused_total",
		Help: "Connections answered 503 and closed because the gateway held USHER_GATEWAY_MAX_CONNS already.",
	})}
	reg.MustRegister(l.refused, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "usher_http_connections_open",
		Help: "Connections the gateway's public listener holds open (at most USHER_GATEWAY_MAX_CONNS).",
	}, func() float64 { return float64(l.open.Load()) }))
	return l
}

// Accept returns the next connection within the bound; those past it are
// refused in the background, and Accept waits for the next.
func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) <= l.max {
			return &cappedConn{Conn: c, l: l}, nil
		}
		l.open.Add(-1)
		l.refused.Inc()
		go refuse(c)
	}
}

// cappedConn gives its place back once, when closed.
type cappedConn struct {
	net.Conn
	l      *capListener
	closed atomic.Bool
}

func (c *cappedConn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.l.open.Add(-1)
	}
	return c.Conn.Close()
}

// CloseWrite shuts the write side, as the TCP connection under it does: a
// lingering close (see lingerConn) needs it.
func (c *cappedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// tooManyConns is the whole answer to a connection past the bound.
var tooManyConns = func() []byte {
	body := problem.New(fiber.StatusServiceUnavailable, "unavailable",
		"the gateway holds as many connections as it may; retry in a moment").JSON()
	head := "HTTP/1.1 503 Service Unavailable\r\nContent-Type: " + problem.ContentType +
		"\r\nRetry-After: 1\r\nCache-Control: no-store\r\nConnection: close\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n"
	return append([]byte(head), body...)
}()

// refuse answers c with tooManyConns once its request's head has come,
// then closes it, reading and dropping what the client still sends for a
// moment first so that it reads the 503 rather than a reset. The answer
// waits for the request: an HTTP/1.1 client takes an answer that comes
// before its request as an unsolicited response on an idle connection —
// Go's net/http fails the request so.
func refuse(c net.Conn) {
	c.SetDeadline(time.Now().Add(refusedWait))
	if !readHead(bufio.NewReaderSize(io.LimitReader(c, refusedHead), 4<<10)) {
		c.Close()
		return
	}
	if _, err := c.Write(tooManyConns); err != nil {
		c.Close()
		return
	}
	lingerClose(c)
}

// readHead reads a request's head up to the empty line that ends it, and
// reports whether it came.
func readHead(r *bufio.Reader) bool {
	partial := false // the last read ended inside a line longer than the buffer
	for {
		line, err := r.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			partial = true
			continue
		}
		if err != nil {
			return false
		}
		if !partial && (string(line) == "\r\n" || string(line) == "\n") {
			return true
		}
		partial = false
	}
}
