package main

import (
	"context"
	"io"
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
