package contract_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"usher/api"
	"usher/api/contract"
)

// Events are held to the schema the document names for their name.
func TestContractChecksEvents(t *testing.T) {
	d, err := contract.Load()
	if err != nil {
		t.Fatal(err)
	}
	const path = "/v1/queues/{queue}/tickets/{ticket}/events"
	tests := []struct {
		name, data, wantErr string
	}{
		{"position", `{"position":42,"waiting":1200,"etaSeconds":3}`, ""},
		{"position", `{"position":42}`, "waiting"},
		{"position", `{"position":0,"waiting":1}`, "minimum"},
		{"position", `{"position":1,"waiting":1,"surprise":true}`, "surprise"},
		{"ready", `{"token":"eyJ","readyAt":"2026-11-29T21:29:18.71Z","expiresAt":"2026-11-29T21:34:18.71Z"}`, ""},
		{"ready", `{"token":"eyJ","readyAt":"tomorrow","expiresAt":"2026-11-29T21:34:18.71Z"}`, "date-time"},
		{"closed", `{"reason":"sold_out"}`, ""},
		{"notice", `{}`, ""},
		{"notice", `{"message":"hi","level":"info","since":"2026-11-29T21:29:18Z"}`, ""},
		{"notice", `{"message":"hi","level":"loud","since":"2026-11-29T21:29:18Z"}`, "notice"},
		{"gossip", `{}`, "not in the document"},
	}
	for _, tt := range tests {
		err := d.CheckEvent(path, "GET", tt.name, []byte(tt.data))
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%s %s: %v, want it valid", tt.name, tt.data, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%s %s: %v, want an error naming %q", tt.name, tt.data, err, tt.wantErr)
		}
	}
	if ev := d.Events("/v1/admin/ops/stream", "GET"); ev["queues"] != "OpsSnapshot" {
		t.Errorf("ops stream events = %v", ev)
	}
}

// A path parameter is held to its schema decoded, as OpenAPI reads it: a
// client may percent-encode any character of a segment (%64emo is the
// queue demo), while a segment that decodes to no valid value, an escaped
// slash one, is refused. An encoded name is checked as what it decodes to:
// checked as spelled — %2564emo, decoded once to %64emo — it would be
// refused whatever it named.
func TestContractDecodesPathParameters(t *testing.T) {
	d, err := contract.Load()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		target  string
		refused bool
	}{
		{"/v1/queues/demo", false},
		{"/v1/queues/%64emo", false},
		{"/v1/queues/%64%65%6D%6F", false},
		{"/v1/queues/%2564emo", true}, // %64emo: no queue name
		{"/v1/queues/a%2Fb", true},
		{"/v1/queues/a%20b", true},
	}
	for _, tt := range tests {
		req := httptest.NewRequest("GET", tt.target, nil)
		body := []byte(`{"name":"demo","state":"open","waiting":0,"admitted":0}`)
		res := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}}}
		err := d.Check(contract.Gateway, req, nil, res, body)
		refused := err != nil && strings.Contains(err.Error(), "the document refuses this request")
		if refused != tt.refused {
			t.Errorf("GET %s answered 200: %v, want refused %v", tt.target, err, tt.refused)
		}
	}
}

// A header field's value is read as the service reads it off the wire,
// without the spaces and tabs around it (RFC 9110 §5.5): a test that sets
// " BeArer x" sent the Authorization "BeArer x", which opens the admin API
// (the gateway's FuzzAuthorization found the checker refusing it).
func TestContractTrimsFieldValues(t *testing.T) {
	d, err := contract.Load()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		auth    string
		refused bool
	}{
		{"Bearer x", false},
		{" BeArer x", false},
		{"Bearer x\t", false},
		{"Basic eDp4", true},
	}
	for _, tt := range tests {
		req := httptest.NewRequest("GET", "/v1/admin/queues/demo", nil)
		req.Header.Set("Authorization", tt.auth)
		res := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}}}
		err := d.Check(contract.Gateway, req, nil, res, []byte(`{}`))
		refused := err != nil && strings.Contains(err.Error(), "the document refuses this request")
		if refused != tt.refused {
			t.Errorf("GET with Authorization %q answered 200: %v, want refused %v", tt.auth, err, tt.refused)
		}
	}
}

// exchange is one request and its answer, to be checked.
type exchange struct {
	name      string
	service   string // "" is the gateway
	method    string
	target    string
	reqHeader []string // name, value, …
	reqBody   string
	status    int
	resHeader []string // name, value, … (Content-Type among them)
	resBody   string
	wantErr   string // "" = valid
}

func (x exchange) check(t *testing.T, d *contract.Doc) {
	t.Helper()
	req := httptest.NewRequest(x.method, x.target, strings.NewReader(x.reqBody))
	for i := 0; i+1 < len(x.reqHeader); i += 2 {
		req.Header.Add(x.reqHeader[i], x.reqHeader[i+1])
	}
	res := &http.Response{StatusCode: x.status, Header: http.Header{}}
	for i := 0; i+1 < len(x.resHeader); i += 2 {
		res.Header.Add(x.resHeader[i], x.resHeader[i+1])
	}
	var body []byte
	if x.resBody != "" {
		body = []byte(x.resBody)
	}
	service := x.service
	if service == "" {
		service = contract.Gateway
	}
	err := d.Check(service, req, []byte(x.reqBody), res, body)
	switch {
	case x.wantErr == "" && err != nil:
		t.Errorf("%s: Check = %v, want no mismatch", x.name, err)
	case x.wantErr != "" && (err == nil || !strings.Contains(err.Error(), x.wantErr)):
		t.Errorf("%s: Check = %v, want a mismatch naming %q", x.name, err, x.wantErr)
	case err != nil && !strings.Contains(err.Error(), req.URL.EscapedPath()):
		t.Errorf("%s: Check = %v, want the path named", x.name, err)
	case err != nil && strings.Contains(err.Error(), "\n"):
		t.Errorf("%s: Check = %q, want one line", x.name, err)
	}
}

const refused = "the document refuses this request"

// Exchanges of the real document: each rule of the package comment has a
// case that breaks it, named by what the error must name, beside one that
// keeps it.
func TestContractHoldsExchangesToTheDocument(t *testing.T) {
	d, err := contract.Load()
	if err != nil {
		t.Fatal(err)
	}
	const (
		ord    = "ord_aaaaaaaaaaaaaaaaaaaaaaaaaa"
		order  = `{"orderId":"` + ord + `","status":"PENDING","sku":"sku-1","quantity":1}`
		json   = "application/json"
		prob   = "application/problem+json"
		poll   = `{"ticket":"t1.x","queue":"demo","status":"WAITING","position":1,"waiting":1,"pollAfterMs":500,"events":"http://n/e"}`
		notice = `{"message":"hi","level":"info","since":"2026-11-29T21:29:18Z"}`
		events = "/v1/queues/demo/tickets/t1.x/events"
	)
	var (
		shopper  = []string{"X-User-Id", "alice", "Authorization", "Bearer tok"}
		admin    = []string{"Authorization", "Bearer x"}
		placed   = []string{"Content-Type", json, "Location", "/v1/orders/" + ord, "Cache-Control", "no-store"}
		polled   = []string{"Content-Type", json, "Location", "/v1/queues/demo/tickets/t1.x", "Cache-Control", "no-store"}
		streamed = []string{"Content-Type", "text/event-stream", "Cache-Control", "no-store", "X-Accel-Buffering", "no"}
		problem  = func(slug string, status int) string {
			return fmt.Sprintf(`{"type":"https://usher.dev/problems/%s","title":"t","status":%d}`, slug, status)
		}
	)
	tests := []exchange{
		// The request: security.
		{name: "an order with its user and entry token", method: "POST", target: "/v1/orders", reqHeader: shopper,
			reqBody: `{"sku":"sku-1","quantity":1}`, status: 202, resHeader: placed, resBody: order},
		{name: "an order without its entry token accepted", method: "POST", target: "/v1/orders", reqHeader: []string{"X-User-Id", "alice"},
			reqBody: `{"sku":"sku-1"}`, status: 202, resHeader: placed, resBody: order, wantErr: "entryToken"},
		{name: "an order without its entry token refused", method: "POST", target: "/v1/orders", reqHeader: []string{"X-User-Id", "alice"},
			reqBody: `{"sku":"sku-1"}`, status: 401, resHeader: []string{"Content-Type", prob}, resBody: problem("invalid-token", 401)},
		{name: "an admin call without its token accepted", method: "GET", target: "/v1/admin/queues",
			status: 200, resHeader: []string{"Content-Type", json}, resBody: `{"queues":[]}`, wantErr: "adminToken"},
		{name: "an admin call in another scheme accepted", method: "GET", target: "/v1/admin/queues", reqHeader: []string{"Authorization", "Basic eDp4"},
			status: 200, resHeader: []string{"Content-Type", json}, resBody: `{"queues":[]}`, wantErr: refused},
		{name: "an admin call with its token", method: "GET", target: "/v1/admin/queues", reqHeader: admin,
			status: 200, resHeader: []string{"Content-Type", json}, resBody: `{"queues":[]}`},

		// The request: parameters.
		{name: "a header parameter past its maxLength accepted", method: "PUT", target: "/v1/admin/queues/demo/notice",
			reqHeader: append([]string{"X-Admin-User", strings.Repeat("a", 129)}, admin...), reqBody: `{"message":"hi"}`,
			status: 200, resHeader: []string{"Content-Type", json}, resBody: notice, wantErr: "X-Admin-User"},
		{name: "a header parameter as the document gives it", method: "PUT", target: "/v1/admin/queues/demo/notice",
			reqHeader: append([]string{"X-Admin-User", "ops"}, admin...), reqBody: `{"message":"hi"}`,
			status: 200, resHeader: []string{"Content-Type", json}, resBody: notice},
		{name: "a malformed Last-Event-ID accepted", service: contract.Notifier, method: "GET", target: events,
			reqHeader: []string{"Last-Event-ID", "abc"}, status: 200, resHeader: streamed, wantErr: "Last-Event-ID"},
		{name: "a Last-Event-ID as the document gives it", service: contract.Notifier, method: "GET", target: events,
			reqHeader: []string{"Last-Event-ID", "42"}, status: 200, resHeader: streamed},
		{name: "a path parameter its schema refuses accepted", method: "GET", target: "/v1/orders/ord_1",
			reqHeader: []string{"X-User-Id", "alice"}, status: 200, resHeader: []string{"Content-Type", json, "Cache-Control", "no-store"},
			resBody: order, wantErr: "path parameter id"},

		// The request: its body.
		{name: "an order without its body accepted", method: "POST", target: "/v1/orders", reqHeader: shopper,
			status: 202, resHeader: placed, resBody: order, wantErr: "body is required"},
		{name: "an order whose body is not JSON accepted", method: "POST", target: "/v1/orders", reqHeader: shopper,
			reqBody: "sku=sku-1", status: 202, resHeader: placed, resBody: order, wantErr: "not JSON"},
		{name: "an order of a quantity its schema refuses accepted", method: "POST", target: "/v1/orders", reqHeader: shopper,
			reqBody: `{"sku":"sku-1","quantity":0}`, status: 202, resHeader: placed, resBody: order, wantErr: "/quantity"},
		{name: "an order of a quantity its schema refuses refused", method: "POST", target: "/v1/orders", reqHeader: shopper,
			reqBody: `{"sku":"sku-1","quantity":0}`, status: 400, resHeader: []string{"Content-Type", prob}, resBody: problem("invalid-body", 400)},
		{name: "a form the schema refuses accepted", method: "POST", target: "/q/demo", reqBody: "action=dance",
			status: 200, resHeader: []string{"Content-Type", "text/html", "Cache-Control", "no-store"}, resBody: "<p>", wantErr: "/action"},
		{name: "a form without its required field accepted", method: "POST", target: "/q/demo", reqBody: "ticket=t1.x",
			status: 200, resHeader: []string{"Content-Type", "text/html", "Cache-Control", "no-store"}, resBody: "<p>", wantErr: "action"},
		{name: "a form as the document gives it", method: "POST", target: "/q/demo",
			reqHeader: []string{"Content-Type", "application/x-www-form-urlencoded"}, reqBody: "action=check&ticket=t1.x%3A",
			status: 200, resHeader: []string{"Content-Type", "text/html; charset=utf-8", "Cache-Control", "no-store"}, resBody: "<p>"},

		// The response: status, Content-Type, body.
		{name: "a field of the wrong type", method: "GET", target: "/v1/queues/demo/tickets/t1.x",
			status: 200, resHeader: polled, resBody: strings.Replace(poll, `"position":1`, `"position":"1"`, 1), wantErr: "/position"},
		{name: "a poll as the document gives it", method: "GET", target: "/v1/queues/demo/tickets/t1.x",
			status: 200, resHeader: polled, resBody: poll},
		{name: "a body that is not JSON", method: "GET", target: "/v1/queues/demo/tickets/t1.x",
			status: 200, resHeader: polled, resBody: "WAITING", wantErr: "not JSON"},
		{name: "a status the operation does not declare", method: "GET", target: "/v1/queues/demo/tickets/t1.x",
			status: 409, resHeader: []string{"Content-Type", prob}, resBody: problem("conflict", 409), wantErr: "status 409"},
		{name: "a Content-Type the response does not list", method: "GET", target: "/v1/queues/demo/tickets/t1.x",
			status: 200, resHeader: []string{"Content-Type", "text/plain", "Location", "/v1/queues/demo/tickets/t1.x", "Cache-Control", "no-store"},
			resBody: poll, wantErr: "text/plain"},
		{name: "a response of no content, empty", method: "DELETE", target: "/v1/queues/demo/tickets/t1.x", status: 204},
		{name: "a problem document without its title", method: "GET", target: "/v1/orders/" + ord, reqHeader: []string{"X-User-Id", "alice"},
			status: 404, resHeader: []string{"Content-Type", prob},
			resBody: `{"type":"https://usher.dev/problems/order-not-found","status":404}`, wantErr: "title"},
		{name: "a status of a class the document declares (4XX)", method: "POST", target: "/q/demo", reqBody: "action=dance",
			status: 409, resHeader: []string{"Content-Type", "text/html"}, resBody: "<p>"},

		// The response: headers.
		{name: "a required header missing", method: "POST", target: "/v1/orders", reqHeader: shopper, reqBody: `{"sku":"sku-1"}`,
			status: 202, resHeader: []string{"Content-Type", json, "Cache-Control", "no-store"}, resBody: order, wantErr: "Location"},
		{name: "a required header its schema refuses", method: "POST", target: "/v1/orders", reqHeader: shopper, reqBody: `{"sku":"sku-1"}`,
			status: 202, resHeader: []string{"Content-Type", json, "Location", "/v1/orders/" + ord, "Cache-Control", "max-age=60"},
			resBody: order, wantErr: "Cache-Control"},
		{name: "a Retry-After that is no number of seconds", method: "POST", target: "/v1/orders", reqHeader: shopper, reqBody: `{"sku":"sku-1"}`,
			status: 503, resHeader: []string{"Content-Type", prob, "Retry-After", "soon"}, resBody: problem("unavailable", 503), wantErr: "Retry-After"},
		{name: "a Retry-After of seconds with a leading zero", method: "POST", target: "/v1/orders", reqHeader: shopper, reqBody: `{"sku":"sku-1"}`,
			status: 503, resHeader: []string{"Content-Type", prob, "Retry-After", "05"}, resBody: problem("unavailable", 503)},
		{name: "a Retry-After of a fraction", method: "POST", target: "/v1/orders", reqHeader: shopper, reqBody: `{"sku":"sku-1"}`,
			status: 503, resHeader: []string{"Content-Type", prob, "Retry-After", "1.5"}, resBody: problem("unavailable", 503), wantErr: "want integer"},
		{name: "a Retry-After of seconds", method: "POST", target: "/v1/orders", reqHeader: shopper, reqBody: `{"sku":"sku-1"}`,
			status: 503, resHeader: []string{"Content-Type", prob, "Retry-After", "5"}, resBody: problem("unavailable", 503)},
		{name: "an optional header its class's schema refuses (5XX)", method: "POST", target: "/q/demo", reqBody: "action=join",
			status: 503, resHeader: []string{"Content-Type", "text/html", "Retry-After", "0"}, resBody: "<p>", wantErr: "Retry-After"},
		{name: "an admin 401 without its challenge", method: "GET", target: "/v1/admin/queues",
			status: 401, resHeader: []string{"Content-Type", prob}, resBody: problem("unauthorized", 401), wantErr: "WWW-Authenticate"},
		{name: "an admin 401 with its challenge", method: "GET", target: "/v1/admin/queues",
			status: 401, resHeader: []string{"Content-Type", prob, "WWW-Authenticate", `Bearer realm="usher-admin"`}, resBody: problem("unauthorized", 401)},
		{name: "a stream without X-Accel-Buffering", service: contract.Notifier, method: "GET", target: events,
			status: 200, resHeader: []string{"Content-Type", "text/event-stream", "Cache-Control", "no-store"}, wantErr: "X-Accel-Buffering"},

		// Problems.
		{name: "a problem type the response does not list", method: "GET", target: "/v1/orders/" + ord, reqHeader: []string{"X-User-Id", "alice"},
			status: 404, resHeader: []string{"Content-Type", prob}, resBody: problem("not-found", 404), wantErr: `"not-found"`},
		{name: "a problem of another status", method: "GET", target: "/v1/orders/" + ord, reqHeader: []string{"X-User-Id", "alice"},
			status: 404, resHeader: []string{"Content-Type", prob}, resBody: problem("order-not-found", 410), wantErr: "problem status 410"},
		{name: "a problem the response lists", method: "GET", target: "/v1/orders/" + ord, reqHeader: []string{"X-User-Id", "alice"},
			status: 404, resHeader: []string{"Content-Type", prob}, resBody: problem("order-not-found", 404)},

		// What the document does not give the service.
		{name: "a method a path does not take answered 404", method: "DELETE", target: "/v1/orders",
			status: 404, resHeader: []string{"Content-Type", prob}, resBody: problem("not-found", 404), wantErr: "want 405"},
		{name: "a method a path does not take answered 405", method: "DELETE", target: "/v1/orders",
			status: 405, resHeader: []string{"Content-Type", prob}, resBody: problem("method-not-allowed", 405)},
		{name: "a notifier path on the gateway", method: "GET", target: events,
			status: 200, resHeader: streamed, wantErr: "want 404"},
	}
	for _, x := range tests {
		x.check(t, d)
	}
}

// A small document of its own, for what usher's document does not use: query
// and cookie parameters of other types than text, arrays, apiKeys outside
// headers, http basic, a default response, form fields of other types.
const miniSpec = `
openapi: 3.1.1
info: {title: mini, version: "1"}
security:
  - key: []
paths:
  /things:
    x-usher-service: [gateway]
    get:
      parameters:
        - {name: limit, in: query, required: true, schema: {type: integer, minimum: 1, maximum: 100}}
        - {name: tags, in: query, schema: {type: array, items: {type: integer}}}
        - {name: ids, in: query, explode: false, schema: {type: array, items: {type: integer}, maxItems: 2}}
        - {name: fresh, in: query, schema: {type: boolean}}
        - {name: session, in: cookie, schema: {type: string, pattern: '^s[0-9]+$'}}
        - {name: X-Ratio, in: header, schema: {type: number, maximum: 1}}
      responses:
        '200':
          description: The things.
          headers:
            X-Count: {required: true, schema: {type: integer, minimum: 0}}
          content:
            application/vnd.things+json:
              schema: {type: object, required: [n], properties: {n: {type: integer}}}
        default:
          description: Anything else.
          content:
            application/json:
              schema: {type: object, required: [status], properties: {status: {type: integer}}}
    post:
      security:
        - basic: []
        - sid: []
      requestBody:
        required: true
        content:
          application/x-www-form-urlencoded:
            schema:
              type: object
              required: [count]
              properties:
                count: {type: integer, minimum: 1}
                tags: {type: array, items: {type: integer}}
                ok: {type: boolean}
      responses:
        '2XX': {description: Done.}
components:
  securitySchemes:
    key: {type: apiKey, in: query, name: key}
    basic: {type: http, scheme: basic}
    sid: {type: apiKey, in: cookie, name: sid}
`

func TestContractReadsParametersByType(t *testing.T) {
	d, err := contract.New([]byte(miniSpec))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.ValidateDocument(); err != nil {
		t.Fatalf("the small document: %v", err)
	}
	ok := []string{"Content-Type", "application/vnd.things+json; charset=utf-8", "X-Count", "3"}
	get := func(name, query string, hdr []string, wantErr string) exchange {
		return exchange{name: name, method: "GET", target: "/things?key=k&" + query, reqHeader: hdr,
			status: 200, resHeader: ok, resBody: `{"n":1}`, wantErr: wantErr}
	}
	basic := []string{"Authorization", "Basic eDp4"}
	tests := []exchange{
		get("an integer query parameter", "limit=5", nil, ""),
		get("an integer query parameter out of range", "limit=0", nil, "limit"),
		get("an integer query parameter that is no integer", "limit=five", nil, "want integer"),
		get("an integer query parameter written as a float", "limit=5e1", nil, ""),
		get("an integer query parameter of hexadecimal", "limit=0x10", nil, "want integer"),
		get("an integer query parameter past int64", "limit=99999999999999999999", nil, "maximum"),
		get("a required query parameter missing", "fresh=true", nil, "limit is required"),
		get("an exploded array", "limit=5&tags=1&tags=2", nil, ""),
		get("an exploded array of a wrong item", "limit=5&tags=1&tags=x", nil, "tags"),
		get("an unexploded array", "limit=5&ids=1,2", nil, ""),
		get("an unexploded array too long", "limit=5&ids=1,2,3", nil, "maxItems"),
		get("a boolean", "limit=5&fresh=false", nil, ""),
		get("a boolean that is none", "limit=5&fresh=yes", nil, "fresh"),
		get("a cookie", "limit=5", []string{"Cookie", "session=s1"}, ""),
		get("a cookie its schema refuses", "limit=5", []string{"Cookie", "session=x"}, "cookie parameter session"),
		get("a number header", "limit=5", []string{"X-Ratio", "0.5"}, ""),
		get("a number header out of range", "limit=5", []string{"X-Ratio", "2"}, "X-Ratio"),
		{name: "no apiKey in the query", method: "GET", target: "/things?limit=5", status: 200, resHeader: ok, resBody: `{"n":1}`, wantErr: "key query (key)"},
		{name: "a refused request answered 4xx", method: "GET", target: "/things?limit=0", status: 400,
			resHeader: []string{"Content-Type", "application/json"}, resBody: `{"status":400}`},
		{name: "a default response's body its schema refuses", method: "GET", target: "/things?key=k&limit=5", status: 500,
			resHeader: []string{"Content-Type", "application/json"}, resBody: `{"status":"bad"}`, wantErr: "/status"},
		{name: "a required integer header missing", method: "GET", target: "/things?key=k&limit=5", status: 200,
			resHeader: []string{"Content-Type", "application/vnd.things+json"}, resBody: `{"n":1}`, wantErr: "X-Count"},
		{name: "an integer header that is negative", method: "GET", target: "/things?key=k&limit=5", status: 200,
			resHeader: []string{"Content-Type", "application/vnd.things+json", "X-Count", "-1"}, resBody: `{"n":1}`, wantErr: "X-Count"},
		{name: "a +json body its schema refuses", method: "GET", target: "/things?key=k&limit=5", status: 200,
			resHeader: ok, resBody: `{"n":"one"}`, wantErr: "/n"},
		{name: "a form of typed fields, http basic", method: "POST", target: "/things", reqHeader: basic,
			reqBody: "count=2&tags=1&tags=2&ok=true", status: 201},
		{name: "a form, a cookie apiKey", method: "POST", target: "/things", reqHeader: []string{"Cookie", "sid=1"},
			reqBody: "count=2", status: 204},
		{name: "a form without credentials", method: "POST", target: "/things", reqBody: "count=2", status: 201, wantErr: "basic"},
		{name: "a form field that is no integer", method: "POST", target: "/things", reqHeader: basic, reqBody: "count=two", status: 201, wantErr: "/count"},
		{name: "a form field out of range", method: "POST", target: "/things", reqHeader: basic, reqBody: "count=0", status: 201, wantErr: "/count"},
		{name: "a form's array of a wrong item", method: "POST", target: "/things", reqHeader: basic, reqBody: "count=1&tags=x", status: 201, wantErr: "/tags"},
		{name: "a form's boolean that is none", method: "POST", target: "/things", reqHeader: basic, reqBody: "count=1&ok=1", status: 201, wantErr: "/ok"},
		{name: "a status of no class the operation declares", method: "POST", target: "/things", reqHeader: basic, reqBody: "count=1", status: 304, wantErr: "status 304"},
	}
	for _, x := range tests {
		x.check(t, d)
	}
}

// The document is valid OpenAPI 3.1 and refers only to itself; a document
// that breaks either, or one whose schemas do not compile, is told apart.
func TestContractValidatesDocuments(t *testing.T) {
	d, err := contract.Load()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.ValidateDocument(); err != nil {
		t.Fatalf("usher's document: %v", err)
	}
	src := string(api.YAML())
	edit := func(old, new string) []byte {
		t.Helper()
		if !strings.Contains(src, old) {
			t.Fatalf("the document has no %q", old)
		}
		return []byte(strings.Replace(src, old, new, 1))
	}
	invalid := []struct {
		name    string
		doc     []byte
		wantErr string
	}{
		{"another OpenAPI version", edit("openapi: 3.1.1", "openapi: 3.0.3"), "/openapi"},
		{"a tag without its name", edit("  - name: shopper\n", "  - title: shopper\n"), "/tags/0"},
		{"a reference to nothing outside a schema", edit("    description: gateway (USHER_GATEWAY_ADDR)\n",
			"    description: gateway (USHER_GATEWAY_ADDR)\n    $ref: '#/nowhere'\n"), "#/nowhere"},
	}
	for _, tt := range invalid {
		d, err := contract.New(tt.doc)
		if err != nil {
			t.Errorf("%s: New = %v, want a document ValidateDocument refuses", tt.name, err)
			continue
		}
		if err := d.ValidateDocument(); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: ValidateDocument = %v, want an error naming %q", tt.name, err, tt.wantErr)
		}
	}
	unusable := []struct {
		name    string
		doc     []byte
		wantErr string
	}{
		{"a schema referring to nothing", edit("schema: {$ref: '#/components/schemas/Order'}", "schema: {$ref: '#/components/schemas/Ordre'}"), "Ordre"},
		{"a response referring to nothing", edit("'500': {$ref: '#/components/responses/Internal'}", "'500': {$ref: '#/components/responses/Intern'}"), "Intern"},
		{"a pattern that is no regular expression", edit("pattern: '^[A-Za-z0-9._-]{1,64}$'", "pattern: '^[A-Za-z0-9._-]{1,64$('"), "SKU"},
		{"a security scheme not in components", edit("        - adminToken: []\n", "        - adminTokn: []\n"), "adminTokn"},
	}
	for _, tt := range unusable {
		if _, err := contract.New(tt.doc); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: New = %v, want an error naming %q", tt.name, err, tt.wantErr)
		}
	}
}

// A Doc checks exchanges from many goroutines at once (the race detector
// watches).
func TestContractChecksConcurrently(t *testing.T) {
	d, err := contract.Load()
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				req := httptest.NewRequest("GET", "/v1/queues/demo/tickets/t1.x", nil)
				res := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}}}
				if err := d.Check(contract.Gateway, req, nil, res, []byte(`{}`)); err == nil {
					t.Error("Check = nil, want the body's mismatches")
				}
				if err := d.CheckEvent("/v1/queues/{queue}/tickets/{ticket}/events", "GET", "position", []byte(`{"position":1,"waiting":1}`)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
}
