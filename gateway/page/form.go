package page

import (
	"encoding/json"
	"errors"
	"html/template"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"usher/gateway/httpapi"
	"usher/gateway/lineapi"
	"usher/gateway/orderapi"
	"usher/gateway/userauth"
	"usher/internal/catalog"
	"usher/internal/problem"
	"usher/internal/waitqueue"
)

// The waiting room without JavaScript. The page's forms post to POST
// /q/{queue} with an action — join, check (my place) or order — and the
// gateway answers with the page in the state it read: no auto-refresh
// (WCAG 2.2.1), a button to look again instead.
//
// Each action runs the JSON API's own handler on the request (join, poll,
// placeOrder) and renders what it answered, so the page and the API can
// never tell a shopper different things, and every check of the API —
// who the shopper is, rate limits, the ticket's signature, the entry
// token — applies unchanged. The ticket travels in a hidden field of
// POST forms, never in a URL (which Referer headers and access logs
// carry); the entry token never reaches the page at all: an order mints
// it from the ticket on the gateway, as a poll would hand it to page.js.

// Form actions.
const (
	formJoin  = "join"
	formCheck = "check"
	formOrder = "order"
)

// Form answers a form of the page: POST /q/{queue}.
func (p *Page) Form(c *fiber.Ctx) error {
	cfg, err := httpapi.Queue(c, p.queues)
	if err != nil {
		return err
	}
	if err := sameOrigin(c); err != nil {
		return err
	}
	// Every field is read before a handler below replaces the body.
	action := c.FormValue("action")
	tkt := strings.Clone(c.FormValue("ticket"))
	sku := strings.Clone(c.FormValue("sku"))
	formUser := strings.Clone(c.FormValue("user"))

	l := p.lang(c)
	d := p.newPageData(c, cfg, l)
	d.Server = true
	if orderable(d.Variants, sku) {
		d.SKU = sku // the form's: the variant chosen, kept from form to form
	}
	if p.users.AnyClientNamesUser() {
		if catalog.ValidUser(formUser) {
			d.User = formUser // the same shopper from form to form
		}
		if c.Get(userauth.HeaderUserID) == "" && d.User != "" {
			// What page.js does: it names its user in X-User-Id, which
			// this gateway believes from anyone (see Users).
			c.Request().Header.Set(userauth.HeaderUserID, d.User)
		}
	}
	switch action {
	case formJoin:
		return p.formJoin(c, cfg, d)
	case formCheck:
		if tkt == "" {
			return p.formProblem(c, d, problem.New(fiber.StatusUnauthorized, "invalid-ticket", "the form carries no ticket"))
		}
		return p.formCheck(c, d, tkt)
	case formOrder:
		if tkt == "" {
			return p.formProblem(c, d, problem.New(fiber.StatusUnauthorized, "invalid-ticket", "the form carries no ticket"))
		}
		return p.formOrder(c, d, tkt)
	}
	return problem.New(fiber.StatusBadRequest, "invalid-form", "action must be join, check or order")
}

// formJoin joins the line as POST /v1/queues/{q}/tickets does.
func (p *Page) formJoin(c *fiber.Ctx, cfg catalog.Config, d pageData) error {
	if needsScript(cfg) {
		// A proof of work needs the page's script; a join without one
		// would only count as a failed proof against this address.
		d.Section, d.NeedsScript, d.Status = "join", true, "JOIN"
		return render(c, fiber.StatusOK, d)
	}
	pl, err := placeFrom(c, p.join)
	if err != nil {
		return p.formProblem(c, d, err)
	}
	return render(c, fiber.StatusOK, p.withPlace(d, pl))
}

// formCheck reads the shopper's place as GET /v1/queues/{q}/tickets/{t}
// does.
func (p *Page) formCheck(c *fiber.Ctx, d pageData, tkt string) error {
	d.Ticket = tkt
	lineapi.WithTicket(c, tkt)
	pl, err := placeFrom(c, p.poll)
	if err != nil {
		return p.formProblem(c, d, err)
	}
	return render(c, fiber.StatusOK, p.withPlace(d, pl))
}

// formOrder orders with the entry token the shopper's READY ticket holds,
// as POST /v1/orders does: the gateway reads the token as a poll would
// hand it to page.js, then places the order with it, for the user this
// request authenticates as.
func (p *Page) formOrder(c *fiber.Ctx, d pageData, tkt string) error {
	d.Ticket = tkt
	lineapi.WithTicket(c, tkt)
	pl, err := placeFrom(c, p.poll)
	if err != nil {
		return p.formProblem(c, d, err)
	}
	d = p.withPlace(d, pl)
	if pl.Status != "READY" || pl.Token == "" {
		return render(c, fiber.StatusOK, d) // it ended meanwhile: say how
	}
	if !d.Chosen() {
		// A browser that let the form go without its required choice:
		// the choice keeps the focus, and says what it wants.
		d.Answer, d.AnswerClass = d.L.T("ready.variantChoose"), "bad"
		return render(c, fiber.StatusOK, d)
	}
	// POST /v1/orders's request, for its handler; the form's is put back
	// after, for whatever reads the request once it is answered.
	req := &c.Request().Header
	form, formType := slices.Clone(c.Body()), string(req.ContentType())
	body, _ := json.Marshal(orderapi.Body{SKU: d.SKU, Quantity: new(1)})
	req.Set(fiber.HeaderAuthorization, "Bearer "+pl.Token)
	req.SetContentType(fiber.MIMEApplicationJSON)
	c.Request().SetBody(body)
	status, raw, err := subcall(c, p.order)
	req.Del(fiber.HeaderAuthorization)
	req.SetContentType(formType)
	c.Request().SetBody(form)
	var view orderapi.View
	if err == nil && (status < 200 || status > 299 || json.Unmarshal(raw, &view) != nil) {
		err = errors.New("order answered " + strconv.Itoa(status))
	}
	d.Focus = false // the answer is read out from its live region
	if err != nil {
		d.Answer, d.AnswerClass = d.L.problemText(problemType(err)), "bad"
		return render(c, fiber.StatusOK, d)
	}
	d.Answer, d.AnswerClass, d.Ordered = d.L.orderAnswer(view), "ok", true
	return render(c, fiber.StatusOK, d)
}

// placeFrom runs an API handler that answers a shopper's place (join,
// poll) on this request and decodes the answer.
func placeFrom(c *fiber.Ctx, h fiber.Handler) (lineapi.Place, error) {
	var p lineapi.Place
	status, raw, err := subcall(c, h)
	if err != nil {
		return p, err
	}
	if status < 200 || status > 299 || json.Unmarshal(raw, &p) != nil {
		return p, errors.New("place answered " + strconv.Itoa(status))
	}
	return p, nil
}

// subcall runs handler h of the JSON API on this request and takes back
// what it wrote, leaving the response to the page.
func subcall(c *fiber.Ctx, h fiber.Handler) (int, []byte, error) {
	err := h(c)
	res := c.Response()
	status, body := res.StatusCode(), slices.Clone(res.Body())
	res.ResetBody()
	res.Header.Del(fiber.HeaderLocation) // it names the ticket
	res.SetStatusCode(fiber.StatusOK)
	return status, body, err
}

// withPlace shows place p: what page.js shows for the same answer, with
// times in UTC and a button to check again.
func (p *Page) withPlace(d pageData, pl lineapi.Place) pageData {
	l, now := d.L, p.now()
	d.Ticket, d.Status, d.Notice = pl.Ticket, pl.Status, pl.Notice
	d.CheckedAt = l.T("check.checkedAt", "time", l.clock(now))
	title := ""
	switch pl.Status {
	case "PRE_QUEUE":
		d.Section = "prequeue"
		if pl.OpensAt != nil {
			at := template.HTML(`<time id="opens-at" datetime="` + template.HTMLEscapeString(pl.OpensAt.UTC().Format(time.RFC3339)) + `">` +
				template.HTMLEscapeString(l.dateTime(*pl.OpensAt)) + `</time>`)
			d.OpensAtHeading = l.HTML("prequeue.opensAt", map[string]template.HTML{"time": at})
			if left := pl.OpensAt.Sub(now).Round(time.Second); left > 0 {
				d.OpensIn = l.duration(int64(left / time.Second))
			} else {
				d.OpensIn = l.T("prequeue.drawing")
			}
			title = l.T("prequeue.opensIn") + " " + d.OpensIn
		}
	case "WAITING":
		d.Section = "waiting"
		if pl.Position > 0 {
			d.Position, d.Ahead = l.number(pl.Position), l.number(max(pl.Position-1, 0))
			title = l.T("title.place", "position", d.Position)
		}
		d.ETA = l.T("waiting.etaUnknown")
		if pl.ETASeconds != nil {
			d.ETA = l.duration(*pl.ETASeconds)
		}
		d.Stock = l.stockText(pl.Stock, pl.SKUs)
		// A place nobody checks on for abandonAfter is given up: without
		// JavaScript, only the shopper's checks say they are there.
		d.WaitingHint = l.T("waiting.hintStatic")
		if d.presence > 0 {
			d.WaitingHint = l.T("waiting.hintPresence", "every", l.minutes(d.presence))
		}
	case "READY":
		d.Section, d.Focus = "ready", true
		d.Stocked, d.Left = pl.Stock != "", pl.SKUs
		title = l.T("ready.heading")
		if pl.ExpiresAt != nil {
			left := l.duration(int64(max(pl.ExpiresAt.Sub(now), 0) / time.Second))
			d.HeldUntil = l.T("ready.heldUntil", "time", l.clock(*pl.ExpiresAt), "left", left)
		}
	default:
		d = endedAs(d, pl.Status, pl.Reason)
		title = d.EndTitle
	}
	if title != "" {
		d.Title = title + " · " + d.Title
	}
	return d
}

// endedAs shows an ended state as page.js's end() does; without
// JavaScript a shopper in maintenance gets a button to try again, since
// nothing tries by itself.
func endedAs(d pageData, status, reason string) pageData {
	l := d.L
	d.Section, d.Status = "ended", status
	d.EndTitle = l.T("ended." + status + ".title")
	switch status {
	case "CLOSED":
		switch reason {
		case catalog.ReasonSoldOut, catalog.ReasonEnded:
			d.EndText = l.T("ended.CLOSED." + reason)
		default:
			d.EndText = l.T("ended.CLOSED.other")
		}
	case "MAINTENANCE":
		d.EndText, d.Rejoin, d.RejoinText = l.T("ended.MAINTENANCE.textStatic"), true, l.T("ended.retry")
	case "EXPIRED", "USED", "LEFT":
		d.EndText = l.T("ended." + status + ".text")
		if status == "LEFT" && reason == waitqueue.ReasonAbandoned {
			d.EndText = l.T("ended.LEFT.abandoned")
		}
		d.Rejoin = status != "USED"
	default:
		d.EndTitle, d.EndText = "", ""
	}
	return d
}

// formProblem shows what went wrong: a closed, ended or resting queue as
// page.js shows it, a ticket the gateway cannot use as the join it leads
// back to, anything else as an error beside a button to try again.
func (p *Page) formProblem(c *fiber.Ctx, d pageData, err error) error {
	var prob problem.Problem
	var un httpapi.UnavailableError
	switch {
	case errors.As(err, &un):
		p.log.Warn("page form failed: dependency unavailable", "err", un.Cause)
		prob = un.Problem
	case errors.As(err, &prob):
	default:
		p.log.Error("page form failed", "err", err)
		prob = problem.New(fiber.StatusInternalServerError, "internal", "")
	}
	if prob.RetryAfter > 0 {
		c.Set(fiber.HeaderRetryAfter, strconv.Itoa(prob.RetryAfter))
	}
	typ := problemType(prob)
	switch typ {
	case "queue-closed", "queue-ended":
		reason := catalog.ReasonEnded
		if cfg, ok := p.queues.Get(d.Queue); ok && typ == "queue-closed" {
			reason = closedReasonOf(cfg)
		}
		d = endedAs(d, "CLOSED", reason)
		return render(c, fiber.StatusOK, d)
	case "maintenance":
		d = endedAs(d, "MAINTENANCE", "")
		return render(c, prob.Status, d)
	case "invalid-ticket", "ticket-not-found", "ticket-stale", "invalid-token":
		d.Ticket, d.Section, d.Status = "", "join", "JOIN"
	default:
		// The place is unknown for now: keep the ticket, offer to look
		// again (or to join, if there was none).
		d.Status = "ERROR"
		if d.Ticket != "" {
			d.Section = "waiting"
		} else {
			d.Section = "join"
		}
	}
	d.Error = d.L.problemText(typ)
	d.Title = d.Error + " · " + d.Title
	return render(c, prob.Status, d)
}

// closedReasonOf is why a closed queue turns shoppers away.
func closedReasonOf(cfg catalog.Config) string {
	if cfg.ClosedReason != "" {
		return cfg.ClosedReason
	}
	return "closed"
}

// problemType is the slug of err's problem type ("" for another error).
func problemType(err error) string {
	var p problem.Problem
	if !errors.As(err, &p) {
		return ""
	}
	t := p.Type
	if i := strings.LastIndexByte(t, '/'); i >= 0 {
		t = t[i+1:]
	}
	return t
}

// needsScript reports whether joining queue cfg takes a proof of work.
func needsScript(cfg catalog.Config) bool {
	return cfg.Challenge.On() && cfg.Challenge.Mode == catalog.ChallengeEnforce
}

// sameOrigin refuses a form posted from another site. The JSON API needs
// no such check — its requests carry X-User-Id or X-User-Token, which no
// cross-site form can send — but the shop's proxy adds those to a form's
// post too.
func sameOrigin(c *fiber.Ctx) error {
	refuse := problem.New(fiber.StatusForbidden, "cross-site-form", "the waiting room's forms are answered only when posted from its own page")
	switch c.Get("Sec-Fetch-Site") {
	case "same-origin", "none":
		return nil
	case "":
		// An older browser: judge by Origin when it sends one (a page
		// with no-referrer sends "null").
		o := c.Get(fiber.HeaderOrigin)
		if o == "" || o == "null" {
			return nil
		}
		if u, err := url.Parse(o); err == nil && strings.EqualFold(u.Host, string(c.Request().Host())) {
			return nil
		}
	}
	return refuse
}

// stockText is what page.js's showStock says of a queue's stock.
func (l *Lang) stockText(stock string, skus []string) string {
	switch stock {
	case "available":
		if len(skus) > 1 {
			return l.T("stock.available", "skus", strings.Join(skus, ", "))
		}
	case "held":
		return l.T("stock.held")
	case "sold_out":
		return l.T("stock.soldOut")
	}
	return ""
}

// orderAnswer is what page.js says of an order's answer.
func (l *Lang) orderAnswer(v orderapi.View) string {
	status := v.Status
	if l.has("order.status." + status) {
		status = l.T("order.status." + status)
	}
	if v.Reason == "" {
		return l.T("order.answer", "id", v.OrderID, "status", status)
	}
	reason := v.Reason
	if l.has("order.reason." + reason) {
		reason = l.T("order.reason." + reason)
	}
	return l.T("order.answerReason", "id", v.OrderID, "status", status, "reason", reason)
}
