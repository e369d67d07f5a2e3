package contract

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// printer renders the validator's messages.
var printer = message.NewPrinter(language.English)

// oas31JSON is the OpenAPI Initiative's JSON Schema of an OpenAPI 3.1
// document (https://spec.openapis.org/oas/3.1/schema/2022-10-07), which
// leaves the schemas in it to their own dialect: its one outside reference
// is the 2020-12 meta-schema, which the compiler carries.
//
//go:embed oas31-schema.json
var oas31JSON []byte

const oas31ID = "https://spec.openapis.org/oas/3.1/schema/2022-10-07"

// oas31 is oas31JSON compiled.
var oas31 = sync.OnceValues(func() (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(oas31JSON))
	if err != nil {
		return nil, err
	}
	c := newCompiler()
	if err := c.AddResource(oas31ID, doc); err != nil {
		return nil, err
	}
	return c.Compile(oas31ID)
})

// ValidateDocument checks the document against the OpenAPI 3.1 schema, and
// that every $ref in it names something in it. (Every schema of it
// compiles, its references resolved: New compiled them all.)
func (d *Doc) ValidateDocument() error {
	meta, err := oas31()
	if err != nil {
		return fmt.Errorf("the OpenAPI 3.1 schema: %w", err)
	}
	var msgs []string
	if err := meta.Validate(any(d.raw)); err != nil {
		msgs = append(msgs, "not an OpenAPI 3.1 document: "+describe(err))
	}
	var walk func(v any, ptr string)
	walk = func(v any, ptr string) {
		switch v := v.(type) {
		case map[string]any:
			if ref, ok := v["$ref"].(string); ok {
				if !strings.HasPrefix(ref, "#") {
					msgs = append(msgs, fmt.Sprintf("%s: $ref %q is outside the document", ptr, ref))
				} else if _, ok := d.lookup(refPointer(ref)); !ok {
					msgs = append(msgs, fmt.Sprintf("%s: $ref %q names nothing in the document", ptr, ref))
				}
			}
			for _, k := range keys(v) {
				walk(v[k], ptr+"/"+escape(k))
			}
		case []any:
			for i, e := range v {
				walk(e, fmt.Sprintf("%s/%d", ptr, i))
			}
		}
	}
	walk(d.raw, "#")
	if len(msgs) == 0 {
		return nil
	}
	return errors.New(strings.Join(msgs, "; "))
}

// describe renders a validation error in one line: each mismatch at the
// bottom of its tree, as the instance's JSON pointer (none: the value
// itself) and what is wrong there.
func describe(err error) string {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return err.Error()
	}
	var out []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		if _, ok := e.ErrorKind.(*kind.Schema); ok {
			return
		}
		s := e.ErrorKind.LocalizedString(printer)
		if _, ok := e.ErrorKind.(*kind.FalseSchema); ok {
			// A false schema is a keyword's "nothing more": name it.
			s = "not allowed by " + e.SchemaURL[strings.LastIndexByte(e.SchemaURL, '/')+1:]
		}
		if loc := instancePointer(e.InstanceLocation); loc != "" {
			s = loc + ": " + s
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	walk(ve)
	if len(out) == 0 {
		return strings.ReplaceAll(ve.Error(), "\n", " ")
	}
	return strings.Join(out, "; ")
}

func instancePointer(toks []string) string {
	var sb strings.Builder
	for _, t := range toks {
		sb.WriteString("/" + escape(t))
	}
	return sb.String()
}
