package main

import (
	"fmt"
	"net"
	"net/url"
	"strings"

	"usher/internal/config"
)

// loadCORSOrigins reads which pages may open streams: the origins listed
// in USHER_NOTIFIER_CORS_ORIGINS ("*": any), or by default the gateway's,
// where the waiting-room page is served — the origin of
// USHER_GATEWAY_PUBLIC_URL when it is set, else, for development, the
// gateway's address (USHER_GATEWAY_ADDR, as http://127.0.0.1:<port> and
// http://localhost:<port>, plus the address itself when it names one
// host). A page of any other origin gets no CORS headers, so a browser
// keeps its scripts from reading the stream.
func loadCORSOrigins(env *config.Env) []string {
	if listed := env.List("USHER_NOTIFIER_CORS_ORIGINS", ""); len(listed) > 0 {
		for _, o := range listed {
			if o != "*" {
				if _, err := origin(o); err != nil {
					env.Check(fmt.Errorf("USHER_NOTIFIER_CORS_ORIGINS: %w", err))
				}
			}
		}
		return listed
	}
	if pub := env.String("USHER_GATEWAY_PUBLIC_URL", ""); pub != "" {
		o, err := origin(pub)
		if err != nil {
			env.Check(fmt.Errorf("USHER_GATEWAY_PUBLIC_URL: %w", err))
			return nil
		}
		return []string{o}
	}
	gw := env.String("USHER_GATEWAY_ADDR", "127.0.0.1:8080")
	host, port, err := net.SplitHostPort(gw)
	if err != nil {
		env.Check(fmt.Errorf("USHER_GATEWAY_ADDR=%q: want host:port", gw))
		return nil
	}
	out := []string{"http://127.0.0.1:" + port, "http://localhost:" + port}
	if ip := net.ParseIP(host); host != "" && host != "localhost" && (ip == nil || !ip.IsLoopback() && !ip.IsUnspecified()) {
		out = append(out, "http://"+net.JoinHostPort(host, port))
	}
	return out
}

// origin returns u's origin (scheme://host[:port]), refusing what is not
// an http(s) URL or carries more than an origin's path.
func origin(u string) (string, error) {
	p, err := url.Parse(u)
	if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" || p.User != nil {
		return "", fmt.Errorf("%q is not an origin: want scheme://host[:port], such as https://shop.example", u)
	}
	if p.Path != "" && p.Path != "/" {
		return "", fmt.Errorf("%q is not an origin: it has a path (want scheme://host[:port])", u)
	}
	return strings.ToLower(p.Scheme + "://" + p.Host), nil
}

// unsafeCORS refuses "any origin" on a notifier others can connect to: a
// page of any site could then read a stream from a visitor's browser,
// entry token included, given its ticket. On loopback it is a developer's
// choice.
func unsafeCORS(addr string, origins []string) error {
	for _, o := range origins {
		if o == "*" && !config.IsLoopback(addr) {
			return fmt.Errorf("USHER_NOTIFIER_CORS_ORIGINS=* lets pages of any site read shoppers' streams, and the notifier listens on %s: "+
				"list the origins of the pages that open streams (e.g. https://shop.example), or unset it to allow the gateway's "+
				"(USHER_GATEWAY_PUBLIC_URL)", addr)
		}
	}
	return nil
}
