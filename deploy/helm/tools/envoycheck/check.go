package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"sigs.k8s.io/yaml"

	// The filters docs/integration.md configures: importing them registers
	// their types, so that their typed_config "@type" URLs resolve. Any
	// other filter's type is refused as unresolvable.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	router "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
)

// result is what a check found besides its error.
type result struct {
	filters  int
	warnings []string
}

// validator is the method protoc-gen-validate generates on every Envoy
// API message: every rule the API declares, every violation reported.
type validator interface {
	ValidateAll() error
}

// check decodes YAML holding an http_filters list into Envoy's
// HttpConnectionManager, then validates each filter and its typed_config.
func check(raw []byte) (result, error) {
	filters, err := decodeFilters(raw)
	if err != nil {
		return result{}, err
	}
	res := result{filters: len(filters)}
	for i, f := range filters {
		where := fmt.Sprintf("http filter %q (http_filters[%d])", f.GetName(), i)
		if err := f.ValidateAll(); err != nil {
			return res, fmt.Errorf("%s: %w", where, err)
		}
		for _, d := range deprecatedFields(f.ProtoReflect(), "") {
			res.warnings = append(res.warnings, fmt.Sprintf("%s: deprecated field %s", where, d))
		}
		if f.GetTypedConfig() == nil {
			return res, fmt.Errorf("%s: no typed_config", where)
		}
		cfg, err := anypb.UnmarshalNew(f.GetTypedConfig(), proto.UnmarshalOptions{})
		if err != nil {
			return res, fmt.Errorf("%s: typed_config: %w", where, err)
		}
		if v, ok := cfg.(validator); ok {
			if err := v.ValidateAll(); err != nil {
				return res, fmt.Errorf("%s: typed_config: %w", where, err)
			}
		}
		for _, d := range deprecatedFields(cfg.ProtoReflect(), "typed_config") {
			res.warnings = append(res.warnings, fmt.Sprintf("%s: deprecated field %s", where, d))
		}
		if err := checkTerminal(cfg, i, len(filters)); err != nil {
			return res, fmt.Errorf("%s: %w", where, err)
		}
	}
	return res, nil
}

// checkTerminal holds Envoy's rule for a filter chain: the terminal filter
// (the router, of the filters known here) is the last one, and the last
// one is terminal.
func checkTerminal(cfg proto.Message, i, n int) error {
	_, terminal := cfg.(*router.Router)
	switch {
	case terminal && i != n-1:
		return errors.New("the router is a terminal filter and must be the last in the chain")
	case !terminal && i == n-1:
		return errors.New("the last filter of the chain must be a terminal filter (envoy.filters.http.router)")
	}
	return nil
}

// decodeFilters converts the YAML to JSON and decodes its http_filters
// list strictly (no unknown field, no wrong type, every Any resolved) into
// an HttpConnectionManager's. An error names the filter and the field.
func decodeFilters(raw []byte) ([]*hcm.HttpFilter, error) {
	js, err := yaml.YAMLToJSONStrict(raw)
	if err != nil {
		return nil, err
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(js, &top); err != nil {
		return nil, fmt.Errorf("want a mapping holding http_filters: %w", err)
	}
	list, ok := top["http_filters"]
	if !ok {
		return nil, errors.New("no http_filters list")
	}
	for k := range top {
		if k != "http_filters" {
			return nil, fmt.Errorf("%q: only an http_filters list is checked", k)
		}
	}
	doc := append(append([]byte(`{"http_filters":`), list...), '}')
	var m hcm.HttpConnectionManager
	if err := (protojson.UnmarshalOptions{}).Unmarshal(doc, &m); err != nil {
		return nil, locate(doc, err)
	}
	if len(m.GetHttpFilters()) == 0 {
		return nil, errors.New("http_filters is empty")
	}
	return m.GetHttpFilters(), nil
}

// position is where protojson's errors say they happened.
var position = regexp.MustCompile(`\(line (\d+):(\d+)\): `)

// locate rewrites a protojson error to name the filter and the field it
// happened at, a path the reader can find in the YAML, instead of a
// column of the JSON no one sees.
func locate(doc []byte, err error) error {
	text := err.Error()
	m := position.FindStringSubmatchIndex(text)
	if m == nil {
		return err
	}
	line, _ := strconv.Atoi(text[m[2]:m[3]])
	col, _ := strconv.Atoi(text[m[4]:m[5]])
	// protojson's text reads "proto: [syntax error ](line L:C): message",
	// with a space or a no-break space after the colon.
	msg := text[m[1]:]
	if kind := strings.Trim(strings.TrimPrefix(text[:m[0]], "proto:"), " \u00a0"); kind != "" {
		msg = kind + ": " + msg
	}
	path := pathAt(doc, offset(doc, line, col))
	i, ok := 0, len(path) >= 2
	if ok {
		i, ok = path[1].(int)
	}
	if !ok {
		return fmt.Errorf("field %s: %s", formatPath(path), msg)
	}
	var names struct {
		Filters []struct {
			Name string `json:"name"`
		} `json:"http_filters"`
	}
	_ = json.Unmarshal(doc, &names) // best effort: a name of the wrong type stays empty
	name := ""
	if i < len(names.Filters) {
		name = names.Filters[i].Name
	}
	where := fmt.Sprintf("http filter %q (http_filters[%d])", name, i)
	if len(path) == 2 {
		return fmt.Errorf("%s: %s", where, msg)
	}
	return fmt.Errorf("%s: field %s: %s", where, formatPath(path[2:]), msg)
}
