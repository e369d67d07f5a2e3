// Package contract checks real HTTP exchanges against usher's OpenAPI
// document (package api) with pb33f/libopenapi-validator, for the gateway's
// and the notifier's tests: every request and response their test suites
// make goes through Check, so a handler whose answers leave the document —
// a field renamed, a status or problem type added, a header dropped — fails
// a test that names the path and the mismatch.
//
// The rules, beyond what the validator checks on its own (parameters,
// security, bodies, declared status codes, required headers):
//
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
package contract

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	verrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	"github.com/pb33f/libopenapi/datamodel/high/base"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"

	"usher/api"
)

// Services, as the document's x-usher-service names them.
const (
	Gateway      = "gateway"
	GatewayAdmin = "gateway-admin"
	Notifier     = "notifier"
)

// Doc is the document, ready to check exchanges. It is safe for concurrent
// use: its checks take turns (mu), because libopenapi renders a schema for
// validation by writing into the shared model, a data race between two
// checks at once (seen under -race: a gateway browser test's tabs, each
// request checked by checkServed on its own fasthttp goroutine).
type Doc struct {
	mu      sync.Mutex // held by Check and CheckEvent
	v       validator.Validator
	model   *v3.Document
	raw     map[string]any // the JSON document, for its extensions
	schemas schema_validation.SchemaValidator
	ops     []route
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

// New parses a JSON or YAML OpenAPI document.
func New(spec []byte) (*Doc, error) {
	doc, err := libopenapi.NewDocument(spec)
	if err != nil {
		return nil, fmt.Errorf("parse the document: %w", err)
	}
	m, err := doc.BuildV3Model()
	if err != nil {
		return nil, fmt.Errorf("build the document's model: %w", err)
	}
	v, errs := validator.NewValidator(doc, config.WithFormatAssertions(), config.WithURLEncodedBodyValidation())
	if len(errs) > 0 {
		return nil, fmt.Errorf("build the validator: %w", errors.Join(errs...))
	}
	js, err := api.ToJSON(spec) // JSON is YAML too
	if err != nil {
		return nil, err
	}
	d := &Doc{v: v, model: &m.Model, schemas: schema_validation.NewSchemaValidator(config.WithFormatAssertions())}
	if err := json.Unmarshal(js, &d.raw); err != nil {
		return nil, err
	}
	paths, _ := d.raw["paths"].(map[string]any)
	for tmpl, item := range paths {
		it, _ := item.(map[string]any)
		r := route{template: tmpl, segments: strings.Split(strings.Trim(tmpl, "/"), "/")}
		for _, s := range asList(it["x-usher-service"]) {
			r.services = append(r.services, fmt.Sprint(s))
		}
		for k := range it {
			switch k {
			case "get", "put", "post", "delete", "options", "head", "patch", "trace":
				r.methods = append(r.methods, strings.ToUpper(k))
			}
		}
		d.ops = append(d.ops, r)
	}
	return d, nil
}

// ValidateDocument checks the document against the OpenAPI 3.1 schema.
func (d *Doc) ValidateDocument() error {
	ok, errs := d.v.ValidateDocument()
	if ok {
		return nil
	}
	return errors.New(describe(errs))
}

// Routes lists the document's operations served by service, as
// "METHOD /template" (templates in OpenAPI form, /v1/queues/{queue}).
func (d *Doc) Routes(service string) []string {
	var out []string
	for _, r := range d.ops {
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
	for i, r := range d.ops {
		if len(r.segments) != len(segs) || !slices.Contains(r.services, service) {
			continue
		}
		literals, ok := 0, true
		for j, s := range r.segments {
			switch {
			case strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}"):
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
	r := d.ops[best]
	return r.template, slices.Contains(r.methods, method) || (method == http.MethodHead && slices.Contains(r.methods, http.MethodGet))
}

// Check validates one exchange of service: req with its body, res with its
// body (nil for an event stream, whose events CheckEvent takes). It returns
// what does not match the document, or nil.
func (d *Doc) Check(service string, req *http.Request, reqBody []byte, res *http.Response, resBody []byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	// The path's template is found by the path as the service routes it:
	// escaped (an escaped slash is no segment boundary). The URL itself is
	// the validator's as sent: it splits the escaped path and decodes each
	// parameter once, as OpenAPI reads one (%64emo is demo); put the
	// escaped path in URL.Path and it decodes to what was sent (%64emo).
	tmpl, hasMethod := d.find(service, req.Method, req.URL.EscapedPath())
	req = d.requestOf(req, reqBody, tmpl)
	if tmpl == "" || !hasMethod {
		return d.checkUnknown(service, tmpl, req, res, resBody)
	}
	var msgs []string
	if req.Method == http.MethodHead {
		return nil // HEAD: GET's answer without its body
	}
	reqOK, reqErrs := d.v.ValidateHttpRequestSync(req)
	stream := resBody == nil && mediaType(res.Header.Get("Content-Type")) == "text/event-stream"
	rc := *res
	rc.Body = io.NopCloser(bytes.NewReader(resBody))
	if resBody == nil {
		rc.Body = http.NoBody
	}
	if !reqOK && res.StatusCode < 400 {
		msgs = append(msgs, fmt.Sprintf("the document refuses this request (%s), but %s answered %d", describe(reqErrs), service, res.StatusCode))
	}
	if resOK, resErrs := d.v.ValidateHttpResponse(req, &rc); !resOK {
		msgs = append(msgs, "response: "+describe(resErrs))
	}
	if !stream && mediaType(res.Header.Get("Content-Type")) == "application/problem+json" {
		if err := d.checkProblem(tmpl, req.Method, res.StatusCode, resBody); err != nil {
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
	s := d.schema("Problem")
	if s == nil {
		return errors.New("the document has no Problem schema")
	}
	if ok, errs := d.schemas.ValidateSchemaBytesWithVersion(s, body, 3.1); !ok {
		return fmt.Errorf("not a Problem (%s): %s", describe(errs), body)
	}
	return nil
}

// checkProblem holds a problem document to its response's problem types
// and status.
func (d *Doc) checkProblem(tmpl, method string, status int, body []byte) error {
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
	resp := d.response(tmpl, method, status)
	types := asList(resp["x-usher-problem-types"])
	if len(types) == 0 {
		return fmt.Errorf("the document's %d response lists no x-usher-problem-types", status)
	}
	slug, _ := strings.CutPrefix(p.Type, problemBase)
	for _, t := range types {
		if t == slug {
			return nil
		}
	}
	return fmt.Errorf("problem type %q is not one the document lists for %d (%v)", slug, status, types)
}

// response is the raw response object of an operation's status (its $ref
// resolved), or nil.
func (d *Doc) response(tmpl, method string, status int) map[string]any {
	op := d.operation(tmpl, method)
	rs, _ := op["responses"].(map[string]any)
	r, _ := rs[strconv.Itoa(status)].(map[string]any)
	if r == nil {
		r, _ = rs[fmt.Sprintf("%dXX", status/100)].(map[string]any)
	}
	return d.resolve(r)
}

// requestTypes is the media types the operation's request body may have.
func (d *Doc) requestTypes(tmpl, method string) []string {
	rb := d.resolve(asMap(d.operation(tmpl, method)["requestBody"]))
	var out []string
	for t := range asMap(rb["content"]) {
		out = append(out, t)
	}
	slices.Sort(out) // application/json before application/x-www-form-urlencoded
	return out
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func (d *Doc) operation(tmpl, method string) map[string]any {
	paths, _ := d.raw["paths"].(map[string]any)
	item, _ := paths[tmpl].(map[string]any)
	op, _ := item[strings.ToLower(method)].(map[string]any)
	return op
}

func (d *Doc) pathExtension(tmpl, name string) any {
	paths, _ := d.raw["paths"].(map[string]any)
	item, _ := paths[tmpl].(map[string]any)
	return item[name]
}

// resolve follows a local $ref.
func (d *Doc) resolve(obj map[string]any) map[string]any {
	for i := 0; i < 8 && obj != nil; i++ {
		ref, ok := obj["$ref"].(string)
		if !ok {
			return obj
		}
		var cur any = d.raw
		for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			m, _ := cur.(map[string]any)
			cur = m[part]
		}
		obj, _ = cur.(map[string]any)
	}
	return obj
}

// schema is a component schema of the model.
func (d *Doc) schema(name string) *base.Schema {
	if d.model.Components == nil || d.model.Components.Schemas == nil {
		return nil
	}
	p := d.model.Components.Schemas.GetOrZero(name)
	if p == nil {
		return nil
	}
	return p.Schema()
}

// Events is the event names the document gives the 200 stream of method
// tmpl, each with its schema's name.
func (d *Doc) Events(tmpl, method string) map[string]string {
	out := map[string]string{}
	ev, _ := d.response(tmpl, method, http.StatusOK)["x-sse-events"].(map[string]any)
	for name, ref := range ev {
		s, _ := ref.(string)
		out[name] = strings.TrimPrefix(s, "#/components/schemas/")
	}
	return out
}

// CheckEvent validates one Server-Sent Event of the stream of method tmpl
// (say GET /v1/queues/{queue}/tickets/{ticket}/events): its name must be
// one the document lists, its data valid against that event's schema.
func (d *Doc) CheckEvent(tmpl, method, name string, data []byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	events := d.Events(tmpl, method)
	if len(events) == 0 {
		return fmt.Errorf("%s %s: the document lists no x-sse-events", method, tmpl)
	}
	schemaName, ok := events[name]
	if !ok {
		return fmt.Errorf("%s %s: event %q is not in the document (it lists %v)", method, tmpl, name, keys(events))
	}
	s := d.schema(schemaName)
	if s == nil {
		return fmt.Errorf("%s %s: event %q names schema %q, which the document lacks", method, tmpl, name, schemaName)
	}
	if ok, errs := d.schemas.ValidateSchemaBytesWithVersion(s, data, 3.1); !ok {
		return fmt.Errorf("%s %s: event %s data %s does not match %s: %s", method, tmpl, name, data, schemaName, describe(errs))
	}
	return nil
}

// requestOf is req as the validator should see it: its body restored, and
// read as the operation's body type whatever its Content-Type says when
// that names a type the operation does not take (the services read a JSON
// body as JSON whatever it says: curl -d sends a form's type).
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
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	if types := d.requestTypes(tmpl, req.Method); len(body) > 0 && len(types) > 0 &&
		!slices.Contains(types, mediaType(r.Header.Get("Content-Type"))) {
		r.Header.Set("Content-Type", types[0])
	}
	if len(body) == 0 {
		r.Body = http.NoBody
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

// describe renders validation errors in one line each.
func describe(errs []*verrors.ValidationError) string {
	var parts []string
	for _, e := range errs {
		s := e.Message
		if e.Reason != "" {
			s += " (" + e.Reason + ")"
		}
		for _, f := range e.SchemaValidationErrors {
			loc := f.FieldPath
			if loc == "" {
				loc = f.KeywordLocation
			}
			s += fmt.Sprintf(" [%s: %s]", loc, f.Reason)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
