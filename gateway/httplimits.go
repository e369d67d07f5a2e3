package main

import "time"

// httpLimits bound what one client can make the gateway hold: a request
// body (413 beyond), the request line and headers together (431 beyond),
// the time to send a whole request (slow clients are cut off; SSE lives on
// the notifier, so no gateway request is long), to take an answer, and to
// keep an idle connection.
type httpLimits struct {
	body, header      int
	read, write, idle time.Duration
}

var defaultHTTPLimits = httpLimits{body: 16 << 10, header: 8 << 10, read: 10 * time.Second, write: 10 * time.Second, idle: 60 * time.Second}

// orDefault fills unset limits with the defaults.
func (l httpLimits) orDefault() httpLimits {
	d := defaultHTTPLimits
	if l.body > 0 {
		d.body = l.body
	}
	if l.header > 0 {
		d.header = l.header
	}
	if l.read > 0 {
		d.read = l.read
	}
	if l.write > 0 {
		d.write = l.write
	}
	if l.idle > 0 {
		d.idle = l.idle
	}
	return d
}
