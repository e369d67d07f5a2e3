package token_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"usher/internal/token"
)

// Verify against tokens an attacker can build without usher's private
// key, or with claims usher never writes. Every one is ErrInvalid; the
// queue and user checks are the caller's (gateway/orders.go: another
// user's token is 403, another queue's is 422 for this queue's SKU).
func TestVerifyRefusesForgeries(t *testing.T) {
	key := newKey(t)
	kr := token.NewKeyring(key)
	at := time.Unix(1_800_000_000, 0)
	claims := func(edit func(jwt.MapClaims)) jwt.MapClaims {
		c := jwt.MapClaims{"iss": token.Issuer, "sub": "alice", "aud": []string{"demo"}, "jti": "demo:1",
			"nbf": at.Unix(), "iat": at.Unix(), "exp": at.Add(time.Minute).Unix()}
		if edit != nil {
			edit(c)
		}
		return c
	}
	sign := func(m jwt.SigningMethod, k any, kid string, c jwt.MapClaims) string {
		tok := jwt.NewWithClaims(m, c)
		tok.Header["kid"] = kid
		s, err := tok.SignedString(k)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	_, otherPriv, _ := ed25519.GenerateKey(rand.Reader)
	tests := []struct {
		name string
		tok  string
	}{
		{"HS256 keyed with the public key (alg confusion)", sign(jwt.SigningMethodHS256, []byte(key.Public), key.ID, claims(nil))},
		{"another Ed25519 key under usher's kid", sign(jwt.SigningMethodEdDSA, otherPriv, key.ID, claims(nil))},
		{"another issuer", sign(jwt.SigningMethodEdDSA, key.Private, key.ID, claims(func(c jwt.MapClaims) { c["iss"] = "evil" }))},
		{"no expiry", sign(jwt.SigningMethodEdDSA, key.Private, key.ID, claims(func(c jwt.MapClaims) { delete(c, "exp") }))},
		{"no not-before", sign(jwt.SigningMethodEdDSA, key.Private, key.ID, claims(func(c jwt.MapClaims) { delete(c, "nbf") }))},
		{"no token id", sign(jwt.SigningMethodEdDSA, key.Private, key.ID, claims(func(c jwt.MapClaims) { delete(c, "jti") }))},
		{"no subject", sign(jwt.SigningMethodEdDSA, key.Private, key.ID, claims(func(c jwt.MapClaims) { delete(c, "sub") }))},
		{"two queues", sign(jwt.SigningMethodEdDSA, key.Private, key.ID, claims(func(c jwt.MapClaims) { c["aud"] = []string{"demo", "other"} }))},
		{"no kid", sign(jwt.SigningMethodEdDSA, key.Private, "", claims(nil))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, err := kr.Verify(tt.tok, at); !errors.Is(err, token.ErrInvalid) {
				t.Fatalf("Verify = %+v, %v; want ErrInvalid", got, err)
			}
		})
	}
	// The control: the same construction with usher's key verifies, and
	// says which queue and user it is for.
	got, err := kr.Verify(sign(jwt.SigningMethodEdDSA, key.Private, key.ID, claims(nil)), at)
	if err != nil || got.Queue != "demo" || got.User != "alice" || got.ID != "demo:1" {
		t.Fatalf("Verify(genuine) = %+v, %v", got, err)
	}
}
