package main

import (
	"encoding/base64"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"usher/gateway/userauth"
	"usher/internal/config"
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
	return h.do("POST", "/v1/queues/"+h.queue+"/tickets", "", map[string]string{userauth.HeaderUserToken: tok})
}

func TestUserJWTHS256(t *testing.T) {
	h := newHarness(t)
	now := time.Now()
	h.gw.users = userauth.NewHS256(userSecret, "https://shop.example", "usher", func() time.Time { return now })
	h.rebuild()
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
		{"oversized", valid + strings.Repeat("A", userauth.MaxTokenLen), 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := h.joinAs(tt.header)
			if r.status != tt.want || (tt.want >= 400 && !isProblem(r)) {
				t.Fatalf("join with %s = %d %s, want %d", tt.name, r.status, r.raw, tt.want)
			}
			if tt.want < 400 {
				tk, err := h.gw.tickets.Parse(r.str("ticket"))
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
		{"jwks refreshed every minute", map[string]string{"USHER_USER_AUTH": "jwt-jwks", "USHER_USER_JWKS_URL": "https://shop.example/.well-known/jwks.json", "USHER_USER_JWKS_REFRESH": "1m"}, true},
		// Every tick fetches: 1ms was thousands of requests a second to the shop.
		{"jwks refreshed every millisecond", map[string]string{"USHER_USER_AUTH": "jwt-jwks", "USHER_USER_JWKS_URL": "https://shop.example/.well-known/jwks.json", "USHER_USER_JWKS_REFRESH": "1ms"}, false},
		{"jwks refreshed every 29s", map[string]string{"USHER_USER_AUTH": "jwt-jwks", "USHER_USER_JWKS_URL": "https://shop.example/.well-known/jwks.json", "USHER_USER_JWKS_REFRESH": "29s"}, false},
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

// No header a client sends makes user authentication panic or answer
// anything but a user or a 401.
func FuzzUserToken(f *testing.F) {
	h := newHarness(f)
	now := time.Now()
	h.gw.users = userauth.NewHS256(userSecret, "", "", func() time.Time { return now })
	h.rebuild()
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

// An X-User-Id given twice names nobody: the first of the two is no more
// the shop's than the second. A proxy that adds its header beside the
// client's (Envoy's request_headers_to_add appends by default, HAProxy's
// add-header) left the client's own first, and the gateway believed it:
// anyone joined, polled the place of and ordered as anyone else.
func TestAUserIdGivenTwiceNamesNobody(t *testing.T) {
	h := newHarness(t)
	for _, tt := range []struct {
		name   string
		values []string
	}{
		{"the client's first, the proxy's after", []string{"victim", "mallory"}},
		{"the same id twice", []string{"alice", "alice"}},
		{"an empty one first", []string{"", "alice"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, path := range []string{"/v1/queues/" + h.queue + "/tickets", "/v1/orders"} {
				req := httptest.NewRequest("POST", path, strings.NewReader(`{"sku": "s"}`))
				for _, v := range tt.values {
					req.Header.Add("X-User-Id", v)
				}
				res, err := h.app.Test(req, 10_000)
				if err != nil {
					t.Fatal(err)
				}
				raw, _ := io.ReadAll(res.Body)
				res.Body.Close()
				h.checkExchange(h.app, req, `{"sku": "s"}`, res, raw)
				if res.StatusCode != 400 || !strings.Contains(string(raw), `/problems/invalid-user"`) ||
					!strings.Contains(string(raw), "once") {
					t.Errorf("POST %s with X-User-Id %q = %d %s, want 400 invalid-user saying to give it once", path, tt.values, res.StatusCode, raw)
				}
			}
		})
	}
	// Nobody was put in line for either id.
	if r := h.join("victim"); r.status != 202 {
		t.Errorf("victim's own join = %d %s, want 202 (a new place: nothing joined for them before)", r.status, r.raw)
	}
}
