package httpapi

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
	"time"
)

// DecodeBody reads a request body into v the way the API document reads
// it: one JSON value and nothing after it, no field v does not have, and
// field names matched exactly, no name twice in one object, no null
// anywhere and times in RFC 3339's date-time form — encoding/json alone
// would take "TickMs" for "tickMs", the last of two "targetActive"s, null
// for "leave the default" and "2030-01-01T0:00:00Z" for a time, all of
// which the document refuses.
func DecodeBody(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) { // Decode's word for "nothing to read"
			return errors.New("the body is empty, want a JSON object")
		}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			// Said in the document's terms, not Go's ("cannot unmarshal
			// string into Go struct field Config.targetActive of type int").
			if te.Field == "" { // the body itself
				return fmt.Errorf("json: the body is %s, want %s", article(te.Value), jsonKind(te.Type))
			}
			if n, ok := strings.CutPrefix(te.Value, "number "); ok && isIntegerLiteral(n) &&
				!(strings.HasPrefix(n, "-") && jsonKind(te.Type) == "an integer of 0 or more") {
				// An integer the field's type cannot hold: "want an
				// integer" would be false, its size is what is wrong.
				return fmt.Errorf("json: %q is %s, an integer out of range", te.Field, n)
			}
			return fmt.Errorf("json: %q is %s, want %s", te.Field, article(te.Value), jsonKind(te.Type))
		}
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("unexpected data after the JSON value")
	}
	// The second reading, for what encoding/json does not check: the
	// body as plain values, read token by token so that a name twice in
	// one object is seen (decoded, the last would have replaced the first).
	walk := json.NewDecoder(bytes.NewReader(body))
	walk.UseNumber() // v's types checked the numbers
	generic, err := readOnce(walk, "")
	if err != nil {
		return err
	}
	return exactNames(generic, reflect.TypeOf(v), "")
}

// readOnce reads the next JSON value of dec as encoding/json reads one
// into an any (objects as map[string]any, arrays as []any), refusing an
// object that names a key twice, "at" being where the value is in the
// body. encoding/json would keep the last value — or, for two objects,
// merge them — so {"targetActive": 10, "targetActive": 100000} would apply
// 100000 where a proxy in front, a reviewer or the template's author read
// 10.
func readOnce(dec *json.Decoder, at string) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		obj := map[string]any{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return nil, err
			}
			k, _ := tok.(string) // a key is a string, or Token failed
			if _, ok := obj[k]; ok {
				return nil, fmt.Errorf("json: %q appears twice; give each name once", strings.TrimPrefix(at+"."+k, "."))
			}
			if obj[k], err = readOnce(dec, at+"."+k); err != nil {
				return nil, err
			}
		}
		_, err := dec.Token() // the closing brace
		return obj, err
	case json.Delim('['):
		arr := []any{}
		for dec.More() {
			e, err := readOnce(dec, at)
			if err != nil {
				return nil, err
			}
			arr = append(arr, e)
		}
		_, err := dec.Token() // the closing bracket
		return arr, err
	}
	return tok, nil
}

// isIntegerLiteral says whether a JSON number is written as an integer
// (an optional minus and digits: no fraction, no exponent).
func isIntegerLiteral(n string) bool {
	n = strings.TrimPrefix(n, "-")
	return n != "" && strings.Trim(n, "0123456789") == ""
}

// article is a JSON value's kind as UnmarshalTypeError names it ("string",
// "number", "number 1.5", "bool", "array", "object") with its article.
func article(v string) string {
	if strings.HasPrefix(v, "a") || strings.HasPrefix(v, "o") {
		return "an " + v
	}
	return "a " + v
}

// jsonKind says what JSON value a Go type of a body is read from.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer of 0 or more"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a value of another kind"
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
	timeType        = reflect.TypeFor[time.Time]()
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
	if s, ok := v.(string); ok && t == timeType && !dateTime(s) {
		return fmt.Errorf("json: %q is %q, not an RFC 3339 date-time (like 2030-01-01T09:00:00Z)", strings.TrimPrefix(at, "."), s)
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

// dateTime reports whether s has the form of an RFC 3339 date-time
// (§5.6): yyyy-mm-ddThh:mm:ss, an optional fraction, then Z or ±hh:mm.
// Go's time parsing, which checks the ranges, also takes one-digit hours.
func dateTime(s string) bool {
	if len(s) < len("2006-01-02T15:04:05Z") {
		return false
	}
	digits := func(b string) bool {
		for i := 0; i < len(b); i++ {
			if b[i] < '0' || b[i] > '9' {
				return false
			}
		}
		return len(b) > 0
	}
	if !digits(s[0:4]) || s[4] != '-' || !digits(s[5:7]) || s[7] != '-' || !digits(s[8:10]) ||
		(s[10] != 'T' && s[10] != 't') || !digits(s[11:13]) || s[13] != ':' || !digits(s[14:16]) || s[16] != ':' || !digits(s[17:19]) {
		return false
	}
	rest := s[19:]
	if rest[0] == '.' {
		n := 1
		for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
			n++
		}
		if n == 1 {
			return false
		}
		rest = rest[n:]
	}
	switch {
	case rest == "Z" || rest == "z":
		return true
	case len(rest) == 6 && (rest[0] == '+' || rest[0] == '-') && digits(rest[1:3]) && rest[3] == ':' && digits(rest[4:6]):
		return true
	}
	return false
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
