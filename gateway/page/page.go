// Package page is the waiting room as a web page: one HTML template, a
// stylesheet and a script (web/), in the shopper's language (lang.go). The
// same template serves the page page.js drives and, without JavaScript,
// the answers to its forms (form.go), which run the JSON API's own
// handlers.
package page

import (
	"bytes"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"html/template"
	"log/slog"
	"net/url"
	"path"
	"slices"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"

	"usher/gateway/httpapi"
	"usher/internal/catalog"
	"usher/internal/problem"
)

// The page is one HTML template, a stylesheet and a script, embedded so
// the binary serves them with no build step and no files to deploy.
//
//go:embed web/page.html web/page.css web/page.js web/pow.js
var web embed.FS

var pageTemplate = template.Must(template.ParseFS(web, "web/page.html"))

// Queues finds a queue's configuration: the catalog.
type Queues interface {
	Get(name string) (catalog.Config, bool)
}

// Users says whether any client may name its user (package userauth):
// only then does a form name its shopper in a field.
type Users interface {
	AnyClientNamesUser() bool
}

// Deps are what the page is built from.
type Deps struct {
	Queues Queues
	Langs  *Langs // the page's languages; nil: the shipped ones
	CSSURL string // a shop's stylesheet, loaded after the page's own
	Users  Users
	// Join, Poll and Order are the JSON API's handlers, which the forms
	// run on their own requests (form.go).
	Join, Poll, Order fiber.Handler
	Now               func() time.Time
	Log               *slog.Logger
}

// Page serves the waiting room. It is safe for concurrent use.
type Page struct {
	queues            Queues
	langs             *Langs
	cssURL            string
	users             Users
	join, poll, order fiber.Handler
	now               func() time.Time
	log               *slog.Logger
}

// New returns the waiting-room page of deps.
func New(deps Deps) *Page {
	p := &Page{queues: deps.Queues, langs: deps.Langs, cssURL: deps.CSSURL, users: deps.Users,
		join: deps.Join, poll: deps.Poll, order: deps.Order, now: deps.Now, log: deps.Log}
	if p.langs == nil {
		p.langs = ShippedLangs()
	}
	return p
}

// pageData fills the page template.
type pageData struct {
	Queue string
	// SKU is what the order form orders: ?sku=, else the queue's one SKU.
	// On a queue that sells Variants (skus) it is the one chosen, if any:
	// ?sku= or the form's, when it is one of them; the READY shopper
	// chooses in the form.
	SKU      string
	Variants []string
	// Sells: the queue sells its SKUs through usher's orders, so READY
	// offers the order form. A queue with neither sku nor skus sells
	// nothing here: its entry token is for the shop's own checkout.
	Sells bool
	// Stocked: READY in a stock-aware queue whose stock the line knows,
	// with Left the SKUs that have units left (skusAvailable). The form
	// shows a variant not among them sold out and cannot choose it; with
	// none left the page says so instead (see NothingLeft).
	Stocked bool
	Left    []string
	CSSURL  string // a shop's own stylesheet, loaded after ours

	L      *Lang
	Lang   string         // <html lang>
	Script pageScriptData // what page.js reads: the language's texts
	Title  string
	// Heading is the h1: "You are in line for…"; JoinHeading is the h1
	// without JavaScript before joining.
	Heading, JoinHeading template.HTML

	// Status is the root's data-status: LOADING for page.js to start
	// from, or the state a form's answer shows.
	Status string
	// Section is the section shown: join (only without JavaScript: page.js
	// joins by itself), prequeue, waiting, ready or ended.
	Section string
	// Server: the page answers a form, in the state the gateway read; else
	// it is the page page.js starts from (without JavaScript: the join).
	Server bool

	Action string // where the forms post: this page, with its ?lang= and ?return=
	// Return is where the proxy gate sent the shopper from (?return=): a
	// READY shopper is handed their pass (POST /v1/gate/pass), which sends
	// them back there (page.js does it at once; without JavaScript, a
	// button).
	Return string
	User   string // the user field: only where any client may name itself (see pageUser)
	Ticket string

	NeedsScript bool // the queue asks for a proof of work: joining needs JavaScript

	Position, Ahead, ETA, Stock string
	OpensAtHeading              template.HTML
	OpensIn                     string
	HeldFor                     template.HTML // page.js counts #left down
	HeldUntil                   string
	CheckedAt                   string
	Focus, Ordered              bool // READY: focus the order button; the order went through
	Answer, AnswerClass         string
	EndTitle, EndText           string
	Rejoin                      bool
	RejoinText                  string
	Error                       string
	// WaitingHint tells a shopper without JavaScript how long a check
	// keeps their place (the queue's abandonAfter).
	WaitingHint string
	presence    time.Duration
	// Notice is what the operators tell the line (nil: nothing), shown
	// as a banner; page.js keeps it current from then on.
	Notice *catalog.Notice
}

// NoticeText is the notice's message if it is of level (info or warning;
// any other level shows as info), else "". The template writes it as
// text: a notice is plain text, never markup.
func (d pageData) NoticeText(level string) string {
	if d.Notice == nil {
		return ""
	}
	l := d.Notice.Level
	if l != catalog.NoticeWarning {
		l = catalog.NoticeInfo
	}
	if l != level {
		return ""
	}
	return d.Notice.Message
}

// orderable reports whether the page may order sku: a valid SKU, one of
// the queue's variants when it sells several.
func orderable(variants []string, sku string) bool {
	return catalog.ValidSKU(sku) && (variants == nil || slices.Contains(variants, sku))
}

// Chosen reports whether the order form names its SKU already: always
// on a queue with one SKU, once a variant is chosen on one with several.
func (d pageData) Chosen() bool { return len(d.Variants) == 0 || d.SKU != "" }

// SoldOut reports whether READY knows sku has no units left.
func (d pageData) SoldOut(sku string) bool { return d.Stocked && !slices.Contains(d.Left, sku) }

// Choice is the variant the order form shows chosen: the one chosen,
// unless it sold out.
func (d pageData) Choice() string {
	if d.SoldOut(d.SKU) {
		return ""
	}
	return d.SKU
}

// NothingLeft reports whether READY knows nothing the form could order
// has units left: every variant (or the one SKU) sold out.
func (d pageData) NothingLeft() bool {
	if !d.Sells || !d.Stocked {
		return false
	}
	if len(d.Variants) == 0 {
		return d.SoldOut(d.SKU)
	}
	return !slices.ContainsFunc(d.Variants, func(v string) bool { return !d.SoldOut(v) })
}

// FocusOn is what READY focuses: the order button once the order names
// its SKU, else the variant's choice; the heading when there is no order
// to place (a queue that sells nothing here, or nothing left). "" when
// nothing takes the focus.
func (d pageData) FocusOn() string {
	switch {
	case !d.Focus:
		return ""
	case !d.Sells || d.NothingLeft():
		return "heading"
	case len(d.Variants) > 0 && d.Choice() == "":
		return "variant"
	}
	return "order"
}

// Show is the visibility of a section: shown when it is the page's; the
// waiting section is also what page.js shows while it joins, so on the
// page it starts from it is hidden only without JavaScript.
func (d pageData) Show(section string) template.HTMLAttr {
	switch {
	case d.Section == section:
		return ""
	case !d.Server && section == "waiting":
		return `class="js-only"`
	}
	return "hidden"
}

// newPageData is the page of queue cfg in language l, before any state.
func (p *Page) newPageData(c *fiber.Ctx, cfg catalog.Config, l *Lang) pageData {
	sku := cfg.SKU
	if len(cfg.SKUs) == 1 {
		sku = cfg.SKUs[0]
	}
	var variants []string
	if len(cfg.SKUs) > 1 {
		variants, sku = cfg.SKUs, ""
	}
	if s := c.Query("sku"); orderable(variants, s) {
		sku = s // page.js orders ?sku= too
	}
	if sku == "" && variants == nil {
		sku = cfg.Name
	}
	queue := template.HTML(`<span class="queue">` + template.HTMLEscapeString(cfg.Name) + `</span>`)
	action := "/q/" + cfg.Name
	keep := url.Values{}
	if q := c.Query("lang"); q != "" && len(q) <= maxLangInput {
		keep.Set("lang", q)
	}
	ret := c.Query("return")
	if len(ret) > maxReturnInput {
		ret = ""
	}
	if ret != "" {
		keep.Set("return", ret)
	}
	if len(keep) > 0 {
		action += "?" + keep.Encode()
	}
	d := pageData{
		Queue: cfg.Name, SKU: sku, Variants: variants, Sells: len(cfg.Products()) > 0, CSSURL: p.cssURL,
		L: l, Lang: l.code, Script: l.script(),
		Title:       l.T("page.title", "queue", cfg.Name),
		Heading:     l.HTML("page.heading", map[string]template.HTML{"queue": queue}),
		JoinHeading: l.HTML("page.headingJoin", map[string]template.HTML{"queue": queue}),
		Status:      "LOADING",
		Section:     "join",
		Action:      action,
		Return:      ret,
		HeldFor:     l.HTML("ready.heldFor", map[string]template.HTML{"left": `<span id="left" class="num">–</span>`}),
		presence:    cfg.AbandonAfter(),
		Notice:      cfg.Notice,
	}
	d.OpensAtHeading = l.HTML("prequeue.opensAt", map[string]template.HTML{"time": `<time id="opens-at"></time>`})
	if p.users.AnyClientNamesUser() {
		d.User = c.Query("user")
		if !catalog.ValidUser(d.User) {
			d.User = randomUser()
		}
	}
	return d
}

// maxReturnInput bounds the ?return= a page carries on: the gate's pass
// takes no longer one.
const maxReturnInput = 4096

// Show serves the waiting room of a queue: GET /q/{queue}.
func (p *Page) Show(c *fiber.Ctx) error {
	cfg, err := httpapi.Queue(c, p.queues)
	if err != nil {
		return err
	}
	l := p.lang(c)
	d := p.newPageData(c, cfg, l)
	d.NeedsScript = needsScript(cfg)
	return render(c, fiber.StatusOK, d)
}

// render writes the page. Nothing in it may be stored or passed on:
// answers to forms carry the shopper's ticket.
func render(c *fiber.Ctx, status int, d pageData) error {
	var b bytes.Buffer
	if err := pageTemplate.Execute(&b, d); err != nil {
		return err
	}
	c.Set(fiber.HeaderContentType, fiber.MIMETextHTMLCharsetUTF8)
	c.Set(fiber.HeaderCacheControl, "no-store")
	c.Set(fiber.HeaderVary, "Accept-Language")
	c.Set(fiber.HeaderReferrerPolicy, "no-referrer")
	c.Set("X-Content-Type-Options", "nosniff")
	return c.Status(status).Send(b.Bytes())
}

// lang is the page's language for this request (?lang=, then
// Accept-Language, then English).
func (p *Page) lang(c *fiber.Ctx) *Lang {
	return p.langs.negotiate(c.Query("lang"), c.Get(fiber.HeaderAcceptLanguage))
}

// ShippedLangs are the languages usher ships, read once.
func ShippedLangs() *Langs { return shippedLangs() }

var shippedLangs = sync.OnceValue(func() *Langs {
	p, err := LoadLangs(nil)
	if err != nil {
		panic(err) // the shipped catalogs are checked by TestShippedCatalogsAreComplete
	}
	return p
})

// randomUser is an id for a shopper the page knows nothing of, as page.js
// makes one up.
func randomUser() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "web-" + hex.EncodeToString(b)
}

// pageAssets maps the page's static files to their content types.
var pageAssets = map[string]string{
	"page.css": "text/css; charset=utf-8",
	"page.js":  "text/javascript; charset=utf-8",
	"pow.js":   "text/javascript; charset=utf-8", // the proof-of-work solver, for apps too
}

// Asset serves the page's stylesheet and scripts: GET /q/static/{file}.
func (p *Page) Asset(c *fiber.Ctx) error {
	name := path.Base(httpapi.PathParam(c, "file"))
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
