package main

import (
	"bytes"
	"embed"
	"html/template"
	"path"

	"github.com/gofiber/fiber/v2"

	"usher/shared/problem"
)

// The waiting-room page: one HTML template, a stylesheet and a script,
// embedded so the binary serves them with no build step and no files to
// deploy.
//
//go:embed web/page.html web/page.css web/page.js web/pow.js
var web embed.FS

var pageTemplate = template.Must(template.ParseFS(web, "web/page.html"))

// pageData fills the page template.
type pageData struct {
	Queue  string
	SKU    string
	CSSURL string // a shop's own stylesheet, loaded after ours
}

// page serves the waiting room of a queue: GET /q/{queue}.
func (a *api) page(c *fiber.Ctx) error {
	cfg, err := a.queue(c)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	if err := pageTemplate.Execute(&b, pageData{Queue: cfg.Name, SKU: cfg.SKU, CSSURL: a.pageCSS}); err != nil {
		return err
	}
	c.Set(fiber.HeaderContentType, fiber.MIMETextHTMLCharsetUTF8)
	c.Set(fiber.HeaderCacheControl, "no-store")
	c.Set("X-Content-Type-Options", "nosniff")
	return c.Send(b.Bytes())
}

// pageAssets maps the page's static files to their content types.
var pageAssets = map[string]string{
	"page.css": "text/css; charset=utf-8",
	"page.js":  "text/javascript; charset=utf-8",
	"pow.js":   "text/javascript; charset=utf-8", // the proof-of-work solver, for apps too
}

// asset serves the page's stylesheet and script: GET /q/static/{file}.
func (a *api) asset(c *fiber.Ctx) error {
	name := path.Base(c.Params("file"))
	typ, ok := pageAssets[name]
	if !ok {
		return problem.New(fiber.StatusNotFound, "not-found", "no such file")
	}
	b, err := web.ReadFile("web/" + name)
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderContentType, typ)
	c.Set(fiber.HeaderCacheControl, "public, max-age=300")
	return c.Send(b)
}
