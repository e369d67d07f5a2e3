// Package problem writes RFC 9457 problem details: every error a client of
// usher sees is one of these, served as application/problem+json.
package problem

import (
	"encoding/json"
	"net/http"
	"sort"
)

// ContentType is the media type of a problem document.
const ContentType = "application/problem+json"

// Param is one invalid request parameter (the "invalid-params" extension
// shown in RFC 9457 section 3).
type Param struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// Problem is an RFC 9457 problem details object.
type Problem struct {
	Type          string  `json:"type"`
	Title         string  `json:"title"`
	Status        int     `json:"status"`
	Detail        string  `json:"detail,omitempty"`
	Instance      string  `json:"instance,omitempty"`
	InvalidParams []Param `json:"invalid-params,omitempty"`
	// RetryAfter, when set, is also sent as the Retry-After header (seconds).
	RetryAfter int `json:"-"`
	// Extensions are further members (RFC 9457 section 3.2), written after
	// the standard ones in key order: a 428 carries a fresh challenge. A
	// key that names a standard member is ignored.
	Extensions map[string]any `json:"-"`
}

// New returns a problem of the given status whose type is a stable usher URI
// (https://usher.dev/problems/<slug>) and whose title is the status text.
func New(status int, slug, detail string) Problem {
	return Problem{
		Type:   "https://usher.dev/problems/" + slug,
		Title:  http.StatusText(status),
		Status: status,
		Detail: detail,
	}
}

// JSON encodes p.
func (p Problem) JSON() []byte {
	b, _ := json.Marshal(p)
	if len(p.Extensions) == 0 {
		return b
	}
	keys := make([]string, 0, len(p.Extensions))
	for k := range p.Extensions {
		if !standard[k] {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	b = b[:len(b)-1] // reopen the object
	for _, k := range keys {
		v, err := json.Marshal(p.Extensions[k])
		if err != nil {
			continue
		}
		name, _ := json.Marshal(k)
		b = append(append(append(append(b, ','), name...), ':'), v...)
	}
	return append(b, '}')
}

// standard are the members Problem writes itself.
var standard = map[string]bool{"type": true, "title": true, "status": true, "detail": true, "instance": true, "invalid-params": true}

// Error lets a Problem travel as an error to the one place that writes it.
func (p Problem) Error() string { return p.Title + ": " + p.Detail }

// Write sends p on a net/http response.
func Write(w http.ResponseWriter, p Problem) {
	w.Header().Set("Content-Type", ContentType)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	w.Write(p.JSON())
}
