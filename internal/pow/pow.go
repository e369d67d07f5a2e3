// Package pow is usher's proof of work at the door: a place in line costs
// every client — browser, app or bot — a little real CPU work, with nothing
// to install and no third party to call.
//
// # Protocol
//
// A client asks the gateway for a challenge:
//
//	GET /v1/queues/{q}/challenge
//	{"algorithm":"sha256","challenge":"AQ8…","difficulty":18,"expiresAt":"2026-11-29T21:31:18Z"}
//
// and finds a decimal nonce (ASCII digits, no leading zeros: 0, 1, 2, …)
// such that SHA-256 of the ASCII string challenge + ":" + nonce begins
// with at least difficulty zero bits. It joins with the header
//
//	Usher-PoW: <challenge>:<nonce>
//
// The header's value is exactly the string that was hashed, so checking a
// proof is one SHA-256, one HMAC and a comparison: about a microsecond, no
// allocation. Finding one takes 2^difficulty hashes on average (each added
// bit doubles the work); a solver should start at 0 and count up.
//
// A challenge is 40 URL-safe characters (base64url, no padding) of
//
//	version (1) · difficulty (1) · expiry, Unix seconds (4) · salt (8) · tag (16)
//
// where tag is HMAC-SHA256 of the first 14 bytes, the queue and the
// client's address (an IPv4 address, or an IPv6 /64), under a secret only
// the gateways hold. Issuing one therefore stores nothing: the challenge
// carries its own difficulty and expiry, and only a gateway can make one
// that checks for a given queue and address. Clients treat it as opaque.
//
// What Verify does not know is whether a proof was used before: the
// gateway records each spent challenge (its ID) until it expires, so a
// proof buys one join.
package pow

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"math/bits"
	"net/netip"
	"strings"
	"sync"
	"time"

	"usher/internal/config"
)

// Header is the request header a join carries its proof in.
const Header = "Usher-PoW"

// Algorithm is the hash the protocol names in every challenge.
const Algorithm = "sha256"

// MaxDifficulty bounds a challenge's difficulty: 2^32 hashes is hours for
// a phone, so nothing above it is ever useful.
const MaxDifficulty = 32

// DefaultTTL is how long a challenge stays good: long enough for a slow
// phone at a high difficulty, short enough that a stock of challenges
// fetched while the queue was quiet is useless when it gets busy.
const DefaultTTL = 2 * time.Minute

// ChallengeLen is the length of a challenge string.
const ChallengeLen = 40

// maxNonceLen bounds the nonce: 20 digits hold every uint64.
const maxNonceLen = 20

// MaxHeaderLen bounds an Usher-PoW value; anything longer is malformed
// before any work is done.
const MaxHeaderLen = ChallengeLen + 1 + maxNonceLen

const (
	version    = 1
	payloadLen = 14 // version, difficulty, expiry, salt
	tagLen     = 16
	rawLen     = payloadLen + tagLen // 30 bytes: 40 base64 characters
)

// Errors of Verify. Everything a client can get wrong is one of them.
var (
	// ErrMissing: no proof at all.
	ErrMissing = errors.New("pow: no proof")
	// ErrMalformed: not <challenge>:<nonce> in the protocol's spelling.
	ErrMalformed = errors.New("pow: malformed proof")
	// ErrForged: a challenge this secret did not issue for this queue and
	// this client address (another queue's, another address's, edited).
	ErrForged = errors.New("pow: challenge not issued for this queue and address")
	// ErrExpired: the challenge is past its expiry.
	ErrExpired = errors.New("pow: challenge expired")
	// ErrUnsolved: the hash does not have the challenge's zero bits.
	ErrUnsolved = errors.New("pow: nonce does not solve the challenge")
)

// Challenge is what GET /v1/queues/{q}/challenge answers, and what a 428
// carries.
type Challenge struct {
	Algorithm  string    `json:"algorithm"`
	Challenge  string    `json:"challenge"`
	Difficulty int       `json:"difficulty"`
	ExpiresAt  time.Time `json:"expiresAt"`
}

// Proof is a verified proof.
type Proof struct {
	// ID names the challenge (not the nonce): the key a proof is spent
	// under, so one challenge buys one join whatever nonce solved it.
	ID         string
	Difficulty int
	ExpiresAt  time.Time
}

// Issuer issues challenges and verifies proofs with one secret. It is safe
// for concurrent use.
type Issuer struct {
	ttl  time.Duration
	pool sync.Pool
}

// macState is what the pool holds: an HMAC keyed with the secret and a
// scratch buffer, so a check allocates nothing for either.
type macState struct {
	h   hash.Hash
	buf []byte
	sum []byte
}

// NewIssuer returns an Issuer keyed by secret (at least 32 bytes) whose
// challenges live ttl (DefaultTTL when 0).
func NewIssuer(secret []byte, ttl time.Duration) (*Issuer, error) {
	if len(secret) < 32 {
		return nil, errors.New("challenge secret: want at least 32 bytes")
	}
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	key := append([]byte(nil), secret...)
	is := &Issuer{ttl: ttl}
	is.pool.New = func() any {
		return &macState{h: hmac.New(sha256.New, key), buf: make([]byte, 0, 128), sum: make([]byte, 0, sha256.Size)}
	}
	return is, nil
}

// LoadOrCreateIssuer keys an Issuer with the secret in path, creating a
// random 32-byte secret there on first start. Every gateway of a
// deployment must share the file (or the secret it holds).
func LoadOrCreateIssuer(path string, ttl time.Duration) (*Issuer, error) {
	b, err := config.LoadOrCreateFile(path, func() ([]byte, error) {
		b := make([]byte, 32)
		_, err := rand.Read(b)
		return []byte(hex.EncodeToString(b)), err
	})
	if err != nil {
		return nil, fmt.Errorf("challenge secret: %w", err)
	}
	return NewIssuer(bytes.TrimSpace(b), ttl)
}

// TTL is how long the Issuer's challenges live.
func (is *Issuer) TTL() time.Duration { return is.ttl }

// Derive returns a 32-byte key for another purpose (named by label), so a
// deployment's one challenge secret can key related signatures without
// them ever being mistaken for challenges.
func (is *Issuer) Derive(label string) []byte {
	st := is.pool.Get().(*macState)
	defer is.pool.Put(st)
	st.h.Reset()
	st.h.Write([]byte("usher-pow derive\x00"))
	st.h.Write([]byte(label))
	return st.h.Sum(nil)
}

// b64 is strict: a challenge has one spelling.
var b64 = base64.RawURLEncoding.Strict()

// tag writes the HMAC of payload, the queue and the client into out.
func (is *Issuer) tag(out *[tagLen]byte, payload []byte, q string, client netip.Addr) {
	st := is.pool.Get().(*macState)
	defer is.pool.Put(st)
	st.h.Reset()
	b := append(st.buf[:0], "usher-pow/1\x00"...)
	b = append(b, payload...)
	b = append(b, byte(len(q)))
	b = append(b, q...)
	b = appendClient(b, client)
	st.h.Write(b)
	st.buf = b
	st.sum = st.h.Sum(st.sum[:0])
	copy(out[:], st.sum)
}

// appendClient appends what binds a challenge to its client: an IPv4
// address whole, an IPv6 address's /64 (one subscriber gets a whole /64
// and its privacy addresses change within it).
func appendClient(b []byte, a netip.Addr) []byte {
	a = a.Unmap()
	switch {
	case a.Is4():
		v := a.As4()
		return append(append(b, 4), v[:]...)
	case a.Is6():
		v := a.As16()
		return append(append(b, 6), v[:8]...)
	}
	return append(b, 0) // no address (a test's in-memory peer)
}

// Issue returns a fresh challenge of difficulty (clamped to
// 0..MaxDifficulty) for queue q and client, expiring TTL after now.
func (is *Issuer) Issue(q string, client netip.Addr, difficulty int, now time.Time) Challenge {
	difficulty = min(max(difficulty, 0), MaxDifficulty)
	// Whole seconds, rounded up: the challenge never lives shorter than TTL.
	exp := now.Add(is.ttl + time.Second - 1).Truncate(time.Second)
	var raw [rawLen]byte
	raw[0] = version
	raw[1] = byte(difficulty)
	binary.BigEndian.PutUint32(raw[2:6], uint32(exp.Unix()))
	_, _ = rand.Read(raw[6:payloadLen]) // never fails (crypto/rand's contract)
	var tag [tagLen]byte
	is.tag(&tag, raw[:payloadLen], q, client)
	copy(raw[payloadLen:], tag[:])
	return Challenge{Algorithm: Algorithm, Challenge: b64.EncodeToString(raw[:]), Difficulty: difficulty, ExpiresAt: exp.UTC()}
}

// Verify checks an Usher-PoW value for queue q from client at now: the
// challenge must be one this Issuer made for q and client, unexpired, and
// the nonce must solve it. It does not know whether the proof was used
// before (the caller spends Proof.ID). Checks run cheapest first and the
// signature before anything the signature covers is believed; it
// allocates only the returned ID.
func (is *Issuer) Verify(value, q string, client netip.Addr, now time.Time) (Proof, error) {
	if value == "" {
		return Proof{}, ErrMissing
	}
	if !wellFormed(value) {
		return Proof{}, ErrMalformed
	}
	var enc [ChallengeLen]byte
	copy(enc[:], value)
	var raw [rawLen]byte
	if n, err := b64.Decode(raw[:], enc[:]); err != nil || n != rawLen || raw[0] != version {
		return Proof{}, ErrMalformed
	}
	var want [tagLen]byte
	is.tag(&want, raw[:payloadLen], q, client)
	if !hmac.Equal(raw[payloadLen:], want[:]) {
		return Proof{}, ErrForged
	}
	exp := time.Unix(int64(binary.BigEndian.Uint32(raw[2:6])), 0)
	p := Proof{Difficulty: int(raw[1]), ExpiresAt: exp}
	if !now.Before(exp) {
		return p, ErrExpired
	}
	if LeadingZeroBits(value) < p.Difficulty {
		return p, ErrUnsolved
	}
	// The salt and the tag's first bytes: 96 bits, unique per challenge.
	// A copy: value may live in a buffer the server reuses.
	p.ID = strings.Clone(value[8:24])
	return p, nil
}

// wellFormed reports whether v is <40 base64url characters>:<1–20 digits,
// no leading zero>, the one spelling of a proof.
func wellFormed(v string) bool {
	if len(v) < ChallengeLen+2 || len(v) > MaxHeaderLen || v[ChallengeLen] != ':' {
		return false
	}
	for i := 0; i < ChallengeLen; i++ {
		c := v[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	nonce := v[ChallengeLen+1:]
	if len(nonce) > 1 && nonce[0] == '0' {
		return false
	}
	for i := 0; i < len(nonce); i++ {
		if c := nonce[i]; c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// LeadingZeroBits is the number of zero bits SHA-256 of s begins with.
func LeadingZeroBits(s string) int {
	var buf [MaxHeaderLen]byte
	var sum [sha256.Size]byte
	if len(s) <= len(buf) {
		n := copy(buf[:], s)
		sum = sha256.Sum256(buf[:n])
	} else {
		sum = sha256.Sum256([]byte(s))
	}
	return zeroBits(&sum)
}

func zeroBits(sum *[sha256.Size]byte) int {
	n := 0
	for _, b := range sum {
		if b != 0 {
			return n + bits.LeadingZeros8(b)
		}
		n += 8
	}
	return n
}

// Value is the Usher-PoW header value of a solved challenge.
func Value(challenge, nonce string) string { return challenge + ":" + nonce }

// Solve finds the smallest nonce that solves challenge at difficulty, on
// one goroutine, checking ctx every 65,536 tries. It is the reference
// client: an app in Go calls it and sends Value(challenge, nonce).
func Solve(ctx context.Context, challenge string, difficulty int) (string, error) {
	if difficulty < 0 || difficulty > MaxDifficulty {
		return "", fmt.Errorf("pow: difficulty %d out of 0..%d", difficulty, MaxDifficulty)
	}
	buf := make([]byte, 0, len(challenge)+1+maxNonceLen)
	buf = append(buf, challenge...)
	buf = append(buf, ':', '0')
	prefix := len(buf) - 1
	for tries := uint64(0); ; tries++ {
		if tries&0xffff == 0 {
			if err := ctx.Err(); err != nil {
				return "", err
			}
		}
		sum := sha256.Sum256(buf)
		if zeroBits(&sum) >= difficulty {
			return string(buf[prefix:]), nil
		}
		buf = increment(buf, prefix)
	}
}

// increment adds one to the decimal number in b[from:], in place (growing
// by a digit on 9…9).
func increment(b []byte, from int) []byte {
	for i := len(b) - 1; i >= from; i-- {
		if b[i] != '9' {
			b[i]++
			return b
		}
		b[i] = '0'
	}
	b = append(b, '0')
	b[from] = '1'
	return b
}

// Expected is the mean number of hashes a solver tries at difficulty.
func Expected(difficulty int) float64 { return float64(uint64(1) << min(max(difficulty, 0), 63)) }
