package httpapi

import (
	"bytes"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"
)

// ClientIPs decides which address a request comes from. Without trusted
// proxies it is the socket's peer. Behind them, header names where they put
// the client: X-Forwarded-For is read from the right, skipping trusted
// hops, so whatever a client writes into the header itself is never
// believed; any other header (CF-Connecting-IP, X-Real-IP) holds one
// address that the trusted proxy sets.
type ClientIPs struct {
	trusted []netip.Prefix
	header  string
}

// ParseClientIPs reads USHER_TRUSTED_PROXIES (CIDRs or single addresses)
// and USHER_CLIENT_IP_HEADER (default X-Forwarded-For once proxies are
// trusted).
func ParseClientIPs(proxies []string, header string) (ClientIPs, error) {
	var ips ClientIPs
	var bad []string
	for _, p := range proxies {
		if pfx, err := netip.ParsePrefix(p); err == nil {
			ips.trusted = append(ips.trusted, pfx.Masked())
		} else if addr, err := netip.ParseAddr(p); err == nil {
			addr = addr.Unmap()
			ips.trusted = append(ips.trusted, netip.PrefixFrom(addr, addr.BitLen()))
		} else {
			bad = append(bad, strconv.Quote(p))
		}
	}
	if len(bad) > 0 {
		return ips, fmt.Errorf("USHER_TRUSTED_PROXIES: %s: want CIDRs such as 10.0.0.0/8", strings.Join(bad, ", "))
	}
	switch {
	case header != "" && len(ips.trusted) == 0:
		return ips, fmt.Errorf("USHER_CLIENT_IP_HEADER=%q needs USHER_TRUSTED_PROXIES: without them any client could claim any address", header)
	case header == "" && len(ips.trusted) > 0:
		header = fiber.HeaderXForwardedFor
	}
	if header != "" && !validHeaderName(header) {
		return ips, fmt.Errorf("USHER_CLIENT_IP_HEADER=%q: not a header name", header)
	}
	ips.header = header
	return ips, nil
}

func validHeaderName(h string) bool {
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return h != ""
}

// IsTrusted reports whether a is one of the trusted proxies.
func (ips ClientIPs) IsTrusted(a netip.Addr) bool {
	for _, p := range ips.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Resolve returns the client address of a request from peer whose client
// IP header lines are values. An address that does not parse is never the
// answer: the nearest hop that does is.
func (ips ClientIPs) Resolve(peer netip.Addr, values [][]byte) netip.Addr {
	peer = peer.Unmap()
	if ips.header == "" || !ips.IsTrusted(peer) {
		return peer
	}
	if !strings.EqualFold(ips.header, fiber.HeaderXForwardedFor) {
		if len(values) != 1 {
			return peer // absent, or a duplicate the proxy did not write
		}
		if a, err := netip.ParseAddr(string(bytes.TrimSpace(values[0]))); err == nil {
			return a.Unmap()
		}
		return peer
	}
	// Right to left over every X-Forwarded-For line, joined in order.
	client := peer
	for i := len(values) - 1; i >= 0; i-- {
		rest := values[i]
		for len(rest) > 0 {
			var hop []byte
			if j := bytes.LastIndexByte(rest, ','); j >= 0 {
				hop, rest = rest[j+1:], rest[:j]
			} else {
				hop, rest = rest, nil
			}
			a, err := netip.ParseAddr(string(bytes.TrimSpace(hop)))
			if err != nil {
				return client
			}
			client = a.Unmap()
			if !ips.IsTrusted(client) {
				return client
			}
		}
	}
	return client
}

// TrustsProxies reports whether any proxy is trusted: without one, every
// request's client is the socket's peer.
func (ips ClientIPs) TrustsProxies() bool { return len(ips.trusted) > 0 }

// Header is where the trusted proxies put the client ("": nowhere).
func (ips ClientIPs) Header() string { return ips.header }

// Of is the request's client address.
func (ips ClientIPs) Of(c *fiber.Ctx) netip.Addr {
	peer, _ := netip.AddrFromSlice(c.Context().RemoteIP())
	var values [][]byte
	if ips.header != "" {
		values = c.Request().Header.PeekAll(ips.header)
	}
	return ips.Resolve(peer, values)
}
