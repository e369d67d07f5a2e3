package main

import (
	"errors"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"
)

// sseWriter frames Server-Sent Events (WHATWG HTML, "Server-sent events")
// on one response and flushes each at once. Every write has a deadline: a
// client that does not take its bytes in time is dropped, not waited for.
//
// Event ids are decimal counters that keep growing across reconnections:
// a client that comes back with Last-Event-ID n gets n+1 next. The stream
// carries state, not a log, and every connection starts with the current
// state, so whatever a client missed while away is in that first event; the
// id lets it order what it saw and lets the server tell a resume from a
// first visit in its logs.
type sseWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
	// conn is the connection once the stream is taken over from net/http
	// (detach): events are written to it as they are, after head.
	conn    net.Conn
	head    []byte
	now     func() time.Time
	timeout time.Duration
	next    uint64
	buf     []byte
}

// errSlow marks a client that missed a write deadline.
var errSlow = errors.New("client too slow")

func newSSEWriter(w http.ResponseWriter, now func() time.Time, timeout time.Duration, lastID uint64) *sseWriter {
	return &sseWriter{w: w, rc: http.NewResponseController(w), now: now, timeout: timeout, next: lastID + 1}
}

// retry sends the reconnection delay hint.
func (s *sseWriter) retry(d time.Duration) error {
	s.buf = append(s.buf[:0], "retry: "...)
	s.buf = strconv.AppendInt(s.buf, d.Milliseconds(), 10)
	s.buf = append(s.buf, "\n\n"...)
	return s.flush()
}

// event sends one event. data must not hold a line break (JSON from
// encoding/json never does).
func (s *sseWriter) event(name string, data []byte) error {
	s.buf = append(s.buf[:0], "id: "...)
	s.buf = strconv.AppendUint(s.buf, s.next, 10)
	s.buf = append(s.buf, "\nevent: "...)
	s.buf = append(s.buf, name...)
	s.buf = append(s.buf, "\ndata: "...)
	s.buf = append(s.buf, data...)
	s.buf = append(s.buf, "\n\n"...)
	s.next++
	return s.flush()
}

// comment sends a comment line, which keeps proxies from timing out an
// idle stream and lets a dead connection surface as a failed write.
func (s *sseWriter) comment(text string) error {
	s.buf = append(s.buf[:0], ": "...)
	s.buf = append(s.buf, text...)
	s.buf = append(s.buf, "\n\n"...)
	return s.flush()
}

// detach makes conn the stream's connection; head (the response's status
// line and header) goes out with the first event.
func (s *sseWriter) detach(conn net.Conn, head []byte) {
	s.w, s.rc, s.conn, s.head = nil, nil, conn, head
}

func (s *sseWriter) flush() error {
	var err error
	if s.conn != nil {
		out := s.buf
		if s.head != nil {
			out = append(s.head, s.buf...)
			s.head = nil
		}
		_ = s.conn.SetWriteDeadline(s.now().Add(s.timeout)) // fails only on a closed conn, which the write reports
		_, err = s.conn.Write(out)
	} else {
		// ErrNotSupported only comes from a wrapped writer without
		// deadlines; the write below still works.
		_ = s.rc.SetWriteDeadline(s.now().Add(s.timeout))
		if _, err = s.w.Write(s.buf); err == nil {
			err = s.rc.Flush()
		}
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return errSlow
	}
	return err
}

// parseLastEventID reads a Last-Event-ID this notifier issued: a decimal
// counter of at most 19 digits (so n+1 cannot overflow). Anything else — a
// browser's empty value, another server's id, garbage — counts as no id
// (ok false): the client then simply starts a fresh count.
func parseLastEventID(s string) (n uint64, ok bool) {
	if len(s) == 0 || len(s) > 19 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}
