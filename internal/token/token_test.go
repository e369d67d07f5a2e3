package token_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"usher/internal/token"
)

func newKey(t testing.TB) token.Key {
	t.Helper()
	k, err := token.LoadOrCreateKey(filepath.Join(t.TempDir(), "signing.key"))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestLoadOrCreateKeyKeepsTheKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "k.pem")
	a, err := token.LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := token.LoadOrCreateKey(path)
	if err != nil || a.ID != b.ID {
		t.Fatalf("second load = %v, %v; want the same key %s", b.ID, err, a.ID)
	}
}

func TestSignIsDeterministic(t *testing.T) {
	kr := token.NewKeyring(newKey(t))
	at := time.Unix(1_800_000_000, 0)
	c := token.Claims{ID: "demo:1", Queue: "demo", User: "alice", ReadyAt: at, ExpiresAt: at.Add(time.Minute)}
	a, _ := kr.Sign(c)
	b, _ := kr.Sign(c)
	if a != b || a == "" {
		t.Fatalf("Sign twice = %q, %q; want the same token", a, b)
	}
}

func TestVerify(t *testing.T) {
	key, other := newKey(t), newKey(t)
	kr := token.NewKeyring(key)
	at := time.Unix(1_800_000_000, 0)
	c := token.Claims{ID: "demo:1", Queue: "demo", User: "alice", ReadyAt: at, ExpiresAt: at.Add(time.Minute)}
	good, _ := kr.Sign(c)
	forged, _ := token.NewKeyring(other).Sign(c)
	parts := strings.Split(good, ".")
	none := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + parts[1] + "."
	hdr, _ := json.Marshal(map[string]string{"alg": "EdDSA", "typ": "JWT", "kid": "nope"})
	wrongKid := base64.RawURLEncoding.EncodeToString(hdr) + "." + parts[1] + "." + parts[2]
	tests := []struct {
		name string
		tok  string
		now  time.Time
		want error
	}{
		{"valid at readyAt", good, at, nil},
		{"before readyAt", good, at.Add(-time.Second), token.ErrEarly},
		{"after expiry", good, at.Add(2 * time.Minute), token.ErrExpired},
		{"signed by another key", forged, at, token.ErrInvalid},
		{"alg none", none, at, token.ErrInvalid},
		{"unknown kid", wrongKid, at, token.ErrInvalid},
		{"tampered payload", parts[0] + "." + parts[1] + "x." + parts[2], at, token.ErrInvalid},
		{"garbage", "not.a.jwt", at, token.ErrInvalid},
		{"signature with other trailing bits", parts[0] + "." + parts[1] + "." + flipLastBits(parts[2]), at, token.ErrInvalid},
		{"empty", "", at, token.ErrInvalid},
		{"huge", strings.Repeat("a", token.MaxLen+1), at, token.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := kr.Verify(tt.tok, tt.now)
			if !errors.Is(err, tt.want) && !(err == nil && tt.want == nil) {
				t.Fatalf("Verify = %v, want %v", err, tt.want)
			}
			if err == nil && (got.ID != c.ID || got.Queue != c.Queue || got.User != c.User || !got.ReadyAt.Equal(at)) {
				t.Errorf("Verify claims = %+v, want %+v", got, c)
			}
		})
	}
}

// After a rotation, tokens signed by the old key still verify and the JWKS
// lists both keys.
func TestRotation(t *testing.T) {
	oldKey, newK := newKey(t), newKey(t)
	at := time.Unix(1_800_000_000, 0)
	c := token.Claims{ID: "q:1", Queue: "q", User: "u", ReadyAt: at, ExpiresAt: at.Add(time.Minute)}
	oldTok, _ := token.NewKeyring(oldKey).Sign(c)
	kr := token.NewKeyring(newK, oldKey)
	if _, err := kr.Verify(oldTok, at); err != nil {
		t.Fatalf("Verify(old token) = %v", err)
	}
	var set struct {
		Keys []struct{ Kid, Kty, Crv, X string }
	}
	if err := json.Unmarshal(kr.JWKS(), &set); err != nil || len(set.Keys) != 2 || set.Keys[0].Kid != newK.ID {
		t.Fatalf("JWKS = %s, %v; want the new key first, then the old", kr.JWKS(), err)
	}
}

func FuzzVerify(f *testing.F) {
	kr := token.NewKeyring(newKey(f))
	at := time.Unix(1_800_000_000, 0)
	good, _ := kr.Sign(token.Claims{ID: "q:1", Queue: "q", User: "u", ReadyAt: at, ExpiresAt: at.Add(time.Minute)})
	f.Add(good)
	f.Add("eyJhbGciOiJub25lIn0.e30.")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := kr.Verify(s, at)
		if err == nil && (c.ID == "" || c.Queue == "" || c.User == "") {
			t.Fatalf("Verify(%q) accepted claims %+v", s, c)
		}
	})
}

func BenchmarkSign(b *testing.B) {
	kr := token.NewKeyring(newKey(b))
	at := time.Unix(1_800_000_000, 0)
	c := token.Claims{ID: "q:1", Queue: "q", User: "u", ReadyAt: at, ExpiresAt: at.Add(time.Minute)}
	for b.Loop() {
		if _, err := kr.Sign(c); err != nil {
			b.Fatal(err)
		}
	}
}

// flipLastBits changes the unused low bits of the last base64url character,
// which a lenient decoder ignores: the same signature, spelled differently.
func flipLastBits(sig string) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, sig[len(sig)-1])
	return sig[:len(sig)-1] + string(alphabet[last^1])
}

// VerifyExpired hands the claims of a token whose only fault is its
// expiry — what an order resubmitted after it asks for — and nothing for
// any other token.
func TestVerifyExpired(t *testing.T) {
	key, other := newKey(t), newKey(t)
	kr := token.NewKeyring(key)
	at := time.Unix(1_800_000_000, 0)
	c := token.Claims{ID: "demo:1", Queue: "demo", User: "alice", ReadyAt: at, ExpiresAt: at.Add(time.Second)}
	good, _ := kr.Sign(c)
	forged, _ := token.NewKeyring(other).Sign(c)
	parts := strings.Split(good, ".")
	later := at.Add(time.Hour)
	tests := []struct {
		name string
		tok  string
		now  time.Time
		want error
	}{
		{"expired", good, later, nil},
		{"at its expiry", good, at.Add(time.Second), nil},
		{"still valid", good, at, token.ErrInvalid},
		{"before readyAt", good, at.Add(-time.Second), token.ErrEarly},
		{"expired, signed by another key", forged, later, token.ErrInvalid},
		{"expired, tampered payload", parts[0] + "." + parts[1] + "x." + parts[2], later, token.ErrInvalid},
		{"garbage", "not.a.jwt", later, token.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := kr.VerifyExpired(tt.tok, tt.now)
			if !errors.Is(err, tt.want) && !(err == nil && tt.want == nil) {
				t.Fatalf("VerifyExpired = %+v, %v; want %v", got, err, tt.want)
			}
			if err == nil && (got.ID != c.ID || got.Queue != c.Queue || got.User != c.User || !got.ExpiresAt.Equal(c.ExpiresAt)) {
				t.Errorf("VerifyExpired claims = %+v, want %+v", got, c)
			}
		})
	}
}

// A token lapses no earlier than its line's expiry: exp, in whole seconds,
// is rounded up. Rounded down, a token of one second readied at .95 s
// would expire 50 ms after READY, which a loaded machine's order misses
// (the e2e TestATokenExpiringWhileItsShopperOrders).
func TestATokenLastsUntilItsLinesExpiry(t *testing.T) {
	kr := token.NewKeyring(newKey(t))
	ready := time.Unix(1_800_000_000, 950*int64(time.Millisecond))
	c := token.Claims{ID: "q:1", Queue: "q", User: "u", ReadyAt: ready, ExpiresAt: ready.Add(time.Second)}
	tok, err := kr.Sign(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kr.Verify(tok, ready.Add(500*time.Millisecond)); err != nil {
		t.Errorf("Verify half a second after READY, half a second before the line's expiry: %v, want valid", err)
	}
	if _, err := kr.Verify(tok, ready.Add(1100*time.Millisecond)); !errors.Is(err, token.ErrExpired) {
		t.Errorf("Verify past the whole second after the line's expiry: %v, want ErrExpired", err)
	}
}
