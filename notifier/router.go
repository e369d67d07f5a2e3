package main

import (
	"net/http"
	"path"
	"strings"

	"usher/internal/problem"
)

// router is where streams.routes adds its routes: the notifier's
// http.ServeMux, or a test's recorder (the API contract's route check).
// Handler is http.ServeMux's: the route a request would take, which the
// catch-all asks to tell a path's methods (see unrouted).
type router interface {
	HandleFunc(pattern string, handler func(http.ResponseWriter, *http.Request))
	Handler(r *http.Request) (h http.Handler, pattern string)
}

// unrouted answers a request no route of mux took, as the API contract
// says: 405 method-not-allowed with Allow listing the methods the path
// takes (RFC 9110 §15.5.6) when mux has routes for it under other methods
// — opshttp's /healthz, /readyz and /metrics as much as the stream's own —
// and 404 not-found when it has none. Both are problem documents.
func unrouted(mux router) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		if allow := allowed(mux, r); allow != "" {
			w.Header().Set("Allow", allow)
			problem.Write(w, problem.New(http.StatusMethodNotAllowed, "method-not-allowed",
				r.Method+" is not a method of "+r.URL.Path+"; it allows "+allow))
			return
		}
		problem.Write(w, problem.New(http.StatusNotFound, "not-found", "no such resource"))
	}
}

// allowed lists, in order, the methods under which mux routes r's path to
// a route of its own ("GET, HEAD": a GET route takes HEAD too), or ""
// when none does. A route without a method is a catch-all, no method's.
func allowed(mux router, r *http.Request) string {
	var out []string
	for _, m := range []string{http.MethodDelete, http.MethodGet, http.MethodHead, http.MethodOptions,
		http.MethodPatch, http.MethodPost, http.MethodPut} {
		_, pattern := mux.Handler(&http.Request{Method: m, Host: r.Host, URL: r.URL})
		if method, _, ok := strings.Cut(pattern, " "); ok && method != "" {
			out = append(out, m)
		}
	}
	return strings.Join(out, ", ")
}

// exactPaths hands next (the notifier's http.ServeMux) only paths it takes
// as they are. A path ServeMux would clean first — "//", a "." or ".."
// segment, escaped or not — it answers with a 307 to the cleaned path;
// the API contract matches paths exactly, so such a path is no resource of
// the document: 404 not-found, as any other.
func exactPaths(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect && cleanPath(r.URL.Path) != r.URL.Path {
			problem.Write(w, problem.New(http.StatusNotFound, "not-found", "no such resource"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// cleanPath is the path ServeMux routes p by (as its own cleanPath does):
// path.Clean's, rooted, keeping a trailing slash. CONNECT's is not cleaned.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}
