package main

import "net/http"

// router is where streams.routes adds its routes: the notifier's
// http.ServeMux, or a test's recorder (the API contract's route check).
type router interface {
	HandleFunc(pattern string, handler func(http.ResponseWriter, *http.Request))
}
