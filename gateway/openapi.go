package main

import (
	"github.com/gofiber/fiber/v2"

	apidoc "usher/api"
)

// openAPI serves the OpenAPI 3.1 document of the gateway and the notifier
// (api/openapi.yaml, as JSON): GET /openapi.json. The gateway serves the
// whole contract, the notifier's stream included (its path names the
// notifier as its server); the notifier serves none.
func (a *api) openAPI(c *fiber.Ctx) error {
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	c.Set(fiber.HeaderCacheControl, "public, max-age=300")
	return c.Send(apidoc.JSON())
}
