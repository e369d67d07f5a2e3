package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	apidoc "usher/api"
	"usher/api/contract"
	"usher/gateway/httpapi"
)

// The API contract (api/openapi.yaml): every request a gateway test makes
// through the harness — h.do, and every request that reaches h.serve()'s
// socket, a browser's included — is checked with its response against the
// document (package api/contract); a mismatch fails the test that made
// the request, naming the path and what does not match.

// contractDoc is the document, parsed once for the package.
func contractDoc(t testing.TB) *contract.Doc {
	t.Helper()
	d, err := contract.Load()
	if err != nil {
		t.Fatalf("OpenAPI document: %v", err)
	}
	return d
}

// serviceOf is the document's name for what app serves.
func (h *harness) serviceOf(app *fiber.App) string {
	if app == h.gw.admin && app != nil {
		return contract.GatewayAdmin
	}
	return contract.Gateway
}

// checkExchange checks one h.do exchange against the document.
func (h *harness) checkExchange(app *fiber.App, req *http.Request, reqBody string, res *http.Response, resBody []byte) {
	h.t.Helper()
	if err := contractDoc(h.t).Check(h.serviceOf(app), req, []byte(reqBody), res, resBody); err != nil {
		h.t.Errorf("API contract: %v", err)
	}
}

// checkServed has app check, against the document, every request that
// reaches it over a socket (h.do checks its own), reporting to t until t
// ends. A streamed answer (an event stream) is checked by its status and
// headers.
func checkServed(t testing.TB, app *fiber.App, service string) {
	t.Helper()
	var mu sync.Mutex
	done := false
	t.Cleanup(func() { mu.Lock(); done = true; mu.Unlock() })
	checkServedBy(contractDoc(t), app, service, func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if !done {
			t.Errorf("API contract (served): %v", err)
		}
	})
}

// checkServedBy has app check every request that reaches it over a socket
// against d, and report each mismatch.
func checkServedBy(d *contract.Doc, app *fiber.App, service string, report func(error)) {
	if _, dup := served.LoadOrStore(app, true); dup {
		return
	}
	srv := app.Server()
	next := srv.Handler
	srv.Handler = func(ctx *fasthttp.RequestCtx) {
		next(ctx)
		if strings.HasPrefix(ctx.RemoteAddr().String(), "0.0.0.0:") {
			return // fiber's app.Test: h.do checks it
		}
		var req http.Request
		if err := fasthttpadaptor.ConvertRequest(ctx, &req, true); err != nil {
			return // not a request the document could speak of
		}
		reqBody := bytes.Clone(ctx.PostBody())
		req.Header = req.Header.Clone()
		res := &http.Response{StatusCode: ctx.Response.StatusCode(), Header: http.Header{}, Request: &req}
		ctx.Response.Header.VisitAll(func(k, v []byte) { res.Header.Add(string(k), string(v)) })
		var resBody []byte
		if !ctx.Response.IsBodyStream() {
			resBody = bytes.Clone(ctx.Response.Body())
		}
		if err := d.Check(service, &req, reqBody, res, resBody); err != nil {
			report(err)
		}
	}
}

// served holds the apps checkServed checks already.
var served sync.Map

// GET /openapi.json is the document, as JSON.
func TestOpenAPIDocumentIsServed(t *testing.T) {
	h := newHarness(t)
	r := h.do("GET", "/openapi.json", "", nil)
	if r.status != 200 || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /openapi.json = %d %s", r.status, r.header.Get("Content-Type"))
	}
	if !bytes.Equal(r.raw, apidoc.JSON()) {
		t.Error("GET /openapi.json is not api.JSON()")
	}
	var doc struct {
		OpenAPI string         `json:"openapi"`
		Paths   map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(r.raw, &doc); err != nil || doc.OpenAPI != "3.1.1" || doc.Paths["/v1/queues/{queue}/tickets"] == nil {
		t.Errorf("GET /openapi.json: openapi %q, %d paths, err %v", doc.OpenAPI, len(doc.Paths), err)
	}
}

// Every route the gateway registers is in the document for the listener
// that serves it, and every operation the document gives the gateway is a
// route: the public listener with the admin API on it, and the admin
// listener (USHER_ADMIN_ADDR) on its own.
func TestContractRoutesMatchTheDocument(t *testing.T) {
	d := contractDoc(t)
	h := newHarness(t)
	check := func(t *testing.T, app *fiber.App, service string) {
		var got []string
		for _, r := range app.GetRoutes(true) {
			if r.Method == fiber.MethodHead || r.Method == "USE" {
				continue // HEAD: fiber's own for every GET
			}
			got = append(got, r.Method+" "+openAPIPath(r.Path))
		}
		slices.Sort(got)
		got = slices.Compact(got)
		want := d.Routes(service)
		for _, r := range got {
			if !slices.Contains(want, r) {
				t.Errorf("%s serves %s, which the OpenAPI document (api/openapi.yaml) lacks", service, r)
			}
		}
		for _, r := range want {
			if !slices.Contains(got, r) {
				t.Errorf("the OpenAPI document gives the %s %s, which it does not serve", service, r)
			}
		}
	}
	t.Run("public listener with the admin API", func(t *testing.T) {
		check(t, h.gw.app(), contract.Gateway)
	})
	t.Run("admin listener of its own", func(t *testing.T) {
		g := h.gw // h.app stays as it was built
		g.adminApart, g.admin = true, nil
		public := g.app()
		check(t, g.admin, contract.GatewayAdmin)
		// The public listener then serves the rest: the document's
		// gateway routes that are not the admin API's.
		var got []string
		for _, r := range public.GetRoutes(true) {
			if r.Method != fiber.MethodHead && r.Method != "USE" {
				got = append(got, r.Method+" "+openAPIPath(r.Path))
			}
		}
		for _, r := range got {
			if strings.Contains(r, " /v1/admin") || strings.Contains(r, " /ops") {
				t.Errorf("the public listener serves %s although the admin API has its own", r)
			}
		}
	})
}

// openAPIPath writes a fiber route path (/v1/queues/:queue) as OpenAPI does
// (/v1/queues/{queue}).
func openAPIPath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		if name, ok := strings.CutPrefix(s, ":"); ok {
			segs[i] = "{" + strings.TrimSuffix(name, "?") + "}"
		}
	}
	return strings.Join(segs, "/")
}

// Requests that reach a served app over its socket are checked, a
// streamed answer by its status and headers; fiber's in-memory requests are
// left to h.do.
func TestContractChecksServedRequests(t *testing.T) {
	d := contractDoc(t)
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Get("/healthz", func(c *fiber.Ctx) error { return c.SendString("ok\n") })
	app.Get("/undocumented", func(c *fiber.Ctx) error { return c.SendString("hello") })
	app.Get("/v1/admin/ops/stream", func(c *fiber.Ctx) error { // a stream without its headers
		c.Set(fiber.HeaderContentType, "text/event-stream")
		c.Context().SetBodyStreamWriter(func(w *bufio.Writer) { w.WriteString("retry: 1\n\n") })
		return nil
	})
	var mu sync.Mutex
	var errs []string
	checkServedBy(d, app, contract.Gateway, func(err error) { mu.Lock(); errs = append(errs, err.Error()); mu.Unlock() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go httpapi.Listen(app, ln)
	defer app.Shutdown()
	for _, p := range []string{"/healthz", "/undocumented", "/v1/admin/ops/stream"} {
		req, _ := http.NewRequest("GET", "http://"+ln.Addr().String()+p, nil)
		req.Header.Set("Authorization", "Bearer x")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}
	if _, err := app.Test(httptest.NewRequest("GET", "/undocumented", nil)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(errs) != 2 || !strings.Contains(errs[0], "/undocumented") || !strings.Contains(errs[0], "want 404") ||
		!strings.Contains(errs[1], "/v1/admin/ops/stream") || !strings.Contains(errs[1], "X-Accel-Buffering") {
		t.Errorf("served mismatches = %q, want /undocumented (not 404) and the stream's missing headers, once each", errs)
	}
}

// The checker itself: answers that leave the document are caught, with the
// path and the mismatch named.
func TestContractCatchesMismatches(t *testing.T) {
	d := contractDoc(t)
	req := func(method, path, body string, hdr map[string]string) *http.Request {
		r, _ := http.NewRequest(method, "http://gateway"+path, strings.NewReader(body))
		for k, v := range hdr {
			r.Header.Set(k, v)
		}
		return r
	}
	res := func(status int, ct string, body string, hdr ...string) (*http.Response, []byte) {
		r := &http.Response{StatusCode: status, Header: http.Header{}}
		if ct != "" {
			r.Header.Set("Content-Type", ct)
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Set(hdr[i], hdr[i+1])
		}
		return r, []byte(body)
	}
	place := `{"ticket":"t1.x","queue":"demo","status":"WAITING","position":1,"waiting":1,"pollAfterMs":500,"events":"http://n/e"}`
	user := map[string]string{"X-User-Id": "alice"}
	loc := []string{"Location", "/v1/queues/demo/tickets/t1.x", "Cache-Control", "no-store"}
	tests := []struct {
		name    string
		req     *http.Request
		res     *http.Response
		body    []byte
		wantErr string // "" = valid
	}{
		{"a valid join", req("POST", "/v1/queues/demo/tickets", "", user), nil, nil, ""},
		{"a field the document lacks", req("POST", "/v1/queues/demo/tickets", "", user), nil, nil, "surprise"},
		{"WAITING without its position", req("POST", "/v1/queues/demo/tickets", "", user), nil, nil, "position"},
		{"a status the document lacks", req("POST", "/v1/queues/demo/tickets", "", user), nil, nil, "418"},
		{"a required header missing", req("POST", "/v1/queues/demo/tickets", "", user), nil, nil, "Location"},
		{"a problem type the response does not list", req("POST", "/v1/queues/demo/tickets", "", user), nil, nil, "queue-closed"},
		{"428 without its challenge", req("POST", "/v1/queues/demo/tickets", "", user), nil, nil, "challenge"},
		{"a join without identity accepted", req("POST", "/v1/queues/demo/tickets", "", nil), nil, nil, "refuses this request"},
		{"an unknown path not answered 404", req("GET", "/v1/nothing", "", nil), nil, nil, "want 404"},
		{"an unknown path answered 404 not-found", req("GET", "/v1/nothing", "", nil), nil, nil, ""},
	}
	bodies := []struct {
		status int
		ct     string
		body   string
		hdr    []string
	}{
		{202, "application/json", place, loc},
		{202, "application/json", strings.Replace(place, `"ticket"`, `"surprise":1,"ticket"`, 1), loc},
		{202, "application/json", strings.Replace(place, `"position":1,`, "", 1), loc},
		{418, "application/problem+json", `{"type":"https://usher.dev/problems/teapot","title":"I'm a teapot","status":418}`, nil},
		{202, "application/json", place, []string{"Cache-Control", "no-store"}},
		{403, "application/problem+json", `{"type":"https://usher.dev/problems/queue-closed","title":"Forbidden","status":403}`, nil},
		{428, "application/problem+json", `{"type":"https://usher.dev/problems/challenge-required","title":"Precondition Required","status":428,"reason":"missing"}`, nil},
		{202, "application/json", place, loc},
		{200, "text/plain", "ok", nil},
		{404, "application/problem+json", `{"type":"https://usher.dev/problems/not-found","title":"Not Found","status":404,"detail":"no such resource"}`, nil},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := bodies[i]
			r, body := res(b.status, b.ct, b.body, b.hdr...)
			err := d.Check(contract.Gateway, tt.req, nil, r, body)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Check = %v, want no mismatch", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Check = %v, want a mismatch naming %q", err, tt.wantErr)
			case err != nil && !strings.Contains(err.Error(), tt.req.URL.Path):
				t.Errorf("Check = %v, want the path named", err)
			}
		})
	}
}
