package main

import (
	"context"
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
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"usher/shared/config"
	"usher/shared/testenv"
)

var userSecret = []byte(strings.Repeat("s", 32))

func userJWT(t testing.TB, method jwt.SigningMethod, key any, kid string, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (h *harness) joinAs(tok string) response {
	h.t.Helper()
	return h.do("POST", "/v1/queues/"+h.queue+"/tickets", "", map[string]string{headerUserToken: tok})
}

func TestUserJWTHS256(t *testing.T) {
	h := newHarness(t)
	now := time.Now()
	h.api.users = newJWTAuth([]string{"HS256"}, hs256Key(userSecret), "https://shop.example", "usher", func() time.Time { return now })
	good := jwt.MapClaims{"sub": "alice", "iss": "https://shop.example", "aud": "usher", "exp": now.Add(time.Hour).Unix()}
	with := func(k string, v any) jwt.MapClaims {
		c := jwt.MapClaims{}
		for k, v := range good {
			c[k] = v
		}
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		return c
	}
	sign := func(c jwt.MapClaims) string { return userJWT(t, jwt.SigningMethodHS256, userSecret, "", c) }
	valid := sign(good)
	parts := strings.Split(valid, ".")
	none := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + parts[1] + "."
	tests := []struct {
		name   string
		header string
		want   int
	}{
		{"valid", valid, 202},
		{"valid with the Bearer scheme", "bearer " + valid, 200},
		{"missing", "", 401},
		{"garbage", "a.b.c", 401},
		{"alg none", none, 401},
		{"signed with another secret", userJWT(t, jwt.SigningMethodHS256, []byte(strings.Repeat("x", 32)), "", good), 401},
		{"HS512 with the right secret", userJWT(t, jwt.SigningMethodHS512, userSecret, "", good), 401},
		{"tampered claims", parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"mallory","exp":9999999999}`)) + "." + parts[2], 401},
		{"expired", sign(with("exp", now.Add(-time.Minute).Unix())), 401},
		{"expired within the leeway", sign(with("exp", now.Add(-time.Second).Unix())), 200},
		{"not yet valid", sign(with("nbf", now.Add(time.Hour).Unix())), 401},
		{"without an expiry", sign(with("exp", nil)), 401},
		{"another issuer", sign(with("iss", "https://evil.example")), 401},
		{"another audience", sign(with("aud", "someone-else")), 401},
		{"a sub that is no user id", sign(with("sub", "alice smith")), 401},
		{"a sub too long", sign(with("sub", strings.Repeat("a", 65))), 401},
		{"without a sub", sign(with("sub", nil)), 401},
		{"oversized", valid + strings.Repeat("A", maxUserTokenLen), 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := h.joinAs(tt.header)
			if r.status != tt.want || (tt.want >= 400 && !isProblem(r)) {
				t.Fatalf("join with %s = %d %s, want %d", tt.name, r.status, r.raw, tt.want)
			}
			if tt.want < 400 {
				tk, err := h.api.tickets.Parse(r.str("ticket"))
				if err != nil || tk.User != "alice" {
					t.Fatalf("ticket = %+v, %v; want alice's", tk, err)
				}
			}
		})
	}
	// X-User-Id means nothing once user JWTs are on.
	if r := h.join("alice"); r.status != 401 {
		t.Errorf("join with X-User-Id only = %d, want 401", r.status)
	}
}

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
	keys := newJWKSKeys(srv.url, time.Hour, clock, slog.New(slog.NewTextHandler(io.Discard, nil)))
	h := newHarness(t)
	h.api.users = newJWTAuth(jwksMethods, keys.key, "", "", clock)
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
	now = now.Add(keys.minRefetch)
	if r := h.joinAs(unknown); r.status != 202 {
		t.Fatalf("join with the rotated-in key = %d %s, want 202", r.status, r.raw)
	}
}

// Run fetches at start and keeps the keys when a refresh fails.
func TestJWKSRefreshKeepsKeysOnFailure(t *testing.T) {
	edPub, _, _ := ed25519.GenerateKey(rand.Reader)
	srv := newJWKSServer(t, edJWK("ed-1", edPub))
	keys := newJWKSKeys(srv.url, time.Hour, time.Now, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- keys.Run(ctx) }()
	has := func() bool { keys.mu.RLock(); defer keys.mu.RUnlock(); _, ok := keys.keys["ed-1"]; return ok }
	testenv.Eventually(t, 5*time.Second, has, "the key set was not fetched at start")
	srv.set() // not a failure: an empty set
	keys.url = "http://127.0.0.1:1/nothing-listens"
	if err := keys.fetch(ctx, false); err == nil || !has() {
		t.Fatalf("failed fetch = %v, keys kept %v; want an error and the key kept", err, has())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
}

func TestUserAuthSettings(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		ok   bool
	}{
		{"the default trusts X-User-Id", nil, true},
		{"hs256 without a secret", map[string]string{"USHER_USER_AUTH": "jwt-hs256"}, false},
		{"hs256 with a secret file", map[string]string{"USHER_USER_AUTH": "jwt-hs256", "USHER_USER_JWT_SECRET_FILE": "/run/secrets/user-jwt"}, true},
		{"jwks without a URL", map[string]string{"USHER_USER_AUTH": "jwt-jwks"}, false},
		{"jwks with a file URL", map[string]string{"USHER_USER_AUTH": "jwt-jwks", "USHER_USER_JWKS_URL": "file:///etc/keys"}, false},
		{"jwks with a URL", map[string]string{"USHER_USER_AUTH": "jwt-jwks", "USHER_USER_JWKS_URL": "https://shop.example/.well-known/jwks.json"}, true},
		{"an unknown mode", map[string]string{"USHER_USER_AUTH": "basic"}, false},
		{"a client IP header without proxies", map[string]string{"USHER_CLIENT_IP_HEADER": "X-Forwarded-For"}, false},
		{"proxies and a header", map[string]string{"USHER_TRUSTED_PROXIES": "10.0.0.0/8, 173.245.48.0/20", "USHER_CLIENT_IP_HEADER": "CF-Connecting-IP"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := config.New(func(k string) string { return tt.env[k] })
			loadProtectSettings(env)
			if err := env.Err(); (err == nil) != tt.ok {
				t.Fatalf("settings error = %v, want ok %v", err, tt.ok)
			}
		})
	}
}

// A short secret is refused at start, not used.
func TestUserJWTSecretTooShort(t *testing.T) {
	s := userAuthSettings{mode: authJWTHS256, secretFile: "x", secretLoader: func(string) ([]byte, error) { return []byte("short\n"), nil }}
	if _, _, err := newUserAuth(s, time.Now, slog.Default()); err == nil {
		t.Fatal("newUserAuth with a 5-byte secret = nil error")
	}
}

// No header a client sends makes user authentication panic or answer
// anything but a user or a 401.
func FuzzUserToken(f *testing.F) {
	h := newHarness(f)
	now := time.Now()
	h.api.users = newJWTAuth([]string{"HS256"}, hs256Key(userSecret), "", "", func() time.Time { return now })
	f.Add(userJWT(f, jwt.SigningMethodHS256, userSecret, "", jwt.MapClaims{"sub": "alice", "exp": now.Add(time.Hour).Unix()}))
	f.Add("Bearer eyJhbGciOiJub25lIn0.e30.")
	f.Add("bearer ")
	f.Fuzz(func(t *testing.T, tok string) {
		if !validHeaderValue(tok) {
			return
		}
		h := h.with(t)
		r := h.joinAs(tok)
		if r.status != 202 && r.status != 200 && !(r.status == 401 && isProblem(r)) {
			t.Fatalf("join with %q = %d %s, want a place or a 401 problem", tok, r.status, r.raw)
		}
	})
}

// No key set, however odd, makes parseJWKS panic or keep a key it cannot
// use for the alg it names.
func FuzzJWKS(f *testing.F) {
	edPub, _, _ := ed25519.GenerateKey(rand.Reader)
	good, _ := json.Marshal(map[string]any{"keys": []map[string]string{edJWK("ed-1", edPub)}})
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
