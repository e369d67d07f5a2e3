// Package jwkstest serves a shop's key set (JWKS) on loopback for the
// tests of user auth, and builds the keys it lists.
package jwkstest

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
)

// Server serves a key set on loopback and counts its fetches.
type Server struct {
	URL     string // the key set's URL
	Fetches atomic.Int64

	mu   sync.Mutex
	body []byte
}

// New starts a Server listing keys, closed when t ends.
func New(t testing.TB, keys ...map[string]string) *Server {
	t.Helper()
	s := &Server{}
	s.Set(keys...)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.Fetches.Add(1)
		s.mu.Lock()
		defer s.mu.Unlock()
		w.Header().Set("Content-Type", "application/jwk-set+json")
		w.Write(s.body)
	}))
	t.Cleanup(srv.Close)
	s.URL = srv.URL + "/.well-known/jwks.json"
	return s
}

// Set replaces the keys the server lists.
func (s *Server) Set(keys ...map[string]string) {
	b, _ := json.Marshal(map[string]any{"keys": keys})
	s.mu.Lock()
	s.body = b
	s.mu.Unlock()
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// RSA is k as a JWK for RS256.
func RSA(kid string, k *rsa.PublicKey) map[string]string {
	return map[string]string{"kty": "RSA", "kid": kid, "alg": "RS256", "use": "sig", "n": b64(k.N.Bytes()), "e": b64(big.NewInt(int64(k.E)).Bytes())}
}

// Ed25519 is k as a JWK (OKP).
func Ed25519(kid string, k ed25519.PublicKey) map[string]string {
	return map[string]string{"kty": "OKP", "crv": "Ed25519", "kid": kid, "x": b64(k)}
}

// EC is k, a P-256 key, as a JWK.
func EC(kid string, k *ecdsa.PublicKey) map[string]string {
	b, _ := k.Bytes() // 0x04 || X || Y
	return map[string]string{"kty": "EC", "crv": "P-256", "kid": kid, "x": b64(b[1:33]), "y": b64(b[33:])}
}
