package gate

import (
	"testing"
	"time"
)

// Whatever a client puts in the pass cookie, Open never panics and opens
// only what the keys sealed: a value it opens seals back to itself.
func FuzzOpenPass(f *testing.F) {
	k := testKeys(f, "a")
	f.Add(k.Seal(Pass{Queue: "drop", Seq: 1, User: "alice", ExpiresAt: time.UnixMilli(1)}))
	f.Add("p1.drop.1.1.YWxpY2U.")
	f.Add("p1..0.0..AAAA")
	f.Add("")
	f.Fuzz(func(t *testing.T, v string) {
		p, ok := k.Open(v)
		if ok && k.Seal(p) != v {
			t.Fatalf("Open(%q) = %+v, which seals to %q", v, p, k.Seal(p))
		}
	})
}

// Whatever the gate file holds, Parse never panics: it returns rules or
// an error, and every rule it returns is complete.
func FuzzParseGateFile(f *testing.F) {
	f.Add([]byte(`{"rules": [{"queue": "drop", "paths": ["/p/"], "bypass": {"cidrs": ["10.0.0.0/8"]}}]}`))
	f.Add([]byte(`{"rules": [{"queue": "drop", "passIdle": "1m", "passTTL": "1s"}]}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg, err := Parse(b, func(string) ([]byte, error) { return []byte("0123456789abcdef0123"), nil })
		if err != nil {
			return
		}
		for _, r := range cfg.Rules {
			if r.Queue == "" || len(r.Paths) == 0 || r.PassIdle <= 0 || r.PassTTL < r.PassIdle || r.WaitingRoom == "" {
				t.Fatalf("Parse(%q) returned an incomplete rule %+v", b, r)
			}
		}
	})
}
