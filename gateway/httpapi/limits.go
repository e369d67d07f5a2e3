package httpapi

import "time"

// Limits bound what one client can make the gateway hold: a request body
// (413 beyond), the request line and headers together (431 beyond), the
// time to send a whole request (slow clients are cut off; SSE lives on the
// notifier, so no gateway request is long), to take an answer, and to keep
// an idle connection.
type Limits struct {
	Body, Header      int
	Read, Write, Idle time.Duration
}

// DefaultLimits are the limits a gateway has unless told otherwise.
func DefaultLimits() Limits {
	return Limits{Body: 16 << 10, Header: 8 << 10, Read: 10 * time.Second, Write: 10 * time.Second, Idle: 60 * time.Second}
}

// OrDefault fills unset limits with the defaults.
func (l Limits) OrDefault() Limits {
	d := DefaultLimits()
	if l.Body > 0 {
		d.Body = l.Body
	}
	if l.Header > 0 {
		d.Header = l.Header
	}
	if l.Read > 0 {
		d.Read = l.Read
	}
	if l.Write > 0 {
		d.Write = l.Write
	}
	if l.Idle > 0 {
		d.Idle = l.Idle
	}
	return d
}
