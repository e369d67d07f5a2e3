package main

import (
	"bufio"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// sseEvent is a dispatched event as an EventSource sees it.
type sseEvent struct {
	typ, data, id string
	retry         int      // the reconnection time in force, ms (0: none seen)
	comments      []string // comment lines since the previous event
}

// sseParser follows the WHATWG HTML "Server-sent events" parsing rules:
// lines end in CRLF, LF or CR; a line starting with ':' is a comment;
// "field: value" loses one space after the colon; a line without a colon is
// a field with an empty value; a blank line dispatches the event, unless its
// data buffer is empty; the last event id persists across events.
type sseParser struct {
	r        *bufio.Reader
	lastCR   bool
	lastID   string
	retry    int
	comments []string
}

func newSSEParser(r *bufio.Reader) *sseParser { return &sseParser{r: r} }

// line reads one line without its terminator.
func (p *sseParser) line() (string, error) {
	var b strings.Builder
	for {
		c, err := p.r.ReadByte()
		if err != nil {
			return "", err
		}
		wasCR := p.lastCR
		p.lastCR = c == '\r'
		switch {
		case c == '\n' && wasCR && b.Len() == 0:
			continue // the LF of a CRLF
		case c == '\n', c == '\r':
			return b.String(), nil
		}
		b.WriteByte(c)
	}
}

// next returns the next dispatched event.
func (p *sseParser) next() (sseEvent, error) {
	var typ, data string
	hasData := false
	for {
		l, err := p.line()
		if err != nil {
			return sseEvent{}, err
		}
		if l == "" {
			if !hasData {
				typ = ""
				continue
			}
			if typ == "" {
				typ = "message"
			}
			ev := sseEvent{typ: typ, data: strings.TrimSuffix(data, "\n"), id: p.lastID, retry: p.retry, comments: p.comments}
			p.comments = nil
			return ev, nil
		}
		if l[0] == ':' {
			p.comments = append(p.comments, strings.TrimPrefix(l[1:], " "))
			continue
		}
		field, value, _ := strings.Cut(l, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			typ = value
		case "data":
			data += value + "\n"
			hasData = true
		case "id":
			if !strings.ContainsRune(value, 0) {
				p.lastID = value
			}
		case "retry":
			if n, err := strconv.Atoi(value); err == nil && strings.Trim(value, "0123456789") == "" {
				p.retry = n
			}
		}
	}
}

// The test's parser is itself checked against the spec's examples, so the
// stream tests rest on a parser that reads what a browser reads.
func TestSSEParserFollowsTheSpec(t *testing.T) {
	tests := []struct {
		name, in string
		want     []sseEvent
	}{
		{"lf", "event: a\ndata: 1\nid: 7\n\n", []sseEvent{{typ: "a", data: "1", id: "7"}}},
		{"crlf and cr", "data: x\r\n\r\ndata: y\r\r", []sseEvent{{typ: "message", data: "x"}, {typ: "message", data: "y"}}},
		{"one space stripped", "data:  two\n\n", []sseEvent{{typ: "message", data: " two"}}},
		{"no space", "data:tight\n\n", []sseEvent{{typ: "message", data: "tight"}}},
		{"multi-line data", "data: a\ndata\ndata: b\n\n", []sseEvent{{typ: "message", data: "a\n\nb"}}},
		{"comment, retry, no data does not dispatch", ": hi\nretry: 2000\n\nevent: e\ndata: d\n\n",
			[]sseEvent{{typ: "e", data: "d", retry: 2000, comments: []string{"hi"}}}},
		{"bad retry ignored", "retry: 2s\ndata: d\n\n", []sseEvent{{typ: "message", data: "d"}}},
		{"id persists", "id: 1\ndata: a\n\ndata: b\n\n", []sseEvent{{typ: "message", data: "a", id: "1"}, {typ: "message", data: "b", id: "1"}}},
		{"unterminated event is dropped", "data: a\n\ndata: b\n", []sseEvent{{typ: "message", data: "a"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newSSEParser(bufio.NewReader(strings.NewReader(tt.in)))
			var got []sseEvent
			for {
				ev, err := p.next()
				if err == io.EOF {
					break
				}
				got = append(got, ev)
			}
			if !slices.EqualFunc(got, tt.want, func(a, b sseEvent) bool {
				return a.typ == b.typ && a.data == b.data && a.id == b.id && a.retry == b.retry && slices.Equal(a.comments, b.comments)
			}) {
				t.Errorf("parse %q = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}
