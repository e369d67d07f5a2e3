package main

import (
	"bytes"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"
)

// clientIPs decides which address a request comes from. Without trusted
// proxies it is the socket's peer. Behind them, header names where they put
// the client: X-Forwarded-For is read from the right, skipping trusted
// hops, so whatever a client writes into the header itself is never
// believed; any other header (CF-Connecting-IP, X-Real-IP) holds one
// address that the trusted proxy sets.
type clientIPs struct {
	trusted []netip.Prefix
	header  string
}

// parseClientIPs reads USHER_TRUSTED_PROXIES (CIDRs or single addresses)
// and USHER_CLIENT_IP_HEADER (default X-Forwarded-For once proxies are
// trusted).
func parseClientIPs(proxies []string, header string) (clientIPs, error) {
	var ips clientIPs
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

func (ips clientIPs) isTrusted(a netip.Addr) bool {
	for _, p := range ips.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// resolve returns the client address of a request from peer whose client
// IP header lines are values. An address that does not parse is never the
// answer: the nearest hop that does is.
func (ips clientIPs) resolve(peer netip.Addr, values [][]byte) netip.Addr {
	peer = peer.Unmap()
	if ips.header == "" || !ips.isTrusted(peer) {
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
			if !ips.isTrusted(client) {
				return client
			}
		}
	}
	return client
}

// clientIP is the request's client address.
func (a *api) clientIP(c *fiber.Ctx) netip.Addr {
	peer, _ := netip.AddrFromSlice(c.Context().RemoteIP())
	var values [][]byte
	if a.ips.header != "" {
		values = c.Request().Header.PeekAll(a.ips.header)
	}
	return a.ips.resolve(peer, values)
}
