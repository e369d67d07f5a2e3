package gate

import (
	"strings"
	"testing"
	"time"
)

func testKeys(t testing.TB, secrets ...string) *Keys {
	t.Helper()
	var b [][]byte
	for _, s := range secrets {
		b = append(b, []byte(strings.Repeat(s, 32)[:32]))
	}
	k, err := NewKeys(b...)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// A sealed pass opens to itself, under the signing key or the one being
// rotated out; any change to it, or another key, opens to nothing.
func TestPassSealsAndOpens(t *testing.T) {
	k := testKeys(t, "a")
	p := Pass{Queue: "drop-1", Seq: 42 * 1024, User: "alice@shop.example", ExpiresAt: time.UnixMilli(1_800_000_000_123)}
	v := k.Seal(p)
	if got, ok := k.Open(v); !ok || got != p {
		t.Fatalf("Open(Seal(%+v)) = %+v, %v", p, got, ok)
	}
	rotated := testKeys(t, "b", "a")
	if got, ok := rotated.Open(v); !ok || got != p {
		t.Errorf("Open under the rotated keys = %+v, %v; want the pass (its key is the second)", got, ok)
	}
	if _, ok := testKeys(t, "b").Open(v); ok {
		t.Error("a pass opens under another key")
	}
	for i := range v {
		for _, c := range []byte{'.', 'A', '0', '_'} {
			if v[i] == c {
				continue
			}
			if w := v[:i] + string(c) + v[i+1:]; func() bool { _, ok := k.Open(w); return ok }() {
				t.Fatalf("Open(%q) opened a pass changed at %d", w, i)
			}
		}
	}
}

// A gate key file holds one key in hex, or two while rotating.
func TestGateKeysNeedThirtyTwoBytes(t *testing.T) {
	if _, err := NewKeys([]byte("short")); err == nil {
		t.Error("NewKeys of 5 bytes: no error")
	}
	if _, err := NewKeys(); err == nil {
		t.Error("NewKeys of nothing: no error")
	}
}
