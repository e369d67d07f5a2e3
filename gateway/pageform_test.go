package main

import (
	"context"
	"fmt"
	"html"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"usher/gateway/httpapi"
	"usher/gateway/page"
	"usher/gateway/userauth"
	"usher/internal/orders"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
)

// postForm posts the page's form fields as a browser does (same origin).
func (h *harness) postForm(path string, fields map[string]string, header map[string]string) response {
	h.t.Helper()
	v := url.Values{}
	for k, x := range fields {
		v.Set(k, x)
	}
	hd := map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Sec-Fetch-Site": "same-origin"}
	for k, x := range header {
		hd[k] = x
	}
	return h.do("POST", path, v.Encode(), hd)
}

var (
	formTicketRE = regexp.MustCompile(`name="ticket" value="([^"]*)"`)
	statusRE     = regexp.MustCompile(`data-status="([^"]*)"`)
	positionRE   = regexp.MustCompile(`<span id="position" class="num">([^<]*)</span>`)
	answerRE     = regexp.MustCompile(`<p id="answer" class="[^"]*" aria-live="polite">([^<]*)</p>`)
	errorRE      = regexp.MustCompile(`<p id="error" class="error" role="alert" >([^<]*)</p>`)
)

func match(re *regexp.Regexp, b []byte) string {
	m := re.FindSubmatch(b)
	if m == nil {
		return ""
	}
	return html.UnescapeString(string(m[1]))
}

// The page without JavaScript, in memory: the forms join, check the place
// the JSON API reports, and order once READY; the answers are never
// stored, name no ticket in a URL or a header, and send no Referer.
func TestPageFormFlow(t *testing.T) {
	h := newOrderHarness(t)
	h.join("first")
	h.join("second")
	pagePath := "/q/" + h.queue

	r := h.do("GET", pagePath+"?user=nojs-shopper", "", nil)
	if !strings.Contains(string(r.raw), `<input type="hidden" name="user" value="nojs-shopper">`) {
		t.Fatalf("GET page lacks the user field of ?user=:\n%s", r.raw)
	}
	r = h.postForm(pagePath, map[string]string{"action": "join", "user": "nojs-shopper"}, nil)
	tkt := match(formTicketRE, r.raw)
	if r.status != 200 || match(statusRE, r.raw) != "WAITING" || tkt == "" {
		t.Fatalf("join form = %d status %q ticket %q:\n%s", r.status, match(statusRE, r.raw), tkt, r.raw)
	}
	for k, want := range map[string]string{"Cache-Control": "no-store", "Referrer-Policy": "no-referrer", "Location": "", "Content-Type": "text/html; charset=utf-8"} {
		if got := r.header.Get(k); got != want {
			t.Errorf("join form answer %s = %q, want %q", k, got, want)
		}
	}
	api := h.poll(tkt)
	if pos := match(positionRE, r.raw); pos != "3" || api.num("position") != 3 {
		t.Errorf("page says place %q, the API %d; want 3 for both", pos, api.num("position"))
	}
	if !strings.Contains(string(r.raw), "Each check keeps your place for 5 min: check again before that time is up.") {
		t.Errorf("the page does not say how long a check keeps the place (abandonAfter 300 s):\n%s", r.raw)
	}
	if !strings.Contains(string(r.raw), `<title>Your place: 3 · Waiting room · `+h.queue+`</title>`) {
		t.Errorf("the title does not tell the place:\n%s", r.raw)
	}
	if strings.Contains(string(r.raw), `action="`+pagePath+`?`) || strings.Contains(string(r.raw), `http-equiv="refresh"`) {
		t.Errorf("the form answer refreshes itself or posts to a URL with a query:\n%s", r.raw)
	}
	// Joining again answers the same place (the API's 200).
	if again := h.postForm(pagePath, map[string]string{"action": "join", "user": "nojs-shopper"}, nil); match(formTicketRE, again.raw) != tkt {
		t.Errorf("a second join gave another ticket")
	}

	h.admit() // the three in line: all admitted
	r = h.postForm(pagePath+"?lang=de", map[string]string{"action": "check", "ticket": tkt, "user": "nojs-shopper"}, nil)
	if match(statusRE, r.raw) != "READY" || !strings.Contains(string(r.raw), "Du bist dran") || !strings.Contains(string(r.raw), ` autofocus>Jetzt bestellen</button>`) {
		t.Fatalf("check after admission: want READY in German with the order button focused:\n%s", r.raw)
	}
	if !strings.Contains(string(r.raw), `action="`+pagePath+`?lang=de"`) {
		t.Errorf("the forms do not keep ?lang=de")
	}
	if tok := h.poll(tkt).str("token"); tok == "" || strings.Contains(string(r.raw), tok) {
		t.Errorf("the page carries the entry token (or the API has none)")
	}

	// Another user cannot order with this ticket: the order is the user's.
	r = h.postForm(pagePath, map[string]string{"action": "order", "ticket": tkt, "sku": "sku-1", "user": "mallory"}, nil)
	if a := match(answerRE, r.raw); a != "This turn belongs to someone else." {
		t.Errorf("order by another user: answer %q", a)
	}
	r = h.postForm(pagePath, map[string]string{"action": "order", "ticket": tkt, "sku": "sku-1", "user": "nojs-shopper"}, nil)
	if a := match(answerRE, r.raw); !strings.HasPrefix(a, "Order ord_") || !strings.HasSuffix(a, ": received, now being processed") {
		t.Errorf("order answer = %q:\n%s", a, r.raw)
	}
	if !strings.Contains(string(r.raw), `disabled>Order now</button>`) {
		t.Errorf("the order button is still enabled after the order went through")
	}
}

// A READY shopper of a queue that sells nothing through usher (no sku,
// no skus) gets no order form: the page tells their turn and where to buy
// with it, the shop's own checkout, in the page's language, with the focus
// on that heading. A stale order form posted anyway is refused as the API
// refuses it, and the shopper stays READY.
func TestPageOfAQueueThatSellsNothing(t *testing.T) {
	h := newHarness(t) // its queue: {"targetActive": 5}, no SKU
	h.gw.orders = orders.NewRecords(testenv.Redis(t))
	h.rebuild()
	pagePath := "/q/" + h.queue
	en, de := page.ShippedLangs().ByCode("en"), page.ShippedLangs().ByCode("de")

	if r := h.do("GET", pagePath+"?user=nosku-shopper&sku=sku-1", "", nil); !strings.Contains(string(r.raw), `data-sku=""`) {
		t.Errorf("the page of a queue without SKU names a SKU for page.js to order:\n%s", r.raw)
	}
	r := h.postForm(pagePath, map[string]string{"action": "join", "user": "nosku-shopper"}, nil)
	tkt := match(formTicketRE, r.raw)
	if tkt == "" {
		t.Fatalf("join form = %d:\n%s", r.status, r.raw)
	}
	h.admit()
	for _, l := range []*page.Lang{en, de} {
		r = h.postForm(pagePath+"?lang="+l.Code(), map[string]string{"action": "check", "ticket": tkt, "user": "nosku-shopper"}, nil)
		b := string(r.raw)
		if match(statusRE, r.raw) != "READY" || !strings.Contains(b, l.T("ready.heading")) || !strings.Contains(b, html.EscapeString(l.T("ready.shopCheckout"))) {
			t.Errorf("%s: check after admission: want READY, saying to buy at the shop's checkout:\n%s", l.Code(), b)
		}
		if strings.Contains(b, `id="order-form"`) || strings.Contains(b, `value="order"`) || strings.Contains(b, `name="sku"`) || strings.Contains(b, `id="order"`) {
			t.Errorf("%s: the READY page of a queue without SKU offers an order:\n%s", l.Code(), b)
		}
		if !strings.Contains(b, `<h2 id="ready-title" tabindex="-1" autofocus>`) {
			t.Errorf("%s: the READY heading does not take the focus:\n%s", l.Code(), b)
		}
	}

	// The form of a page from before (or made by hand) orders nothing.
	r = h.postForm(pagePath, map[string]string{"action": "order", "ticket": tkt, "sku": h.queue, "user": "nosku-shopper"}, nil)
	if a := match(answerRE, r.raw); a != en.T("ready.shopCheckout") || match(statusRE, r.raw) != "READY" {
		t.Errorf("order form in a queue without SKU: status %q, answer %q:\n%s", match(statusRE, r.raw), a, r.raw)
	}
	if p := h.poll(tkt); p.str("status") != "READY" {
		t.Errorf("poll after the refused order = %s, want READY", p.raw)
	}
}

// A READY shopper of a queue that sells variants (skus) chooses the one
// to order in the order form, a labelled choice of the queue's SKUs: ?sku=
// comes preselected when it is one of them and goes from form to form,
// else the choice is required and takes the focus. The order names the
// variant chosen and is accepted; a queue with one SKU in skus orders it.
func TestPageOfAQueueThatSellsVariants(t *testing.T) {
	h := newOrderHarness(t)
	h.putQueue(h.queue, `{"targetActive": 5, "skus": ["shoe-41", "shoe-42"], "rateLimit": `+limitsOff+`}`, 200)
	pagePath := "/q/" + h.queue
	en, ja := page.ShippedLangs().ByCode("en"), page.ShippedLangs().ByCode("ja")
	const choice = `<select id="variant" name="sku" required aria-describedby="ready-title"`
	chosenRE := regexp.MustCompile(`<option value="([^"]*)" selected>`)

	r := h.do("GET", pagePath+"?user=shoe-a&sku=shoe-42", "", nil)
	b := string(r.raw)
	if !strings.Contains(b, `<label for="variant">`+en.T("ready.variant")+`</label>`) || !strings.Contains(b, choice) ||
		!strings.Contains(b, `<option value="shoe-41">shoe-41</option>`) || match(chosenRE, r.raw) != "shoe-42" {
		t.Errorf("the page of ?sku=shoe-42 does not offer the variants with shoe-42 chosen:\n%s", b)
	}
	if !strings.Contains(b, `data-sku="shoe-42"`) || !strings.Contains(b, `<input type="hidden" name="sku" value="shoe-42"><input type="hidden" name="action" value="join">`) {
		t.Errorf("page.js or the join form does not get the variant of ?sku=:\n%s", b)
	}
	if strings.Contains(b, `name="sku" value="`+h.queue+`"`) {
		t.Errorf("the page orders the queue's name:\n%s", b)
	}
	r = h.do("GET", pagePath+"?user=shoe-b&sku=sku-1", "", nil) // not one of the queue's
	if got := match(chosenRE, r.raw); got != "" || !strings.Contains(string(r.raw), `data-sku=""`) {
		t.Errorf("?sku=sku-1 chose %q in a queue of shoe-41, shoe-42:\n%s", got, r.raw)
	}

	// Without JavaScript: ?sku= goes from the join to READY.
	a := h.postForm(pagePath, map[string]string{"action": "join", "user": "shoe-a", "sku": "shoe-42"}, nil)
	b2 := h.postForm(pagePath, map[string]string{"action": "join", "user": "shoe-b"}, nil)
	ta, tb := match(formTicketRE, a.raw), match(formTicketRE, b2.raw)
	if ta == "" || tb == "" {
		t.Fatalf("join forms: %s\n%s", a.raw, b2.raw)
	}
	h.admit()
	r = h.postForm(pagePath+"?lang=ja", map[string]string{"action": "check", "ticket": ta, "user": "shoe-a", "sku": "shoe-42"}, nil)
	b = string(r.raw)
	if match(statusRE, r.raw) != "READY" || match(chosenRE, r.raw) != "shoe-42" || !strings.Contains(b, `<label for="variant">`+ja.T("ready.variant")+`</label>`) ||
		!strings.Contains(b, ` autofocus>`+ja.T("ready.order")+`</button>`) {
		t.Errorf("READY of a shopper who came for shoe-42: want shoe-42 chosen, in Japanese, the order button focused:\n%s", b)
	}
	r = h.postForm(pagePath, map[string]string{"action": "check", "ticket": tb, "user": "shoe-b"}, nil)
	b = string(r.raw)
	if match(statusRE, r.raw) != "READY" || match(chosenRE, r.raw) != "" || !strings.Contains(b, choice+` autofocus>`) ||
		!strings.Contains(b, `<option value="" selected>`+en.T("ready.variantChoose")+`</option>`) || strings.Contains(b, ` autofocus>Order now</button>`) {
		t.Errorf("READY with no variant chosen: want the choice required and focused:\n%s", b)
	}

	// An order with no variant chosen (a browser that skipped required)
	// orders nothing; the one chosen in the form is ordered.
	r = h.postForm(pagePath, map[string]string{"action": "order", "ticket": tb, "user": "shoe-b"}, nil)
	if ans := match(answerRE, r.raw); ans != en.T("ready.variantChoose") || match(statusRE, r.raw) != "READY" {
		t.Errorf("order with no variant: answer %q, status %q", ans, match(statusRE, r.raw))
	}
	orderRE := regexp.MustCompile(`Order (ord_[^:]+): received, now being processed`)
	for _, o := range []struct{ user, ticket, sku string }{{"shoe-b", tb, "shoe-41"}, {"shoe-a", ta, "shoe-42"}} {
		r = h.postForm(pagePath, map[string]string{"action": "order", "ticket": o.ticket, "user": o.user, "sku": o.sku}, nil)
		id := match(orderRE, r.raw)
		if id == "" {
			t.Errorf("%s orders %s: answer %q:\n%s", o.user, o.sku, match(answerRE, r.raw), r.raw)
			continue
		}
		if match(chosenRE, r.raw) != o.sku || !strings.Contains(string(r.raw), `disabled>Order now</button>`) {
			t.Errorf("after %s's order: want %s still shown and the form disabled:\n%s", o.user, o.sku, r.raw)
		}
		if v := h.do("GET", "/v1/orders/"+id, "", map[string]string{"X-User-Id": o.user}); v.str("sku") != o.sku || v.str("status") != "PENDING" {
			t.Errorf("GET order of %s = %s, want PENDING %s", o.user, v.raw, o.sku)
		}
	}

	// One SKU in skus is the queue's one SKU: no choice.
	h.putQueue(h.queue, `{"targetActive": 5, "skus": ["solo"], "rateLimit": `+limitsOff+`}`, 200)
	r = h.do("GET", pagePath+"?user=solo", "", nil)
	if b := string(r.raw); strings.Contains(b, `<select`) || !strings.Contains(b, `<input type="hidden" name="sku" value="solo">`) {
		t.Errorf("the page of a queue of skus [solo] does not order solo alone:\n%s", b)
	}
}

// What the forms refuse or cannot do, and how the page says so.
func TestPageFormEdges(t *testing.T) {
	h := newHarness(t)
	pagePath := "/q/" + h.queue

	t.Run("cross-site post", func(t *testing.T) {
		h := h.with(t)
		for _, hd := range []map[string]string{
			{"Sec-Fetch-Site": "cross-site"},
			{"Sec-Fetch-Site": "same-site"},
			{"Sec-Fetch-Site": "", "Origin": "https://evil.example"},
		} {
			if r := h.postForm(pagePath, map[string]string{"action": "join", "user": "victim"}, hd); r.status != 403 || !isProblem(r) {
				t.Errorf("join form with %v = %d %s, want 403", hd, r.status, r.raw)
			}
		}
		if r := h.postForm(pagePath, map[string]string{"action": "join", "user": "old-browser"}, map[string]string{"Sec-Fetch-Site": "", "Origin": "null"}); r.status != 200 {
			t.Errorf("join form from an old browser's no-referrer page = %d", r.status)
		}
	})
	t.Run("bad ticket", func(t *testing.T) {
		h := h.with(t)
		r := h.postForm(pagePath, map[string]string{"action": "check", "ticket": "t1.forged", "user": "u"}, nil)
		if r.status != 401 || match(errorRE, r.raw) != "Your place in line could not be found. Please join the line again." ||
			!strings.Contains(string(r.raw), `name="action" value="join"`) {
			t.Errorf("check with a forged ticket = %d:\n%s", r.status, r.raw)
		}
	})
	t.Run("unknown action", func(t *testing.T) {
		if r := h.with(t).postForm(pagePath, map[string]string{"action": "leave"}, nil); r.status != 400 {
			t.Errorf("action leave = %d", r.status)
		}
	})
	t.Run("proof of work", func(t *testing.T) {
		h := h.with(t)
		q := h.queue + "-pow"
		h.putQueue(q, `{"targetActive": 5, "rateLimit": `+limitsOff+`, "challenge": {"mode": "enforce", "difficulty": 12}}`, 201)
		get := h.do("GET", "/q/"+q, "", nil)
		r := h.postForm("/q/"+q, map[string]string{"action": "join", "user": "u"}, nil)
		for _, b := range [][]byte{get.raw, r.raw} {
			if !strings.Contains(string(b), "needs JavaScript") || strings.Contains(string(b), `value="join"><button type="submit">`) {
				t.Errorf("a queue asking for a proof of work offers a join without JavaScript:\n%s", b)
			}
		}
		if lk, err := h.line.Lookup(t.Context(), q, "u"); err != nil || lk.Found {
			t.Errorf("the form joined anyway (%v, %v)", lk, err)
		}
	})
	t.Run("closed", func(t *testing.T) {
		h := h.with(t)
		q := h.queue + "-closed"
		h.putQueue(q, `{"targetActive": 5, "rateLimit": `+limitsOff+`, "state": "closed", "closedReason": "sold_out"}`, 201)
		r := h.postForm("/q/"+q+"?lang=fr", map[string]string{"action": "join", "user": "u"}, nil)
		if match(statusRE, r.raw) != "CLOSED" || !strings.Contains(string(r.raw), "Épuisé\u00a0: tout a été vendu.") {
			t.Errorf("join form of a sold-out queue:\n%s", r.raw)
		}
	})
	t.Run("maintenance", func(t *testing.T) {
		h := h.with(t)
		q := h.queue + "-m"
		h.putQueue(q, `{"targetActive": 5, "rateLimit": `+limitsOff+`, "mode": "reject"}`, 201)
		r := h.postForm("/q/"+q, map[string]string{"action": "join", "user": "u"}, nil)
		if r.status != 503 || r.header.Get("Retry-After") == "" || match(statusRE, r.raw) != "MAINTENANCE" ||
			!strings.Contains(string(r.raw), `<button id="rejoin" type="submit" >Try again</button>`) {
			t.Errorf("join form in maintenance = %d:\n%s", r.status, r.raw)
		}
	})
	t.Run("trusted proxies", func(t *testing.T) {
		// Where X-User-Id is believed from the shop's proxy only, a form's
		// user field names nobody, and the page offers none.
		h := h.with(t)
		proxies, err := httpapi.ParseClientIPs([]string{"10.9.0.0/16"}, "")
		if err != nil {
			t.Fatal(err)
		}
		saved := h.gw.users
		h.gw.users = userauth.Header(proxies)
		h.rebuild()
		t.Cleanup(func() { h.gw.users = saved })
		if r := h.do("GET", pagePath+"?user=u", "", nil); strings.Contains(string(r.raw), `name="user"`) {
			t.Errorf("the page offers a user field behind a trusted proxy")
		}
		r := h.postForm(pagePath, map[string]string{"action": "join", "user": "someone-else"}, nil)
		if r.status != 401 || match(errorRE, r.raw) != "The shop did not tell us who you are. Please sign in to the shop and come back." {
			t.Errorf("join form naming its user behind a trusted proxy = %d:\n%s", r.status, r.raw)
		}
		if lk, _ := h.line.Lookup(t.Context(), h.queue, "someone-else"); lk.Found {
			t.Error("the form's user field joined the line")
		}
	})
}

// No form, however odd, gets a 500 or makes the page fail to render: the
// answer is the page (or a problem for a malformed request).
func FuzzPageForm(f *testing.F) {
	h := newHarness(f)
	tkt := h.join("fuzz-seed").str("ticket")
	f.Add("join", "", "fuzz-a", "", "de")
	f.Add("check", tkt, "fuzz-seed", "", "ja")
	f.Add("order", tkt, "fuzz-seed", "sku-1", "")
	f.Add("check", "t1.x.y.1.z", "", "", "xx")
	f.Add("leave", "", "a b", "../x", "*;q=0")
	f.Fuzz(func(t *testing.T, action, ticket, user, sku, lang string) {
		if len(action)+len(ticket)+len(user)+len(sku)+len(lang) > 2048 {
			return
		}
		h := h.with(t)
		r := h.postForm("/q/"+h.queue+"?lang="+url.QueryEscape(lang),
			map[string]string{"action": action, "ticket": ticket, "user": user, "sku": sku}, nil)
		switch {
		case r.status >= 500 && r.status != 503:
			t.Fatalf("form %q/%q/%q/%q = %d %s", action, ticket, user, sku, r.status, r.raw)
		case strings.HasPrefix(r.header.Get("Content-Type"), "text/html"):
			if !strings.Contains(string(r.raw), "</html>") {
				t.Fatalf("form %q answered a page cut short: %s", action, r.raw)
			}
		case !isProblem(r):
			t.Fatalf("form %q = %d %s: neither the page nor a problem", action, r.status, r.raw)
		}
	})
}

// admitWithStock records the stock of the queue's SKUs (version v: each
// report newer than the last) and admits with a stock-aware tick, as the
// admitter does: the line's figures then name the SKUs with units left.
func (h *harness) admitWithStock(v int64, avail map[string]int64) {
	h.t.Helper()
	var levels []waitqueue.StockLevel
	for sku, n := range avail {
		levels = append(levels, waitqueue.StockLevel{SKU: sku, Available: n, Version: v})
	}
	if err := h.line.SetStock(context.Background(), h.queue, true, levels...); err != nil {
		h.t.Fatal(err)
	}
	testenv.Applied(h.t, h.line, h.queue, h.gw.epoch(), 1<<40)
	testenv.Tick(h.t, h.line, h.queue, waitqueue.Tick{Epoch: h.gw.epoch(), TargetActive: 5, TickLength: 10 * time.Millisecond,
		TokenTTL: time.Minute, StockAware: true})
	time.Sleep(10 * time.Millisecond) // past every readyAt of the tick
}

// A READY shopper of a stock-aware queue of variants sees which ran out
// while they waited: the poll says which have units left, and the order
// form shows the others disabled and labelled sold out (in the page's
// language), not chosen even when ?sku= named one; with none left the
// page says so, with the focus on it, instead of a form that cannot
// succeed.
func TestReadyPageShowsTheVariantsSoldOut(t *testing.T) {
	h := newOrderHarness(t)
	h.putQueue(h.queue, `{"targetActive": 5, "skus": ["shoe-41", "shoe-42", "shoe-43"], "rateLimit": `+limitsOff+`}`, 200)
	pagePath := "/q/" + h.queue
	a := h.postForm(pagePath, map[string]string{"action": "join", "user": "shoe-a", "sku": "shoe-42"}, nil)
	ta := match(formTicketRE, a.raw)
	if ta == "" {
		t.Fatalf("join form: %s", a.raw)
	}
	h.admitWithStock(1, map[string]int64{"shoe-41": 3, "shoe-42": 0, "shoe-43": 1})

	if p := h.poll(ta); p.str("status") != "READY" || p.str("stock") != "available" || fmt.Sprint(p.body["skusAvailable"]) != "[shoe-41 shoe-43]" {
		t.Errorf("READY poll = %s, want stock available, skusAvailable [shoe-41 shoe-43]", p.raw)
	}
	for _, l := range page.ShippedLangs().All() {
		r := h.postForm(pagePath+"?lang="+l.Code(), map[string]string{"action": "check", "ticket": ta, "user": "shoe-a", "sku": "shoe-42"}, nil)
		b := string(r.raw)
		soldOut := `<option value="shoe-42" disabled>` + html.EscapeString(l.T("ready.variantSoldOut", "sku", "shoe-42")) + `</option>`
		if match(statusRE, r.raw) != "READY" || !strings.Contains(b, soldOut) || !strings.Contains(b, `<option value="shoe-41">shoe-41</option>`) ||
			!strings.Contains(b, `<option value="shoe-43">shoe-43</option>`) {
			t.Errorf("%s: READY with shoe-42 sold out: want it disabled, labelled %q, the others offered:\n%s", l.Code(), l.T("ready.variantSoldOut", "sku", "shoe-42"), b)
		}
		if strings.Contains(b, ` selected>shoe-42`) || strings.Contains(b, `" selected>`+html.EscapeString(l.T("ready.variantSoldOut", "sku", "shoe-42"))) ||
			!strings.Contains(b, `required aria-describedby="ready-title" autofocus>`) || strings.Contains(b, `id="order-form" method="post" action="`+pagePath+`?lang=`+l.Code()+`" hidden`) {
			t.Errorf("%s: the sold-out shoe-42 of ?sku= is chosen, or the choice does not take the focus, or the form is hidden:\n%s", l.Code(), b)
		}
	}

	// Everything sold out: no form that cannot succeed, the page says so.
	h.admitWithStock(2, map[string]int64{"shoe-41": 0, "shoe-42": 0, "shoe-43": 0})
	if p := h.poll(ta); p.str("status") != "READY" || p.body["skusAvailable"] != nil || p.str("stock") == "" {
		t.Errorf("READY poll once all sold out = %s, want the stock and no skusAvailable", p.raw)
	}
	for _, l := range page.ShippedLangs().All() {
		r := h.postForm(pagePath+"?lang="+l.Code(), map[string]string{"action": "check", "ticket": ta, "user": "shoe-a"}, nil)
		b := string(r.raw)
		if match(statusRE, r.raw) != "READY" || !strings.Contains(b, `<p id="sold-out" class="sold-out" role="status">`+html.EscapeString(l.T("ready.soldOut"))+`</p>`) {
			t.Errorf("%s: READY with every variant sold out does not say so:\n%s", l.Code(), b)
		}
		if !strings.Contains(b, `id="order-form" method="post" action="`+pagePath+`?lang=`+l.Code()+`" hidden>`) || strings.Contains(b, ` autofocus>`+l.T("ready.order")) ||
			!strings.Contains(b, `<h2 id="ready-title" tabindex="-1" autofocus>`) {
			t.Errorf("%s: READY with every variant sold out: want the form hidden and the focus on the heading:\n%s", l.Code(), b)
		}
	}
}
