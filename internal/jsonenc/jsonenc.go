// Package jsonenc appends JSON values exactly as encoding/json writes them,
// for the hot paths that spell their JSON by hand — event envelopes, a
// shopper's place in line: the same bytes, without reflection.
package jsonenc

import (
	"encoding/json"
	"time"
)

// AppendString appends s as encoding/json writes a string: as it is when
// every byte is printable ASCII that needs no escape (ids, names, tickets:
// the usual case), else through encoding/json itself.
func AppendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// AppendTime appends t as time.Time's MarshalJSON writes it (RFC 3339 with
// the fraction it has, in its own zone). A time MarshalJSON refuses (a year
// outside 0–9999) returns b as it was, and the error.
func AppendTime(b []byte, t time.Time) ([]byte, error) {
	out, err := t.AppendText(append(b, '"'))
	if err != nil {
		return b, err
	}
	return append(out, '"'), nil
}
