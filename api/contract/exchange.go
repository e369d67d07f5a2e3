package contract

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// checkRequest is what the document refuses in req (whose Content-Type
// requestOf set) with its body, one line each.
func (o *operation) checkRequest(req *http.Request, tmpl string, body []byte) []string {
	path, errs := pathParams(req, tmpl)
	query, _ := url.ParseQuery(req.URL.RawQuery)
	for _, p := range o.params {
		errs = append(errs, p.check(p.values(req, path, query))...)
	}
	if o.secured && !o.authorized(req) {
		var alts []string
		for _, all := range o.security {
			var names []string
			for _, c := range all {
				names = append(names, c.String())
			}
			alts = append(alts, strings.Join(names, " and "))
		}
		errs = append(errs, "no credentials the document asks for: "+strings.Join(alts, " or "))
	}
	if o.body != nil {
		errs = append(errs, o.body.check(req.Header.Get("Content-Type"), body)...)
	}
	return errs
}

// pathParams is req's path parameters by the template's segments, each
// decoded once, and what could not be decoded.
func pathParams(req *http.Request, tmpl string) (map[string]string, []string) {
	var errs []string
	path := map[string]string{}
	segs := strings.Split(strings.TrimPrefix(req.URL.EscapedPath(), "/"), "/")
	for j, s := range strings.Split(strings.Trim(tmpl, "/"), "/") {
		if !isParamSegment(s) || j >= len(segs) {
			continue
		}
		name := s[1 : len(s)-1]
		v, err := url.PathUnescape(segs[j])
		if err != nil {
			errs = append(errs, fmt.Sprintf("path parameter %s %q: not percent-encoded text", name, segs[j]))
			continue
		}
		path[name] = v
	}
	return path, errs
}

// values is what req sends for p (nil: absent).
func (p *param) values(req *http.Request, path map[string]string, query url.Values) []string {
	switch p.in {
	case "path":
		if v, ok := path[p.name]; ok {
			return []string{v}
		}
	case "query":
		return query[p.name]
	case "header":
		if v := req.Header.Get(p.name); v != "" {
			return []string{v}
		}
	case "cookie":
		if c, err := req.Cookie(p.name); err == nil {
			return []string{c.Value}
		}
	}
	return nil
}

// check is what p's schema refuses in vals, one line each.
func (p *param) check(vals []string) []string {
	if vals == nil {
		if p.required {
			return []string{fmt.Sprintf("%s parameter %s is required and missing", p.in, p.name)}
		}
		return nil
	}
	if p.schema == nil {
		return nil
	}
	if p.explode && len(vals) > 1 && slices.Contains(p.types, "array") {
		// A form array exploded: one field per item.
		items := make([]any, len(vals))
		for i, v := range vals {
			items[i] = read(v, p.items, nil)[0]
		}
		if msg := valid(p.schema, []any{items}); msg != "" {
			return []string{fmt.Sprintf("%s parameter %s %q: %s", p.in, p.name, vals, msg)}
		}
		return nil
	}
	var errs []string
	for _, v := range vals {
		if msg := valid(p.schema, read(v, p.types, p.items)); msg != "" {
			errs = append(errs, fmt.Sprintf("%s parameter %s %q: %s", p.in, p.name, v, msg))
		}
	}
	return errs
}

// authorized says whether req meets one of the operation's security
// requirements: every credential of it present.
func (o *operation) authorized(req *http.Request) bool {
	for _, all := range o.security {
		ok := true
		for _, c := range all {
			ok = ok && c.present(req)
		}
		if ok {
			return true // an empty requirement ({}) too: none needed
		}
	}
	return false
}

func (c credential) present(req *http.Request) bool {
	switch c.typ {
	case "apiKey":
		switch c.in {
		case "header":
			return req.Header.Get(c.name) != ""
		case "query":
			return req.URL.Query().Get(c.name) != ""
		case "cookie":
			_, err := req.Cookie(c.name)
			return err == nil
		}
		return false
	case "http":
		// The scheme's name in any case, then its credentials after a
		// space (RFC 9110 §11.4).
		scheme, _, _ := strings.Cut(req.Header.Get("Authorization"), " ")
		return scheme != "" && strings.EqualFold(scheme, c.scheme)
	}
	return true // oauth2, openIdConnect, mutualTLS: nothing a test exchange shows
}

// check is what the document refuses in a request body of Content-Type ct.
func (b *requestBody) check(ct string, body []byte) []string {
	if len(body) == 0 {
		if b.required {
			return []string{"the request body is required and missing"}
		}
		return nil
	}
	mt := mediaType(ct)
	m, ok := matchMedia(b.content, mt)
	if !ok {
		return []string{fmt.Sprintf("request Content-Type %q is not one the operation takes (%s)", ct, strings.Join(b.types, ", "))}
	}
	if m.schema == nil {
		return nil
	}
	var v any
	switch {
	case isJSON(mt):
		var err error
		if v, err = jsonschema.UnmarshalJSON(bytes.NewReader(body)); err != nil {
			return []string{fmt.Sprintf("the request body is not JSON: %v", err)}
		}
	case mt == "application/x-www-form-urlencoded":
		var err error
		if v, err = m.form(body); err != nil {
			return []string{fmt.Sprintf("the request body is not a form: %v", err)}
		}
	default:
		return nil // text, bytes: no schema of ours speaks of them
	}
	if err := m.schema.Validate(v); err != nil {
		return []string{"request body: " + describe(err)}
	}
	return nil
}

// form is a form's fields as an object, each read as its property's type:
// an array from every field of its name, anything else from the first.
func (m *media) form(body []byte) (map[string]any, error) {
	vals, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, err
	}
	obj := map[string]any{}
	for name, vs := range vals {
		f := m.props[name]
		if slices.Contains(f.types, "array") {
			items := make([]any, len(vs))
			for i, v := range vs {
				items[i] = read(v, f.items, nil)[0]
			}
			obj[name] = items
			continue
		}
		obj[name] = read(vs[0], f.types, f.items)[0]
	}
	return obj, nil
}

// checkResponse is what does not match the document in res with its body
// (nil for a stream), one line each.
func (o *operation) checkResponse(res *http.Response, body []byte) []string {
	r, code := o.response(res.StatusCode)
	if r == nil {
		return []string{fmt.Sprintf("status %d is not one the document gives this operation (%s)",
			res.StatusCode, strings.Join(o.codes(), ", "))}
	}
	var errs []string
	if len(r.content) > 0 {
		ct := res.Header.Get("Content-Type")
		mt := mediaType(ct)
		m, ok := matchMedia(r.content, mt)
		switch {
		case !ok:
			errs = append(errs, fmt.Sprintf("Content-Type %q is not one the %s response lists (%s)", ct, code, strings.Join(keys(r.content), ", ")))
		case m.schema != nil && isJSON(mt):
			v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
			if err != nil {
				errs = append(errs, fmt.Sprintf("the body is not JSON (%v): %.200q", err, body))
			} else if err := m.schema.Validate(v); err != nil {
				errs = append(errs, "body: "+describe(err))
			}
		}
	}
	for _, h := range r.headers {
		vals := headerValues(res.Header, h.name)
		if len(vals) == 0 {
			if h.required {
				errs = append(errs, fmt.Sprintf("the %s response's required header %s is missing", code, h.name))
			}
			continue
		}
		if h.schema == nil {
			continue
		}
		for _, v := range vals {
			if msg := valid(h.schema, read(v, h.types, h.items)); msg != "" {
				errs = append(errs, fmt.Sprintf("header %s %q: %s", h.name, v, msg))
			}
		}
	}
	return errs
}

// headerValues is the values of the header field name, whatever the case
// of the key it was stored under.
func headerValues(h http.Header, name string) []string {
	if vs, ok := h[http.CanonicalHeaderKey(name)]; ok {
		return vs
	}
	for k, vs := range h {
		if strings.EqualFold(k, name) {
			return vs
		}
	}
	return nil
}

// read is the values text may stand for as an instance of a schema of
// types: each type's reading that parses, in the schema's order (an array
// split at its commas, as the simple and the unexploded form style write
// it), and the text itself last.
func read(text string, types, items []string) []any {
	var out []any
	for _, t := range types {
		switch t {
		case "integer", "number":
			if n, ok := number(text); ok {
				out = append(out, n)
			}
		case "boolean":
			if text == "true" || text == "false" {
				out = append(out, text == "true")
			}
		case "null":
			if text == "" {
				out = append(out, nil)
			}
		case "array":
			parts := strings.Split(text, ",")
			arr := make([]any, len(parts))
			for i, p := range parts {
				arr[i] = read(p, items, nil)[0]
			}
			out = append(out, arr)
		case "object":
			if v, err := jsonschema.UnmarshalJSON(strings.NewReader(text)); err == nil {
				out = append(out, v)
			}
		}
	}
	return append(out, text)
}

// number is text as a JSON number when it is a decimal one: "05" (HTTP's
// delay-seconds may have leading zeros), "+1.5" and "1e3" alike, but no
// hexadecimal, no NaN and no infinity.
func number(text string) (json.Number, bool) {
	notDecimal := func(r rune) bool { return (r < '0' || r > '9') && !strings.ContainsRune("+-.eE", r) }
	if text == "" || strings.ContainsFunc(text, notDecimal) {
		return "", false
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return "", false
	}
	digits := strings.TrimLeft(text, "+-")
	if len(text)-len(digits) <= 1 && !strings.ContainsAny(digits, ".eE") {
		// An integer, kept exact whatever its size.
		digits = strings.TrimLeft(digits, "0")
		switch {
		case digits == "":
			digits = "0"
		case text[0] == '-':
			digits = "-" + digits
		}
		return json.Number(digits), true
	}
	return json.Number(strconv.FormatFloat(f, 'g', -1, 64)), true
}

// valid is "" when one of the readings of a value is valid against s, else
// the first reading's mismatch.
func valid(s *jsonschema.Schema, readings []any) string {
	first := ""
	for i, v := range readings {
		err := s.Validate(v)
		if err == nil {
			return ""
		}
		if i == 0 {
			first = describe(err)
		}
	}
	return first
}
