// Package contract checks real HTTP exchanges against usher's OpenAPI
// document (package api), for the gateway's and the notifier's tests: every
// request and response their test suites make goes through Check, so a
// handler whose answers leave the document — a field renamed, a status or
// problem type added, a header dropped — fails a test that names the path
// and the mismatch.
//
// The document's schemas are JSON Schema 2020-12, as OpenAPI 3.1 says;
// santhosh-tekuri/jsonschema validates against them, formats asserted
// (a date-time must be one). The OpenAPI around them is read here, and an
// exchange is held to it:
//
//   - The request: its path, query, header and cookie parameters — the
//     required ones present, each value read as its schema's type (an
//     integer, a number, a boolean; an array split as the form or simple
//     style writes it) and valid against the schema; the operation's
//     security (else the document's), one of its requirements met: an
//     apiKey in its header, query or cookie, an http scheme's name leading
//     Authorization; its body present when required, of a media type the
//     operation takes, valid against the schema when JSON or a form
//     (application/x-www-form-urlencoded, each field read as its
//     property's type).
//   - The response: its status one the operation declares (exactly, as
//     2XX, or default); its Content-Type one the response lists, unless the
//     response lists none; a JSON body (application/json, anything +json)
//     valid against its schema; the headers the response marks required
//     present, and every declared header valid against its schema.
//   - A request the document refuses (a missing identity, a bad body, a
//     malformed header) must be answered 4xx: a service that accepts what
//     the document says it refuses has drifted from it.
//   - A path or method the document does not give the service must be
//     answered 404 not-found, or 405 method-not-allowed on a path whose
//     x-usher-other-methods says so, as a problem document.
//   - A problem document's type must be one of the slugs its response lists
//     in x-usher-problem-types, and its status the response's.
//   - A request body is read as JSON whatever its Content-Type says (as the
//     services read it).
//   - Server-Sent Events: each event's name must be one the response lists
//     in x-sse-events, its data valid against the schema named there.
//
// What a test exchange cannot show is not checked: oauth2, openIdConnect
// and mutualTLS requirements count as met.
package contract

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"usher/api"
)

// Services, as the document's x-usher-service names them.
const (
	Gateway      = "gateway"
	GatewayAdmin = "gateway-admin"
	Notifier     = "notifier"
)

// Doc is the document, ready to check exchanges. Everything a check needs
// is read and compiled by New and never written after, so a Doc is safe
// for concurrent use without a lock (a gateway browser test's tabs check
// their requests at once, each on its own fasthttp goroutine).
type Doc struct {
	raw     map[string]any                // the JSON document (numbers as json.Number)
	schemas map[string]*jsonschema.Schema // by JSON pointer: "#/components/schemas/Place"
	routes  []route
	ops     map[string]*operation // by "METHOD /template"
}

// route is one path of the document.
type route struct {
	template string
	segments []string
	services []string
	methods  []string // upper case
}

// Load is the document, parsed once.
var Load = sync.OnceValues(func() (*Doc, error) { return New(api.JSON()) })

// New parses a JSON or YAML OpenAPI document and compiles every schema a
// check may need: each component schema, and each parameter's, body's,
// response's and response header's schema where it stands.
func New(spec []byte) (*Doc, error) {
	js, err := api.ToJSON(spec) // JSON is YAML too
	if err != nil {
		return nil, fmt.Errorf("parse the document: %w", err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(js))
	if err != nil {
		return nil, fmt.Errorf("parse the document: %w", err)
	}
	raw, ok := doc.(map[string]any)
	if !ok {
		return nil, errors.New("the document is not a JSON object")
	}
	d := &Doc{raw: raw, schemas: map[string]*jsonschema.Schema{}, ops: map[string]*operation{}}
	c := newCompiler()
	if err := c.AddResource(docURL, doc); err != nil {
		return nil, err
	}
	b := &builder{d: d, c: c}
	if err := b.build(); err != nil {
		return nil, err
	}
	return d, nil
}

// Routes lists the document's operations served by service, as
// "METHOD /template" (templates in OpenAPI form, /v1/queues/{queue}).
func (d *Doc) Routes(service string) []string {
	var out []string
	for _, r := range d.routes {
		if !slices.Contains(r.services, service) {
			continue
		}
		for _, m := range r.methods {
			out = append(out, m+" "+r.template)
		}
	}
	slices.Sort(out)
	return out
}

// find is the document's path template that serves path on service, and
// whether it has method.
func (d *Doc) find(service, method, path string) (tmpl string, hasMethod bool) {
	// Exactly: a trailing slash makes another path, which no route serves.
	segs := strings.Split(strings.TrimPrefix(path, "/"), "/")
	best, bestLiterals := -1, -1
	for i, r := range d.routes {
		if len(r.segments) != len(segs) || !slices.Contains(r.services, service) {
			continue
		}
		literals, ok := 0, true
		for j, s := range r.segments {
			switch {
			case isParamSegment(s):
				ok = ok && segs[j] != ""
			case s == segs[j]:
				literals++
			default:
				ok = false
			}
		}
		if ok && literals > bestLiterals {
			best, bestLiterals = i, literals
		}
	}
	if best < 0 {
		return "", false
	}
	r := d.routes[best]
	return r.template, slices.Contains(r.methods, method) || (method == http.MethodHead && slices.Contains(r.methods, http.MethodGet))
}

func isParamSegment(s string) bool { return strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}") }

// Check validates one exchange of service: req with its body, res with its
// body (nil for an event stream, whose events CheckEvent takes). It returns
// what does not match the document, or nil.
func (d *Doc) Check(service string, req *http.Request, reqBody []byte, res *http.Response, resBody []byte) error {
	// The path's template is found by the path as the service routes it:
	// escaped (an escaped slash is no segment boundary); each path
	// parameter is then decoded once, as OpenAPI reads one (%64emo is demo).
	tmpl, hasMethod := d.find(service, req.Method, req.URL.EscapedPath())
	req = d.requestOf(req, reqBody, tmpl)
	if tmpl == "" || !hasMethod {
		return d.checkUnknown(service, tmpl, req, res, resBody)
	}
	if req.Method == http.MethodHead {
		return nil // HEAD: GET's answer without its body
	}
	op := d.ops[req.Method+" "+tmpl]
	var msgs []string
	if refused := op.checkRequest(req, tmpl, reqBody); len(refused) > 0 && res.StatusCode < 400 {
		msgs = append(msgs, fmt.Sprintf("the document refuses this request (%s), but %s answered %d",
			strings.Join(refused, "; "), service, res.StatusCode))
	}
	if errs := op.checkResponse(res, resBody); len(errs) > 0 {
		msgs = append(msgs, "response: "+strings.Join(errs, "; "))
	}
	stream := resBody == nil && mediaType(res.Header.Get("Content-Type")) == "text/event-stream"
	if !stream && mediaType(res.Header.Get("Content-Type")) == "application/problem+json" {
		if err := op.checkProblem(res.StatusCode, resBody); err != nil {
			msgs = append(msgs, err.Error())
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return fmt.Errorf("%s %s (the document's %s) → %d %s: %s", req.Method, req.URL.EscapedPath(), tmpl,
		res.StatusCode, res.Header.Get("Content-Type"), strings.Join(msgs, "; "))
}

// checkUnknown holds a request the document does not give service to the
// catch-all answer: 404 not-found, or 405 on a known path that says so.
func (d *Doc) checkUnknown(service, tmpl string, req *http.Request, res *http.Response, body []byte) error {
	want, slug := http.StatusNotFound, "not-found"
	if tmpl != "" && d.pathExtension(tmpl, "x-usher-other-methods") != nil {
		want, slug = http.StatusMethodNotAllowed, "method-not-allowed"
	}
	where := fmt.Sprintf("%s %s (not in the document for the %s)", req.Method, req.URL.EscapedPath(), service)
	if res.StatusCode != want {
		return fmt.Errorf("%s → %d, want %d %s", where, res.StatusCode, want, slug)
	}
	if req.Method == http.MethodHead {
		return nil
	}
	if err := d.validProblem(body); err != nil {
		return fmt.Errorf("%s → %d: %w", where, res.StatusCode, err)
	}
	var p struct {
		Type   string `json:"type"`
		Status int    `json:"status"`
	}
	_ = json.Unmarshal(body, &p)
	if p.Type != problemBase+slug || p.Status != want {
		return fmt.Errorf("%s → problem %s status %d, want %s%s %d", where, p.Type, p.Status, problemBase, slug, want)
	}
	return nil
}

const problemBase = "https://usher.dev/problems/"

// validProblem checks body against the Problem schema.
func (d *Doc) validProblem(body []byte) error {
	s := d.schemas["#/components/schemas/Problem"]
	if s == nil {
		return errors.New("the document has no Problem schema")
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("not a Problem (not JSON: %v): %s", err, body)
	}
	if err := s.Validate(v); err != nil {
		return fmt.Errorf("not a Problem (%s): %s", describe(err), body)
	}
	return nil
}

// checkProblem holds a problem document to its response's problem types
// and status.
func (o *operation) checkProblem(status int, body []byte) error {
	var p struct {
		Type   string `json:"type"`
		Status int    `json:"status"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return fmt.Errorf("problem document: %w", err)
	}
	if p.Status != status {
		return fmt.Errorf("problem status %d in a %d answer", p.Status, status)
	}
	r, code := o.response(status)
	if r == nil {
		return nil // the response check names the undeclared status
	}
	if len(r.problemTypes) == 0 {
		return fmt.Errorf("the document's %s response lists no x-usher-problem-types", code)
	}
	slug, _ := strings.CutPrefix(p.Type, problemBase)
	if slices.Contains(r.problemTypes, slug) {
		return nil
	}
	return fmt.Errorf("problem type %q is not one the document lists for %d (%v)", slug, status, r.problemTypes)
}

func (d *Doc) pathExtension(tmpl, name string) any {
	return asMap(asMap(d.raw["paths"])[tmpl])[name]
}

// Events is the event names the document gives the 200 stream of method
// tmpl, each with its schema's name.
func (d *Doc) Events(tmpl, method string) map[string]string {
	out := map[string]string{}
	op := d.ops[strings.ToUpper(method)+" "+tmpl]
	if op == nil {
		return out
	}
	r, _ := op.response(http.StatusOK)
	if r == nil {
		return out
	}
	for name, ref := range r.events {
		out[name] = strings.TrimPrefix(ref, "#/components/schemas/")
	}
	return out
}

// CheckEvent validates one Server-Sent Event of the stream of method tmpl
// (say GET /v1/queues/{queue}/tickets/{ticket}/events): its name must be
// one the document lists, its data valid against that event's schema.
func (d *Doc) CheckEvent(tmpl, method, name string, data []byte) error {
	events := d.Events(tmpl, method)
	if len(events) == 0 {
		return fmt.Errorf("%s %s: the document lists no x-sse-events", method, tmpl)
	}
	schemaName, ok := events[name]
	if !ok {
		return fmt.Errorf("%s %s: event %q is not in the document (it lists %v)", method, tmpl, name, keys(events))
	}
	s := d.schemas["#/components/schemas/"+schemaName]
	if s == nil {
		return fmt.Errorf("%s %s: event %q names schema %q, which the document lacks", method, tmpl, name, schemaName)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("%s %s: event %s data %s is not JSON: %v", method, tmpl, name, data, err)
	}
	if err := s.Validate(v); err != nil {
		return fmt.Errorf("%s %s: event %s data %s does not match %s: %s", method, tmpl, name, data, schemaName, describe(err))
	}
	return nil
}

// requestOf is req as the checks should see it: each header field's value
// as the service reads it, and its Content-Type the operation's body type
// when it names a type the operation does not take (the services read a
// JSON body as JSON whatever it says: curl -d sends a form's type).
func (d *Doc) requestOf(req *http.Request, body []byte, tmpl string) *http.Request {
	r := req.Clone(req.Context())
	// A field's value as the service reads it: without the spaces and tabs
	// around it (RFC 9110 §5.5), which the wire does not carry as part of
	// it — " Bearer x" is the Authorization "Bearer x".
	for _, vs := range r.Header {
		for i, v := range vs {
			vs[i] = strings.Trim(v, " \t")
		}
	}
	r.Body = http.NoBody
	r.ContentLength = int64(len(body))
	if op := d.ops[req.Method+" "+tmpl]; op != nil && op.body != nil && len(body) > 0 {
		if types := op.body.types; len(types) > 0 && !slices.Contains(types, mediaType(r.Header.Get("Content-Type"))) {
			r.Header.Set("Content-Type", types[0])
		}
	}
	return r
}

func mediaType(ct string) string {
	t, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return strings.ToLower(strings.TrimSpace(ct))
	}
	return t
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
