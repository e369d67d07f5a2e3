package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The app's proof of work finds the answers docs/api.md gives: the
// smallest nonce.
func TestSolveFindsTheDocumentedNonce(t *testing.T) {
	tests := []struct {
		challenge  string
		difficulty int
		want       string
	}{
		{"AQ8AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", 8, "449"},
		{"ARNrDJmmx2CevWKhErwq7Uo95MHupz-WcwfAXAxa", 19, "1232975"},
	}
	for _, tt := range tests {
		if got, err := solve(context.Background(), tt.challenge, tt.difficulty); err != nil || got != tt.want {
			t.Errorf("solve(%q, %d) = %q, %v; want %q", tt.challenge, tt.difficulty, got, err, tt.want)
		}
	}
}

// The shopper is given one way, as X-User-Id or as the shop's user JWT.
func TestRunWantsTheShopperOneWay(t *testing.T) {
	for _, args := range [][]string{{}, {"-user", "a", "-user-token", "t"}} {
		err := run(context.Background(), args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "-user or -user-token") {
			t.Errorf("run(%q) = %v, want it to ask for the shopper", args, err)
		}
	}
}

// A ticket of a line reset since (410 ticket-stale on its stream and its
// poll) is joined again, and the new ticket followed to READY. The
// gateway and notifier here answer as docs/api.md says they do after a
// reset: what is checked is the app's side.
func TestFollowJoinsAgainAfterTheLineWasReset(t *testing.T) {
	joins := 0
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stale := func() {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusGone)
			io.WriteString(w, `{"type":"https://usher.dev/problems/ticket-stale","title":"Gone","status":410}`)
		}
		switch {
		case r.Method == http.MethodPost:
			joins++
			if joins == 1 {
				fmt.Fprintf(w, `{"ticket":"old","queue":"q","status":"WAITING","position":3,"waiting":3,"pollAfterMs":1,"events":%q}`, srv.URL+"/events/old")
				return
			}
			io.WriteString(w, `{"ticket":"new","queue":"q","status":"READY","token":"tok","expiresAt":"2026-12-05T02:00:00Z"}`)
		default:
			stale()
		}
	}))
	defer srv.Close()
	var out strings.Builder
	err := run(context.Background(), []string{"-gateway", srv.URL, "-queue", "q", "-user", "alice"}, &out)
	if err != nil || joins != 2 || !strings.Contains(out.String(), "the line was reset: joining again") || !strings.HasSuffix(out.String(), "tok\n") {
		t.Fatalf("run = %v after %d joins, said:\n%s", err, joins, out.String())
	}
}
