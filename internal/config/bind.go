package config

import (
	"net"
	"strings"
)

// IsLoopback reports whether a listen address (host:port) accepts
// connections from this host only: a loopback IP or "localhost". An empty
// host (every interface), any other address, and any other name count as
// reachable from elsewhere — a name may resolve to anything.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
