package contract

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// docURL names the document as a JSON Schema resource: its schemas are
// compiled as docURL#/components/schemas/Name, and the inline ones by
// their JSON pointer. Nothing is fetched from it: the compiler has the
// document, and loads nothing else (newCompiler).
const docURL = "https://usher.dev/openapi.json"

// newCompiler compiles JSON Schema 2020-12, format assertions on, from the
// resources it is given and the drafts' own meta-schemas alone: no file
// and no URL is ever read.
func newCompiler() *jsonschema.Compiler {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(jsonschema.SchemeURLLoader{})
	return c
}

// operation is what the document says of one method of one path.
type operation struct {
	params    []param
	secured   bool           // the operation, or the document, has security
	security  [][]credential // any one requirement, all of its credentials
	body      *requestBody   // nil: the operation takes no body
	responses map[string]*response
}

// field is a value that travels as text — a parameter, a header, a form
// field — and the schema it is read by.
type field struct {
	schema *jsonschema.Schema // nil: any value
	types  []string           // the schema's types, in its order
	items  []string           // an array's items' types
}

// param is one parameter of an operation.
type param struct {
	field
	name, in string
	required bool
	explode  bool // a query or cookie array as repeated fields
}

// credential is one security scheme of a requirement.
type credential struct {
	id     string // the scheme's name in components
	typ    string // apiKey, http, ...
	in     string // apiKey: header, query or cookie
	name   string // apiKey: the header, query or cookie name
	scheme string // http: bearer, basic, ...
}

func (c credential) String() string {
	switch c.typ {
	case "apiKey":
		return fmt.Sprintf("%s %s (%s)", c.name, c.in, c.id)
	case "http":
		return fmt.Sprintf("Authorization: %s (%s)", c.scheme, c.id)
	}
	return c.id
}

type requestBody struct {
	required bool
	content  map[string]*media // by media type or range, lower case
	types    []string          // content's keys, sorted
}

// media is one media type of a body.
type media struct {
	schema *jsonschema.Schema // nil: no schema
	props  map[string]field   // a form's fields by name (the schema's properties)
}

type response struct {
	content      map[string]*media // by media type or range, lower case
	headers      []header
	problemTypes []string
	events       map[string]string // x-sse-events: name → schema reference
}

type header struct {
	field
	name     string
	required bool
}

// builder reads the document into Doc's operations, compiling schemas as
// it goes.
type builder struct {
	d *Doc
	c *jsonschema.Compiler
}

func (b *builder) build() error {
	d := b.d
	for tmpl, v := range asMap(d.raw["paths"]) {
		item, itemPtr := d.deref(asMap(v), "#/paths/"+escape(tmpl))
		r := route{template: tmpl, segments: strings.Split(strings.Trim(tmpl, "/"), "/")}
		for _, s := range asList(item["x-usher-service"]) {
			r.services = append(r.services, fmt.Sprint(s))
		}
		for k := range item {
			switch k {
			case "get", "put", "post", "delete", "options", "head", "patch", "trace":
				method := strings.ToUpper(k)
				r.methods = append(r.methods, method)
				op, err := b.operation(item, itemPtr, k)
				if err != nil {
					return fmt.Errorf("%s %s: %w", method, tmpl, err)
				}
				d.ops[method+" "+tmpl] = op
			}
		}
		d.routes = append(d.routes, r)
	}
	for _, name := range keys(asMap(asMap(d.raw["components"])["schemas"])) {
		if _, err := b.schema("#/components/schemas/" + escape(name)); err != nil {
			return err
		}
	}
	return nil
}

func (b *builder) operation(item map[string]any, itemPtr, method string) (*operation, error) {
	opPtr := itemPtr + "/" + method
	op := asMap(item[method])
	o := &operation{responses: map[string]*response{}}

	// The path item's parameters, each replaced by the operation's of the
	// same name and place.
	at := map[string]int{}
	for _, list := range []string{itemPtr, opPtr} {
		src, _ := b.d.lookup(list + "/parameters")
		for i, v := range asList(src) {
			p, err := b.param(asMap(v), fmt.Sprintf("%s/parameters/%d", list, i))
			if err != nil {
				return nil, err
			}
			if p == nil {
				continue
			}
			key := p.in + " " + p.name
			if p.in == "header" {
				key = p.in + " " + strings.ToLower(p.name)
			}
			if j, ok := at[key]; ok {
				o.params[j] = *p
				continue
			}
			at[key] = len(o.params)
			o.params = append(o.params, *p)
		}
	}

	sec, ok := op["security"]
	if !ok {
		sec = b.d.raw["security"]
	}
	for _, req := range asList(sec) {
		o.secured = true
		var all []credential
		for _, id := range keys(asMap(req)) {
			obj := asMap(asMap(b.d.raw["components"])["securitySchemes"])[id]
			s, _ := b.d.deref(asMap(obj), "")
			if s == nil {
				return nil, dangling(obj, "#/components/securitySchemes/"+escape(id), "security scheme")
			}
			all = append(all, credential{id: id, typ: str(s["type"]), in: str(s["in"]), name: str(s["name"]), scheme: str(s["scheme"])})
		}
		o.security = append(o.security, all)
	}

	if rb, rbPtr := b.d.deref(asMap(op["requestBody"]), opPtr+"/requestBody"); rb != nil {
		content, err := b.content(asMap(rb["content"]), rbPtr+"/content")
		if err != nil {
			return nil, err
		}
		o.body = &requestBody{required: rb["required"] == true, content: content, types: keys(content)}
	}

	for code, v := range asMap(op["responses"]) {
		r, rPtr := b.d.deref(asMap(v), opPtr+"/responses/"+escape(code))
		if r == nil {
			return nil, dangling(v, opPtr+"/responses/"+escape(code), "response")
		}
		resp, err := b.response(r, rPtr)
		if err != nil {
			return nil, fmt.Errorf("response %s: %w", code, err)
		}
		o.responses[strings.ToUpper(code)] = resp // 2xx is 2XX
	}
	return o, nil
}

// param reads a parameter object; nil for one OpenAPI says to ignore (a
// header named Accept, Content-Type or Authorization).
func (b *builder) param(obj map[string]any, at string) (*param, error) {
	v, ptr := b.d.deref(obj, at)
	if v == nil {
		return nil, dangling(obj, at, "parameter")
	}
	p := &param{name: str(v["name"]), in: str(v["in"]), required: v["required"] == true}
	if p.in == "header" {
		for _, ignored := range []string{"Accept", "Content-Type", "Authorization"} {
			if strings.EqualFold(p.name, ignored) {
				return nil, nil
			}
		}
	}
	// The styles a service is written in here; another would be read
	// wrongly, so the document using one is refused outright.
	style := str(v["style"])
	switch p.in {
	case "query", "cookie":
		if style != "" && style != "form" {
			return nil, fmt.Errorf("%s parameter %s: style %q is not one this checker reads (form)", p.in, p.name, style)
		}
		p.explode = true
	case "path", "header":
		if style != "" && style != "simple" {
			return nil, fmt.Errorf("%s parameter %s: style %q is not one this checker reads (simple)", p.in, p.name, style)
		}
	default:
		return nil, fmt.Errorf("parameter %s: in %q", p.name, p.in)
	}
	if e, ok := v["explode"].(bool); ok {
		p.explode = e
	}
	if _, ok := v["content"]; ok {
		return nil, fmt.Errorf("%s parameter %s: content is not one this checker reads (schema)", p.in, p.name)
	}
	f, err := b.field(v, ptr)
	if err != nil {
		return nil, err
	}
	p.field = f
	return p, nil
}

// field is the schema of obj (a parameter or a header), compiled.
func (b *builder) field(obj map[string]any, ptr string) (field, error) {
	s, ok := obj["schema"]
	if !ok {
		return field{}, nil
	}
	sch, err := b.schema(ptr + "/schema")
	if err != nil {
		return field{}, err
	}
	types, items := b.d.typesOf(s)
	return field{schema: sch, types: types, items: items}, nil
}

func (b *builder) content(c map[string]any, ptr string) (map[string]*media, error) {
	out := map[string]*media{}
	for mt, v := range c {
		m := &media{}
		if s, ok := asMap(v)["schema"]; ok {
			var err error
			if m.schema, err = b.schema(ptr + "/" + escape(mt) + "/schema"); err != nil {
				return nil, err
			}
			m.props = b.d.properties(s)
		}
		out[strings.ToLower(mt)] = m
	}
	return out, nil
}

func (b *builder) response(r map[string]any, ptr string) (*response, error) {
	content, err := b.content(asMap(r["content"]), ptr+"/content")
	if err != nil {
		return nil, err
	}
	resp := &response{content: content, events: map[string]string{}}
	for _, name := range keys(asMap(r["headers"])) {
		if strings.EqualFold(name, "Content-Type") {
			continue // OpenAPI: the content map says it
		}
		obj := asMap(r["headers"])[name]
		h, hPtr := b.d.deref(asMap(obj), ptr+"/headers/"+escape(name))
		if h == nil {
			return nil, dangling(obj, ptr+"/headers/"+escape(name), "header")
		}
		f, err := b.field(h, hPtr)
		if err != nil {
			return nil, err
		}
		resp.headers = append(resp.headers, header{field: f, name: name, required: h["required"] == true})
	}
	for _, t := range asList(r["x-usher-problem-types"]) {
		resp.problemTypes = append(resp.problemTypes, fmt.Sprint(t))
	}
	for name, ref := range asMap(r["x-sse-events"]) {
		p := refPointer(str(ref))
		if _, err := b.schema(p); err != nil {
			return nil, fmt.Errorf("x-sse-events %s: %w", name, err)
		}
		resp.events[name] = p
	}
	return resp, nil
}

// schema compiles the schema at ptr, a JSON pointer into the document, once.
func (b *builder) schema(ptr string) (*jsonschema.Schema, error) {
	if s, ok := b.d.schemas[ptr]; ok {
		return s, nil
	}
	if _, ok := b.d.lookup(ptr); !ok {
		return nil, fmt.Errorf("%s: no such schema in the document", ptr)
	}
	s, err := b.c.Compile(docURL + "#" + urlPointer(ptr))
	if err != nil {
		return nil, fmt.Errorf("compile %s: %w", ptr, err)
	}
	b.d.schemas[ptr] = s
	return s, nil
}

// typesOf is the types a schema (or what it refers to, or its allOf, anyOf
// and oneOf members) declares, in its order, and its items' types.
func (d *Doc) typesOf(s any) (types, items []string) {
	seen := map[string]bool{}
	var walk func(s any, depth int)
	walk = func(s any, depth int) {
		m := asMap(s)
		if m == nil || depth > 8 {
			return
		}
		var ts []any
		switch t := m["type"].(type) {
		case string:
			ts = []any{t}
		case []any:
			ts = t
		}
		for _, t := range ts {
			if t, ok := t.(string); ok && !seen[t] {
				seen[t] = true
				types = append(types, t)
			}
		}
		if it, ok := m["items"]; ok && items == nil {
			items, _ = d.typesOf(it)
		}
		if ref, ok := m["$ref"].(string); ok {
			v, _ := d.lookup(refPointer(ref))
			walk(v, depth+1)
		}
		for _, k := range []string{"allOf", "anyOf", "oneOf"} {
			for _, sub := range asList(m[k]) {
				walk(sub, depth+1)
			}
		}
	}
	walk(s, 0)
	return types, items
}

// properties is the fields of an object schema (and of its allOf members),
// each with its types, for reading a form.
func (d *Doc) properties(s any) map[string]field {
	out := map[string]field{}
	var walk func(s any, depth int)
	walk = func(s any, depth int) {
		m := asMap(s)
		if m == nil || depth > 8 {
			return
		}
		for name, p := range asMap(m["properties"]) {
			if _, ok := out[name]; !ok {
				types, items := d.typesOf(p)
				out[name] = field{types: types, items: items}
			}
		}
		if ref, ok := m["$ref"].(string); ok {
			v, _ := d.lookup(refPointer(ref))
			walk(v, depth+1)
		}
		for _, sub := range asList(m["allOf"]) {
			walk(sub, depth+1)
		}
	}
	walk(s, 0)
	return out
}

// dangling says why obj, at ptr, is no object of what kind.
func dangling(obj any, ptr, what string) error {
	if ref, ok := asMap(obj)["$ref"].(string); ok {
		return fmt.Errorf("%s: $ref %q names no %s in the document", ptr, ref, what)
	}
	return fmt.Errorf("%s: no %s", ptr, what)
}

// deref follows obj's $ref (a Reference Object's) to what it names,
// returning that and its pointer; obj and ptr when it refers to nothing.
func (d *Doc) deref(obj map[string]any, ptr string) (map[string]any, string) {
	for i := 0; i < 8 && obj != nil; i++ {
		ref, ok := obj["$ref"].(string)
		if !ok {
			return obj, ptr
		}
		ptr = refPointer(ref)
		v, _ := d.lookup(ptr)
		obj = asMap(v)
	}
	return obj, ptr
}

// lookup is the value at ptr, a JSON pointer into the document ("#/a/b").
func (d *Doc) lookup(ptr string) (any, bool) {
	frag, ok := strings.CutPrefix(ptr, "#")
	if !ok {
		return nil, false
	}
	var cur any = d.raw
	if frag == "" {
		return cur, true
	}
	if !strings.HasPrefix(frag, "/") {
		return nil, false
	}
	for _, tok := range strings.Split(frag[1:], "/") {
		tok = unescaper.Replace(tok)
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[tok]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

var (
	escaper   = strings.NewReplacer("~", "~0", "/", "~1")
	unescaper = strings.NewReplacer("~1", "/", "~0", "~")
)

// escape is a key as a token of a JSON pointer.
func escape(key string) string { return escaper.Replace(key) }

// refPointer is a $ref's JSON pointer: a URI fragment, percent-decoded.
func refPointer(ref string) string {
	if p, err := url.PathUnescape(ref); err == nil {
		return p
	}
	return ref
}

// urlPointer is ptr ("#/a/b") as a URI fragment, each token
// percent-encoded ({queue} is %7Bqueue%7D).
func urlPointer(ptr string) string {
	toks := strings.Split(strings.TrimPrefix(ptr, "#"), "/")
	for i, t := range toks {
		toks[i] = url.PathEscape(t)
	}
	return strings.Join(toks, "/")
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// matchMedia is the content entry for media type mt: the exact one, else
// the narrowest range that holds it (application/*+json, application/*,
// */json, */*).
func matchMedia(content map[string]*media, mt string) (*media, bool) {
	if m, ok := content[mt]; ok {
		return m, true
	}
	typ, sub, _ := strings.Cut(mt, "/")
	suffix := ""
	if i := strings.LastIndexByte(sub, '+'); i >= 0 {
		suffix = sub[i:]
	}
	for _, r := range []string{typ + "/*" + suffix, typ + "/*", "*/" + sub, "*/*"} {
		if m, ok := content[r]; ok {
			return m, true
		}
	}
	return nil, false
}

// isJSON says whether a media type is JSON: application/json, or any
// type with the +json suffix (application/problem+json).
func isJSON(mt string) bool {
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// response is the operation's response for status: the exact code's, else
// its class's (2XX), else default; and the code it is listed under.
func (o *operation) response(status int) (*response, string) {
	for _, code := range []string{strconv.Itoa(status), fmt.Sprintf("%dXX", status/100), "DEFAULT"} {
		if r, ok := o.responses[code]; ok {
			if code == "DEFAULT" {
				code = "default"
			}
			return r, code
		}
	}
	return nil, ""
}

// codes is the operation's response codes, for a message.
func (o *operation) codes() []string {
	out := keys(o.responses)
	for i, c := range out {
		if c == "DEFAULT" {
			out[i] = "default"
		}
	}
	return out
}
