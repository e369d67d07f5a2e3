package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// offset turns protojson's 1-based line and column (counted in runes) into
// a byte offset of doc.
func offset(doc []byte, line, col int) int {
	off := 0
	for ; line > 1; line-- {
		i := bytes.IndexByte(doc[off:], '\n')
		if i < 0 {
			return len(doc)
		}
		off += i + 1
	}
	for ; col > 1 && off < len(doc); col-- {
		_, size := utf8.DecodeRune(doc[off:])
		off += size
	}
	return off
}

// frame is one open JSON object or array on the way to an offset.
type frame struct {
	object  bool
	key     string
	index   int
	wantKey bool
}

// pathAt is the path (object keys as strings, array indexes as ints) of
// the JSON token at byte offset off of doc: a key's own path for a key, a
// value's for a value.
func pathAt(doc []byte, off int) []any {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return framesPath(stack)
		}
		reached := dec.InputOffset() > int64(off)
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if s, ok := tok.(string); ok && top != nil && top.object && top.wantKey {
			top.key, top.wantKey = s, false
			if reached {
				return framesPath(stack)
			}
			continue
		}
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			stack = stack[:len(stack)-1]
			if reached {
				return framesPath(stack)
			}
			valueDone(stack)
			continue
		}
		if reached {
			return framesPath(stack)
		}
		if d, ok := tok.(json.Delim); ok {
			stack = append(stack, &frame{object: d == '{', wantKey: d == '{'})
			continue
		}
		valueDone(stack)
	}
}

// valueDone moves the innermost container past the value just read.
func valueDone(stack []*frame) {
	if len(stack) == 0 {
		return
	}
	top := stack[len(stack)-1]
	if top.object {
		top.wantKey = true
	} else {
		top.index++
	}
}

func framesPath(stack []*frame) []any {
	var path []any
	for _, f := range stack {
		if f.object {
			if f.key != "" {
				path = append(path, f.key)
			}
		} else {
			path = append(path, f.index)
		}
	}
	return path
}

// formatPath writes a path as a reader finds it in the YAML:
// http_service.server_uri.timeout, patterns[2].exact.
func formatPath(path []any) string {
	var b strings.Builder
	for _, p := range path {
		switch p := p.(type) {
		case int:
			fmt.Fprintf(&b, "[%d]", p)
		case string:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(p)
		}
	}
	return b.String()
}
