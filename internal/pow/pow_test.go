package pow_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"usher/internal/pow"
)

var (
	t0      = time.Date(2026, 11, 29, 21, 0, 0, 0, time.UTC)
	alice   = netip.MustParseAddr("198.51.100.7")
	phone6  = netip.MustParseAddr("2001:db8:1:2:aaaa:bbbb:cccc:dddd")
	sameNet = netip.MustParseAddr("2001:db8:1:2::99")    // the same /64
	otherV6 = netip.MustParseAddr("2001:db8:1:3::99")    // the next /64
	mapped  = netip.MustParseAddr("::ffff:198.51.100.7") // alice, as a dual-stack socket sees her
)

func newIssuer(t testing.TB, secret string) *pow.Issuer {
	t.Helper()
	is, err := pow.NewIssuer([]byte(strings.Repeat(secret, 32)), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return is
}

func solve(t testing.TB, c pow.Challenge) string {
	t.Helper()
	nonce, err := pow.Solve(context.Background(), c.Challenge, c.Difficulty)
	if err != nil {
		t.Fatal(err)
	}
	return pow.Value(c.Challenge, nonce)
}

// unsolved returns a value for c whose hash has fewer zero bits than c asks.
func unsolved(t testing.TB, c pow.Challenge) string {
	t.Helper()
	for n := 0; ; n++ {
		v := pow.Value(c.Challenge, strconv.Itoa(n))
		if pow.LeadingZeroBits(v) < c.Difficulty {
			return v
		}
	}
}

func TestIssueThenVerify(t *testing.T) {
	is := newIssuer(t, "k")
	c := is.Issue("drop", alice, 12, t0)
	if c.Algorithm != "sha256" || c.Difficulty != 12 || len(c.Challenge) != pow.ChallengeLen {
		t.Fatalf("Issue = %+v, want sha256, difficulty 12, %d characters", c, pow.ChallengeLen)
	}
	if strings.ContainsAny(c.Challenge, "/+=?#%: .") {
		t.Errorf("challenge %q is not URL-safe or contains the separator", c.Challenge)
	}
	if want := t0.Add(time.Minute); !c.ExpiresAt.Equal(want) {
		t.Errorf("ExpiresAt = %v, want %v", c.ExpiresAt, want)
	}
	v := solve(t, c)
	p, err := is.Verify(v, "drop", alice, t0.Add(59*time.Second))
	if err != nil {
		t.Fatalf("Verify(solved) = %v", err)
	}
	if p.Difficulty != 12 || !p.ExpiresAt.Equal(c.ExpiresAt) || len(p.ID) != 16 {
		t.Errorf("Proof = %+v, want difficulty 12, the challenge's expiry, a 16-character id", p)
	}
	// An IPv4 client seen as a mapped address is the same client.
	if _, err := is.Verify(v, "drop", mapped, t0); err != nil {
		t.Errorf("Verify from the mapped form of the same address = %v", err)
	}
	// Two challenges never share an ID.
	c2 := is.Issue("drop", alice, 0, t0)
	p2, err := is.Verify(solve(t, c2), "drop", alice, t0)
	if err != nil || p2.ID == p.ID {
		t.Errorf("second challenge: id %q (first %q), %v; want a different id", p2.ID, p.ID, err)
	}
}

// Every way a proof can be wrong is refused with the error that names it.
func TestVerifyRejects(t *testing.T) {
	is := newIssuer(t, "k")
	c := is.Issue("drop", alice, 10, t0)
	good := solve(t, c)
	c6 := is.Issue("drop", phone6, 4, t0)
	good6 := solve(t, c6)
	raw, _ := base64.RawURLEncoding.DecodeString(c.Challenge)
	edit := func(i int, b byte) string {
		r := append([]byte(nil), raw...)
		r[i] = b
		return base64.RawURLEncoding.EncodeToString(r) + good[pow.ChallengeLen:]
	}
	nonce := good[pow.ChallengeLen+1:]
	tests := []struct {
		name   string
		value  string
		q      string
		client netip.Addr
		now    time.Time
		want   error
	}{
		{"no header", "", "drop", alice, t0, pow.ErrMissing},
		{"garbage", "hello", "drop", alice, t0, pow.ErrMalformed},
		{"no nonce", c.Challenge + ":", "drop", alice, t0, pow.ErrMalformed},
		{"no separator", c.Challenge + nonce, "drop", alice, t0, pow.ErrMalformed},
		{"a nonce that is not decimal", c.Challenge + ":0x1f", "drop", alice, t0, pow.ErrMalformed},
		{"a nonce with a leading zero", c.Challenge + ":0" + nonce, "drop", alice, t0, pow.ErrMalformed},
		{"a negative nonce", c.Challenge + ":-1", "drop", alice, t0, pow.ErrMalformed},
		{"a nonce of 21 digits", c.Challenge + ":" + strings.Repeat("9", 21), "drop", alice, t0, pow.ErrMalformed},
		{"a truncated challenge", c.Challenge[1:] + ":" + nonce, "drop", alice, t0, pow.ErrMalformed},
		{"standard base64 instead of URL-safe", strings.NewReplacer("-", "+", "_", "/").Replace(c.Challenge) + "A:1", "drop", alice, t0, pow.ErrMalformed},
		{"another version", edit(0, 2), "drop", alice, t0, pow.ErrMalformed},
		{"forged: another secret's challenge", solve(t, newIssuer(t, "z").Issue("drop", alice, 4, t0)), "drop", alice, t0, pow.ErrForged},
		{"forged: the difficulty lowered", edit(1, 0), "drop", alice, t0, pow.ErrForged},
		{"forged: the expiry pushed back", edit(2, raw[2]+1), "drop", alice, t0, pow.ErrForged},
		{"wrong queue", good, "other-drop", alice, t0, pow.ErrForged},
		{"wrong IP", good, "drop", netip.MustParseAddr("198.51.100.8"), t0, pow.ErrForged},
		{"wrong IPv6 /64", good6, "drop", otherV6, t0, pow.ErrForged},
		{"an IPv4 challenge from IPv6", good, "drop", phone6, t0, pow.ErrForged},
		{"expired", good, "drop", alice, c.ExpiresAt, pow.ErrExpired},
		{"long expired", good, "drop", alice, t0.Add(time.Hour), pow.ErrExpired},
		{"too easy: the nonce misses the difficulty", unsolved(t, c), "drop", alice, t0, pow.ErrUnsolved},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := is.Verify(tt.value, tt.q, tt.client, tt.now); !errors.Is(err, tt.want) {
				t.Errorf("Verify(%q) = %v, want %v", tt.value, err, tt.want)
			}
		})
	}
	// The same /64 is the same client: IPv6 privacy addresses rotate in it.
	if _, err := is.Verify(good6, "drop", sameNet, t0); err != nil {
		t.Errorf("Verify from another address of the same /64 = %v, want it accepted", err)
	}
}

// The protocol as a client implements it: SHA-256 of the header value.
func TestSolveMeetsTheProtocol(t *testing.T) {
	for _, d := range []int{0, 1, 8, 16} {
		ch := "AQ8AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
		nonce, err := pow.Solve(context.Background(), ch, d)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(ch + ":" + nonce))
		zeros := 0
		for _, b := range sum {
			if b != 0 {
				for b&0x80 == 0 {
					zeros++
					b <<= 1
				}
				break
			}
			zeros += 8
		}
		if zeros < d {
			t.Errorf("Solve(d=%d) = %s: hash has %d zero bits", d, nonce, zeros)
		}
		// The smallest nonce: every smaller one misses.
		n, _ := strconv.Atoi(nonce)
		for i := 0; i < n; i++ {
			if pow.LeadingZeroBits(ch+":"+strconv.Itoa(i)) >= d {
				t.Fatalf("Solve(d=%d) = %d, but %d solves it too", d, n, i)
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := pow.Solve(ctx, "x", 32); !errors.Is(err, context.Canceled) {
		t.Errorf("Solve with a cancelled context = %v, want context.Canceled", err)
	}
}

func TestNewIssuerWantsALongSecret(t *testing.T) {
	if _, err := pow.NewIssuer([]byte("short"), 0); err == nil {
		t.Error("NewIssuer(5 bytes) succeeded, want an error")
	}
}

func TestLoadOrCreateIssuerKeepsItsSecret(t *testing.T) {
	path := t.TempDir() + "/challenge.secret"
	a, err := pow.LoadOrCreateIssuer(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := pow.LoadOrCreateIssuer(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if a.TTL() != pow.DefaultTTL {
		t.Errorf("TTL = %v, want %v", a.TTL(), pow.DefaultTTL)
	}
	c := a.Issue("q", alice, 1, t0)
	if _, err := b.Verify(solve(t, c), "q", alice, t0); err != nil {
		t.Errorf("a second Issuer on the same file refused the first's challenge: %v", err)
	}
}

// A client in Go: fetch, solve, send the header.
func ExampleSolve() {
	// c is what GET /v1/queues/{q}/challenge answered.
	c := pow.Challenge{Algorithm: "sha256", Challenge: "AQ8AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", Difficulty: 8}
	nonce, err := pow.Solve(context.Background(), c.Challenge, c.Difficulty)
	if err != nil {
		panic(err)
	}
	fmt.Println(pow.Header + ": " + pow.Value(c.Challenge, nonce))
	// Output: Usher-PoW: AQ8AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA:449
}

// Verify never panics, and what it accepts is the one spelling of a
// proof whose hash has the zero bits its challenge asks.
func FuzzVerify(f *testing.F) {
	is := newIssuer(f, "k")
	c := is.Issue("drop", alice, 2, t0)
	f.Add(solve(f, c))
	f.Add(c.Challenge + ":007")
	f.Add("")
	f.Add(strings.Repeat(":", 61))
	f.Add(c.Challenge + ":" + strings.Repeat("1", 20))
	f.Fuzz(func(t *testing.T, v string) {
		p, err := is.Verify(v, "drop", alice, t0)
		if err != nil {
			return
		}
		nonce := v[pow.ChallengeLen+1:]
		if strings.Trim(nonce, "0123456789") != "" || len(nonce) > 20 || (len(nonce) > 1 && nonce[0] == '0') {
			t.Fatalf("Verify(%q) accepted a nonce that is not 1-20 decimal digits without a leading zero", v)
		}
		if pow.LeadingZeroBits(v) < p.Difficulty || len(p.ID) != 16 {
			t.Fatalf("Verify(%q) = %+v: accepted an unsolved proof", v, p)
		}
		// One character changed in the challenge and it is refused.
		b := []byte(v)
		b[3] ^= 1
		if _, err := is.Verify(string(b), "drop", alice, t0); err == nil {
			t.Fatalf("Verify(%q) accepted an edited challenge", b)
		}
	})
}

// cpuTime is this process's user+system CPU time so far. Benchmarks
// report CPU time beside wall time: on a shared machine the wall clock
// counts the time other processes had the cores, the CPU clock does not.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func BenchmarkVerify(b *testing.B) {
	is := newIssuer(b, "k")
	c := is.Issue("drop", alice, 16, t0)
	v := solve(b, c)
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		if _, err := is.Verify(v, "drop", alice, t0); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}

func BenchmarkVerifyForged(b *testing.B) {
	is := newIssuer(b, "k")
	v := solve(b, newIssuer(b, "z").Issue("drop", alice, 8, t0))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := is.Verify(v, "drop", alice, t0); !errors.Is(err, pow.ErrForged) {
			b.Fatal(err)
		}
	}
}

func BenchmarkIssue(b *testing.B) {
	is := newIssuer(b, "k")
	b.ReportAllocs()
	for b.Loop() {
		is.Issue("drop", alice, 16, t0)
	}
}

// BenchmarkSolve is the solve time per difficulty on one core, over many
// challenges (a single one's time is luck: the attempts it takes are
// geometric with mean 2^d). hashes/s is the solver's raw rate.
func BenchmarkSolve(b *testing.B) {
	is := newIssuer(b, "k")
	for _, d := range []int{12, 16, 18, 20} {
		b.Run(fmt.Sprintf("d=%d", d), func(b *testing.B) {
			var tries float64
			i := 0
			cpu0 := cpuTime()
			for b.Loop() {
				c := is.Issue("drop", alice, d, t0.Add(time.Duration(i)))
				nonce, err := pow.Solve(context.Background(), c.Challenge, d)
				if err != nil {
					b.Fatal(err)
				}
				n, _ := strconv.ParseFloat(nonce, 64)
				tries += n + 1
				i++
			}
			cpu := (cpuTime() - cpu0).Seconds()
			b.ReportMetric(tries/b.Elapsed().Seconds(), "hashes/s")
			b.ReportMetric(tries/cpu, "hashes/cpu-s")
			b.ReportMetric(cpu/float64(b.N)*1000, "cpu-ms/op")
		})
	}
}

// BenchmarkHashCeiling is one SHA-256 of a proof-sized input with the
// standard library (SHA extensions where the CPU has them): the most a
// tuned solver on one of these cores could try per second.
func BenchmarkHashCeiling(b *testing.B) {
	v := []byte("AQ8AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA:1234567")
	cpu0 := cpuTime()
	for b.Loop() {
		sha256.Sum256(v)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "hashes/s")
	b.ReportMetric(float64(b.N)/(cpuTime()-cpu0).Seconds(), "hashes/cpu-s")
}
