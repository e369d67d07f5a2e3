package token_test

import (
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"usher/internal/token"
)

// jwtSign is how tokens were spelled before Sign wrote them by hand: the
// JWT library's own encoding, the reference Sign must match byte for byte
// (tokens minted by services of either version are one token).
func jwtSign(t testing.TB, k token.Key, c token.Claims) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.RegisteredClaims{
		Issuer:    token.Issuer,
		Subject:   c.User,
		Audience:  jwt.ClaimStrings{c.Queue},
		ID:        c.ID,
		NotBefore: jwt.NewNumericDate(c.ReadyAt),
		IssuedAt:  jwt.NewNumericDate(c.ReadyAt),
		ExpiresAt: jwt.NewNumericDate(roundUp(c.ExpiresAt)),
	})
	tok.Header["kid"] = k.ID
	s, err := tok.SignedString(k.Private)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSignMatchesJWT(t *testing.T) {
	k := newKey(t)
	kr := token.NewKeyring(k)
	at := time.Unix(1_800_000_000, 999_999_999)
	for _, c := range []token.Claims{
		{ID: "demo:1", Queue: "demo", User: "alice", ReadyAt: at, ExpiresAt: at.Add(time.Minute)},
		{ID: "q:18446744073709551615", Queue: "q", User: `a"b\c<d>&e`, ReadyAt: at, ExpiresAt: at},
		{ID: "", Queue: "", User: "", ReadyAt: time.Time{}, ExpiresAt: time.Unix(-1, 5)},
		{ID: "x", Queue: "drop-ä", User: "Ünïcode\u2028\x7f\x01", ReadyAt: at, ExpiresAt: at.Add(time.Hour)},
		{ID: "y", Queue: "q", User: "bad utf-8 \xff\xfe", ReadyAt: at, ExpiresAt: at.Add(time.Hour)},
	} {
		got, err := kr.Sign(c)
		if want := jwtSign(t, k, c); err != nil || got != want {
			t.Errorf("Sign(%+v) =\n %q, %v; want the JWT library's\n %q", c, got, err, want)
		}
	}
}

// FuzzSignMatchesJWT: whatever the claims (a user id is the shopper's
// own), the hand-spelled token is the library's, and it verifies to the
// claims it was made from.
func FuzzSignMatchesJWT(f *testing.F) {
	k := newKey(f)
	kr := token.NewKeyring(k)
	f.Add("demo:1", "demo", "alice", int64(1_800_000_000), int64(60))
	f.Add("", "", `"\<>&`, int64(-5), int64(0))
	f.Add("q:2", "q", "é\u2028\xff", int64(0), int64(1<<40))
	f.Fuzz(func(t *testing.T, id, queue, user string, ready, ttl int64) {
		ready = ready % (1 << 40)
		ttl = ttl % (1 << 40)
		c := token.Claims{ID: id, Queue: queue, User: user, ReadyAt: time.Unix(ready, 0), ExpiresAt: time.Unix(ready+ttl, 0)}
		got, err := kr.Sign(c)
		if want := jwtSign(t, k, c); err != nil || got != want {
			t.Fatalf("Sign(%+v) =\n %q, %v; want the JWT library's\n %q", c, got, err, want)
		}
	})
}

// roundUp is t in whole seconds, rounded up: Sign's exp (the library
// rounds down).
func roundUp(t time.Time) time.Time {
	if s := time.Unix(t.Unix(), 0); t.After(s) {
		return s.Add(time.Second)
	}
	return t
}
