package userauth

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
	"usher/gateway/userauth/jwkstest"

	"usher/internal/testenv"
)

// Run fetches at start and keeps the keys when a refresh fails.
func TestJWKSRefreshKeepsKeysOnFailure(t *testing.T) {
	edPub, _, _ := ed25519.GenerateKey(rand.Reader)
	srv := jwkstest.New(t, jwkstest.Ed25519("ed-1", edPub))
	keys := NewJWKSKeys(srv.URL, time.Hour, time.Now, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- keys.Run(ctx) }()
	has := func() bool { keys.mu.RLock(); defer keys.mu.RUnlock(); _, ok := keys.keys["ed-1"]; return ok }
	testenv.Eventually(t, 5*time.Second, has, "the key set was not fetched at start")
	srv.Set() // not a failure: an empty set
	keys.url = "http://127.0.0.1:1/nothing-listens"
	if err := keys.fetch(ctx, false); err == nil || !has() {
		t.Fatalf("failed fetch = %v, keys kept %v; want an error and the key kept", err, has())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
}

// No key set, however odd, makes parseJWKS panic or keep a key it cannot
// use for the alg it names.
func FuzzJWKS(f *testing.F) {
	edPub, _, _ := ed25519.GenerateKey(rand.Reader)
	good, _ := json.Marshal(map[string]any{"keys": []map[string]string{jwkstest.Ed25519("ed-1", edPub)}})
	f.Add(string(good))
	f.Add(`{"keys":[{"kty":"RSA","kid":"r","n":"AQAB","e":"AQAB"}]}`)
	f.Add(`{"keys":[{"kty":"EC","crv":"P-256","kid":"e","x":"","y":""}]}`)
	f.Fuzz(func(t *testing.T, body string) {
		keys, err := parseJWKS(strings.NewReader(body))
		if err != nil {
			return
		}
		for kid, k := range keys {
			switch k.key.(type) {
			case *rsa.PublicKey, *ecdsa.PublicKey, ed25519.PublicKey:
			default:
				t.Fatalf("key %q of type %T", kid, k.key)
			}
		}
	})
}
