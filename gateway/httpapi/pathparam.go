package httpapi

import (
	"net/url"
	"strings"

	"github.com/gofiber/fiber/v2"
)

// PathParam is the route's parameter key, percent-decoded. RFC 3986 makes
// a percent-encoded unreserved character the character itself (§2.3,
// §6.2.2.2), and a browser or an HTTP library may encode one: %64emo is
// the queue demo. Queue names, tickets, SKUs and order ids are made of
// unreserved characters only, so a real one decodes to itself; what
// decodes to anything else (a slash, a NUL, a dot-dot) names nothing and
// is refused as any unknown name is. A segment that does not decode (a
// stray %) is returned as sent: no name holds a %. Fiber's UnescapePath
// is not used: it decodes the whole path before routing, so %2F would
// split a segment, and it reads + as a space, which a path does not.
//
// As c.Params, the value may be the request's memory: copy what outlives
// the request.
func PathParam(c *fiber.Ctx, key string) string {
	v := c.Params(key)
	if strings.IndexByte(v, '%') < 0 {
		return v
	}
	if d, err := url.PathUnescape(v); err == nil {
		return d
	}
	return v
}
