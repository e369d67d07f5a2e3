// Package api holds usher's HTTP contract: the OpenAPI 3.1 document of the
// gateway and the notifier. openapi.yaml is the source, kept by hand; the
// gateway serves it as JSON at GET /openapi.json (JSON returns it, with the
// source's key order). Package api/contract checks real requests and
// responses against it in tests.
package api

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"sync"

	"go.yaml.in/yaml/v3"
)

//go:embed openapi.yaml
var files embed.FS

// YAML is the document's source.
func YAML() []byte {
	b, err := files.ReadFile("openapi.yaml")
	if err != nil {
		panic(err) // embedded: cannot happen
	}
	return b
}

// JSON is the document as JSON, keys in the source's order; it panics if
// the source is not valid YAML (a test of this package says it is).
var JSON = sync.OnceValue(func() []byte {
	b, err := ToJSON(YAML())
	if err != nil {
		panic(err)
	}
	return b
})

// ToJSON converts a YAML document to JSON, keeping the order of mapping
// keys (encoding/json would sort them) and resolving anchors and aliases.
func ToJSON(src []byte) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := writeJSON(&out, &doc); err != nil {
		return nil, err
	}
	var check any
	if err := json.Unmarshal(out.Bytes(), &check); err != nil {
		return nil, fmt.Errorf("converted document is not JSON: %w", err)
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, out.Bytes(), "", " "); err != nil {
		return nil, err
	}
	pretty.WriteByte('\n')
	return pretty.Bytes(), nil
}

func writeJSON(w *bytes.Buffer, n *yaml.Node) error {
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) != 1 {
			return fmt.Errorf("line %d: want one document", n.Line)
		}
		return writeJSON(w, n.Content[0])
	case yaml.AliasNode:
		return writeJSON(w, n.Alias)
	case yaml.MappingNode:
		w.WriteByte('{')
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode || k.Tag == "!!merge" {
				return fmt.Errorf("line %d: only plain keys are supported", k.Line)
			}
			if i > 0 {
				w.WriteByte(',')
			}
			if err := marshal(w, k.Value); err != nil {
				return err
			}
			w.WriteByte(':')
			if err := writeJSON(w, v); err != nil {
				return err
			}
		}
		w.WriteByte('}')
	case yaml.SequenceNode:
		w.WriteByte('[')
		for i, v := range n.Content {
			if i > 0 {
				w.WriteByte(',')
			}
			if err := writeJSON(w, v); err != nil {
				return err
			}
		}
		w.WriteByte(']')
	case yaml.ScalarNode:
		var v any
		switch n.Tag {
		case "!!str", "!!timestamp", "!!binary":
			v = n.Value // a date stays the string it was written as
		default:
			if err := n.Decode(&v); err != nil {
				return fmt.Errorf("line %d: %w", n.Line, err)
			}
		}
		if err := marshal(w, v); err != nil {
			return fmt.Errorf("line %d: %w", n.Line, err)
		}
	default:
		return fmt.Errorf("line %d: unexpected YAML node", n.Line)
	}
	return nil
}

// marshal writes v as JSON without escaping <, > and & (descriptions are
// Markdown).
func marshal(w *bytes.Buffer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	w.Truncate(w.Len() - 1) // Encode's newline
	return nil
}
