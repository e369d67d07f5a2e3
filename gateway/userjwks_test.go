package main

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"io"
	"log/slog"
	"testing"
	"time"
	"usher/gateway/userauth/jwkstest"

	"github.com/golang-jwt/jwt/v5"

	"usher/gateway/userauth"
)

func TestUserJWTFromJWKS(t *testing.T) {
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	edPub, edKey, _ := ed25519.GenerateKey(rand.Reader)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	srv := jwkstest.New(t, jwkstest.RSA("rsa-1", &rsaKey.PublicKey), jwkstest.Ed25519("ed-1", edPub), jwkstest.EC("ec-1", &ecKey.PublicKey),
		map[string]string{"kty": "RSA", "kid": "tiny", "n": base64.RawURLEncoding.EncodeToString([]byte{0xff, 0xff}), "e": "AQAB"},
		map[string]string{"kty": "oct", "kid": "sym", "k": base64.RawURLEncoding.EncodeToString(userSecret)})
	now := time.Now()
	clock := func() time.Time { return now }
	keys := userauth.NewJWKSKeys(srv.URL, time.Hour, clock, slog.New(slog.NewTextHandler(io.Discard, nil)))
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
	if got := srv.Fetches.Load(); got != 1 {
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
	if got := srv.Fetches.Load(); got != 2 {
		t.Fatalf("%d fetches after 21 unknown kids, want 2 (one refetch)", got)
	}
	srv.Set(jwkstest.RSA("rsa-1", &rsaKey.PublicKey), jwkstest.RSA("rsa-2", &rotated.PublicKey))
	now = now.Add(userauth.MinJWKSRefresh)
	if r := h.joinAs(unknown); r.status != 202 {
		t.Fatalf("join with the rotated-in key = %d %s, want 202", r.status, r.raw)
	}
}
