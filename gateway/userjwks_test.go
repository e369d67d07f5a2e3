package main

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"usher/gateway/userauth"
)

// jwksServer serves a key set on loopback and counts its fetches.
type jwksServer struct {
	mu      sync.Mutex
	body    []byte
	fetches atomic.Int64
	url     string
}

func newJWKSServer(t *testing.T, keys ...map[string]string) *jwksServer {
	t.Helper()
	s := &jwksServer{}
	s.set(keys...)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fetches.Add(1)
		s.mu.Lock()
		defer s.mu.Unlock()
		w.Header().Set("Content-Type", "application/jwk-set+json")
		w.Write(s.body)
	}))
	t.Cleanup(srv.Close)
	s.url = srv.URL + "/.well-known/jwks.json"
	return s
}

func (s *jwksServer) set(keys ...map[string]string) {
	b, _ := json.Marshal(map[string]any{"keys": keys})
	s.mu.Lock()
	s.body = b
	s.mu.Unlock()
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func rsaJWK(kid string, k *rsa.PublicKey) map[string]string {
	return map[string]string{"kty": "RSA", "kid": kid, "alg": "RS256", "use": "sig", "n": b64(k.N.Bytes()), "e": b64(big.NewInt(int64(k.E)).Bytes())}
}

func edJWK(kid string, k ed25519.PublicKey) map[string]string {
	return map[string]string{"kty": "OKP", "crv": "Ed25519", "kid": kid, "x": b64(k)}
}

func ecJWK(kid string, k *ecdsa.PublicKey) map[string]string {
	b, _ := k.Bytes() // 0x04 || X || Y
	return map[string]string{"kty": "EC", "crv": "P-256", "kid": kid, "x": b64(b[1:33]), "y": b64(b[33:])}
}

func TestUserJWTFromJWKS(t *testing.T) {
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	edPub, edKey, _ := ed25519.GenerateKey(rand.Reader)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	srv := newJWKSServer(t, rsaJWK("rsa-1", &rsaKey.PublicKey), edJWK("ed-1", edPub), ecJWK("ec-1", &ecKey.PublicKey),
		map[string]string{"kty": "RSA", "kid": "tiny", "n": b64([]byte{0xff, 0xff}), "e": "AQAB"},
		map[string]string{"kty": "oct", "kid": "sym", "k": b64(userSecret)})
	now := time.Now()
	clock := func() time.Time { return now }
	keys := userauth.NewJWKSKeys(srv.url, time.Hour, clock, slog.New(slog.NewTextHandler(io.Discard, nil)))
	h := newHarness(t)
	h.gw.users = userauth.NewJWKS(keys, "", "", clock)
	h.rebuild()
	claims := func(sub string) jwt.MapClaims { return jwt.MapClaims{"sub": sub, "exp": now.Add(time.Hour).Unix()} }

	tests := []struct {
		name string
		tok  string
		want int
	}{
		{"RS256", userJWT(t, jwt.SigningMethodRS256, rsaKey, "rsa-1", claims("rsa-user")), 202},
		{"EdDSA", userJWT(t, jwt.SigningMethodEdDSA, edKey, "ed-1", claims("ed-user")), 202},
		{"ES256", userJWT(t, jwt.SigningMethodES256, ecKey, "ec-1", claims("ec-user")), 202},
		{"no kid", userJWT(t, jwt.SigningMethodRS256, rsaKey, "", claims("x")), 401},
		{"a kid of another key type", userJWT(t, jwt.SigningMethodEdDSA, edKey, "rsa-1", claims("x")), 401},
		{"HS256 keyed with a symmetric JWK", userJWT(t, jwt.SigningMethodHS256, userSecret, "sym", claims("x")), 401},
		{"a key too short to trust", userJWT(t, jwt.SigningMethodRS256, rsaKey, "tiny", claims("x")), 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if r := h.joinAs(tt.tok); r.status != tt.want {
				t.Fatalf("join = %d %s, want %d", r.status, r.raw, tt.want)
			}
		})
	}

	// The key set was fetched once, on the first request: nothing since.
	if got := srv.fetches.Load(); got != 1 {
		t.Fatalf("%d fetches after the table, want 1", got)
	}
	// The shop rotates in a key: the first token with its kid refetches
	// once; more unknown kids within the minute do not reach the server.
	rotated, _ := rsa.GenerateKey(rand.Reader, 2048)
	unknown := userJWT(t, jwt.SigningMethodRS256, rotated, "rsa-2", claims("new-key-user"))
	now = now.Add(time.Minute)
	if r := h.joinAs(unknown); r.status != 401 {
		t.Fatalf("join with an unknown kid = %d, want 401", r.status)
	}
	for range 20 {
		h.joinAs(userJWT(t, jwt.SigningMethodRS256, rotated, "forged-kid", claims("x")))
	}
	if got := srv.fetches.Load(); got != 2 {
		t.Fatalf("%d fetches after 21 unknown kids, want 2 (one refetch)", got)
	}
	srv.set(rsaJWK("rsa-1", &rsaKey.PublicKey), rsaJWK("rsa-2", &rotated.PublicKey))
	now = now.Add(userauth.MinJWKSRefresh)
	if r := h.joinAs(unknown); r.status != 202 {
		t.Fatalf("join with the rotated-in key = %d %s, want 202", r.status, r.raw)
	}
}
