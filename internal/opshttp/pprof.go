package opshttp

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// ServeProfiles serves the Go runtime profiles (net/http/pprof) on addr
// until ctx ends — a separate listener, off unless addr is set, meant for
// loopback: `go tool pprof http://127.0.0.1:6060/debug/pprof/profile`.
func ServeProfiles(ctx context.Context, addr string) error {
	if addr == "" {
		<-ctx.Done()
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return Serve(ctx, ln, mux, 5*time.Second)
}
