package gate

import (
	"net/netip"
	"net/url"
	"path"
	"strings"

	"github.com/gofiber/fiber/v2"

	"usher/internal/problem"
)

// The headers the proxies describe the original request with: Caddy's and
// Traefik's X-Forwarded-*, nginx's X-Original-* (which the documented
// snippet sets).
const (
	hForwardedMethod = "X-Forwarded-Method"
	hForwardedURI    = "X-Forwarded-Uri"
	hForwardedHost   = "X-Forwarded-Host"
	hForwardedProto  = "X-Forwarded-Proto"
	hOriginalMethod  = "X-Original-Method"
	hOriginalURI     = "X-Original-URI"
)

// maxURILen bounds the original URI looked at.
const maxURILen = 8192

// original is the request a proxy asks the gate about.
type original struct {
	method   string
	proto    string // http or https
	host     string // lower case, without the port
	hostport string // as the client wrote it, for the return URL
	uri      string // path and query as the client sent them
	path     string // decoded and cleaned: what rules match
	client   netip.Addr
}

// url is the original request's URL, where a pass sends the shopper back.
func (o original) url() string { return o.proto + "://" + o.hostport + o.uri }

// navigation reports whether the original request is a page the browser
// navigates to: a GET or HEAD that accepts HTML, or says it navigates.
func navigation(c *fiber.Ctx, method string) bool {
	if method != fiber.MethodGet && method != fiber.MethodHead {
		return false
	}
	return c.Get("Sec-Fetch-Mode") == "navigate" || strings.Contains(c.Get(fiber.HeaderAccept), "text/html")
}

// originalOf reads the original request from the proxy's headers; uri is
// Envoy's (the path after the gate's prefix, with the query), else "".
func originalOf(c *fiber.Ctx, envoyURI string, client netip.Addr) (original, error) {
	o := original{client: client}
	o.method = first(c.Get(hForwardedMethod), c.Get(hOriginalMethod))
	o.uri = first(c.Get(hForwardedURI), c.Get(hOriginalURI))
	if envoyURI != "" {
		o.method, o.uri = first(o.method, c.Method()), first(o.uri, envoyURI)
	}
	o.method = strings.ToUpper(first(o.method, fiber.MethodGet))
	o.hostport = first(c.Get(hForwardedHost), c.Get(fiber.HeaderHost))
	o.proto = strings.ToLower(first(c.Get(hForwardedProto), "http"))
	if o.proto != "http" && o.proto != "https" {
		return o, badOriginal("X-Forwarded-Proto must be http or https")
	}
	if o.uri == "" || len(o.uri) > maxURILen || !strings.HasPrefix(o.uri, "/") || strings.HasPrefix(o.uri, "//") {
		return o, badOriginal("the original URI (X-Forwarded-Uri or X-Original-URI) must be a path from the root, at most 8 KiB")
	}
	u, err := url.ParseRequestURI(o.uri)
	if err != nil {
		return o, badOriginal("the original URI does not parse")
	}
	o.path = path.Clean(u.Path)
	if strings.HasSuffix(u.Path, "/") && o.path != "/" {
		o.path += "/"
	}
	h, err := url.Parse("http://" + o.hostport)
	if err != nil || o.hostport == "" || h.Host != o.hostport || h.User != nil || !validHost(strings.ToLower(h.Hostname())) {
		return o, badOriginal("the original host (X-Forwarded-Host or Host) must be a host name")
	}
	o.host = strings.ToLower(h.Hostname())
	return o, nil
}

func badOriginal(detail string) error {
	return problem.New(fiber.StatusBadRequest, "invalid-original-request", detail)
}

func first(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// match is the first rule that protects o, nil when none does.
func match(rules []Rule, o original) *Rule {
	for i := range rules {
		r := &rules[i]
		if r.Host != "" && r.Host != o.host {
			continue
		}
		if hasPrefix(o.path, r.Paths) || (r.CompletePath != "" && o.path == r.CompletePath) {
			return r
		}
	}
	return nil
}

// hasPrefix reports whether p starts with one of prefixes.
func hasPrefix(p string, prefixes []string) bool {
	for _, pre := range prefixes {
		if strings.HasPrefix(p, pre) {
			return true
		}
	}
	return false
}
