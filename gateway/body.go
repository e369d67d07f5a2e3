package main

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// decodeBody reads a request body into v the way the API document reads
// it: one JSON value and nothing after it, no field v does not have, and
// field names matched exactly and no null anywhere — encoding/json alone
// would take "TickMs" for "tickMs", and null for "leave the default",
// both of which the document refuses.
func decodeBody(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("unexpected data after the JSON value")
	}
	var generic any
	if err := json.Unmarshal(body, &generic); err != nil {
		return err
	}
	return exactNames(generic, reflect.TypeOf(v), "")
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// exactNames reports the object keys in v, a decoded JSON value, that name
// no field of t exactly (t's fields were matched already, but without regard
// to case) — every such key of the first object that has one, in name
// order — or the first null in v. Keys are visited in name order, so the
// same body always gets the same answer.
func exactNames(v any, t reflect.Type, at string) error {
	if v == nil {
		if at == "" {
			return errors.New("json: null is not a body")
		}
		return fmt.Errorf("json: %q is null; leave it out for its default", strings.TrimPrefix(at, "."))
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
		return nil // reads itself
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		fields := jsonFields(t)
		keys := slices.Sorted(maps.Keys(obj))
		var unknown []string
		for _, k := range keys {
			if _, ok := fields[k]; !ok {
				unknown = append(unknown, strconv.Quote(strings.TrimPrefix(at+"."+k, ".")))
			}
		}
		switch len(unknown) {
		case 0:
		case 1:
			return fmt.Errorf("json: unknown field %s (names are case-sensitive)", unknown[0])
		default:
			return fmt.Errorf("json: unknown fields %s (names are case-sensitive)", strings.Join(unknown, ", "))
		}
		for _, k := range keys {
			if err := exactNames(obj[k], fields[k], at+"."+k); err != nil {
				return err
			}
		}
	case reflect.Slice, reflect.Array:
		if arr, ok := v.([]any); ok {
			for _, e := range arr {
				if err := exactNames(e, t.Elem(), at); err != nil {
					return err
				}
			}
		}
	case reflect.Map:
		if obj, ok := v.(map[string]any); ok {
			for _, k := range slices.Sorted(maps.Keys(obj)) {
				if err := exactNames(obj[k], t.Elem(), at); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// jsonFields maps the JSON names of t's fields, embedded structs' included,
// to their types, as encoding/json names them.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	for _, f := range reflect.VisibleFields(t) {
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
			continue // its fields are visible fields themselves
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = f.Type
	}
	return fields
}
