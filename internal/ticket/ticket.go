// Package ticket issues and checks the opaque ticket a shopper gets on
// joining a queue.
//
// A ticket binds a queue, a user, the entries stream's identity (its epoch:
// a recreated stream numbers its joins from 1 again) and the join's stream
// sequence (the shopper's place in line) under an HMAC-SHA256. Checking one needs only the
// secret: no Redis, no database, no password hash — a poll costs
// microseconds. The ticket is URL-safe so it can sit in a path segment.
//
//	t2.<base64url(queue)>.<base64url(user)>.<epoch>.<seq>.<base64url(mac[:16])>
package ticket

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"hash"
	"strconv"
	"strings"
	"sync"
	"usher/internal/config"
)

// MaxLen bounds the length of a ticket string; anything longer is rejected
// before any work is done.
const MaxLen = 512

// ErrInvalid means the string is not a ticket this service issued.
var ErrInvalid = errors.New("invalid ticket")

// Ticket is what a ticket string proves.
type Ticket struct {
	Queue string
	User  string
	Epoch string // the entries stream's identity: 1–16 of 0-9 a-z
	Seq   uint64
}

// Signer issues and checks tickets with one secret. It is safe for
// concurrent use.
type Signer struct {
	pool sync.Pool
}

// NewSigner returns a Signer keyed by secret (at least 32 bytes).
func NewSigner(secret []byte) (*Signer, error) {
	if len(secret) < 32 {
		return nil, errors.New("ticket secret: want at least 32 bytes")
	}
	key := append([]byte(nil), secret...)
	s := &Signer{}
	s.pool.New = func() any {
		return &macState{h: hmac.New(sha256.New, key), buf: make([]byte, 0, 2*MaxLen), sum: make([]byte, 0, sha256.Size)}
	}
	return s, nil
}

// b64 is strict: a ticket has one spelling, so the unused bits of the last
// character must be zero (the fuzzer found that lenient decoding let several
// strings pass for one ticket).
var b64 = base64.RawURLEncoding.Strict()

// macState is what the pool holds: an HMAC-SHA256 keyed with the secret
// and a scratch buffer, so checking a ticket allocates nothing for either.
type macState struct {
	h   hash.Hash
	buf []byte
	sum []byte
}

// mac writes the first 16 bytes of the HMAC of (q, user, epoch, seq) into out.
func (s *Signer) mac(out *[16]byte, q, user []byte, epoch, seq string) {
	st := s.pool.Get().(*macState)
	defer s.pool.Put(st)
	st.h.Reset()
	// Length-prefixing each part keeps ("ab","c") and ("a","bc") apart.
	b := st.buf[:0]
	b = strconv.AppendInt(b, int64(len(q)), 10)
	b = append(b, ':')
	b = append(b, q...)
	b = strconv.AppendInt(b, int64(len(user)), 10)
	b = append(b, ':')
	b = append(b, user...)
	b = strconv.AppendInt(b, int64(len(epoch)), 10)
	b = append(b, ':')
	b = append(b, epoch...)
	b = strconv.AppendInt(b, int64(len(seq)), 10)
	b = append(b, ':')
	b = append(b, seq...)
	st.h.Write(b)
	st.buf = b
	st.sum = st.h.Sum(st.sum[:0])
	copy(out[:], st.sum)
}

// Issue returns the ticket string for t.
func (s *Signer) Issue(t Ticket) string {
	seq := strconv.FormatUint(t.Seq, 10)
	var sb strings.Builder
	sb.Grow(96)
	sb.WriteString("t2.")
	sb.WriteString(b64.EncodeToString([]byte(t.Queue)))
	sb.WriteByte('.')
	sb.WriteString(b64.EncodeToString([]byte(t.User)))
	sb.WriteByte('.')
	sb.WriteString(t.Epoch)
	sb.WriteByte('.')
	sb.WriteString(seq)
	sb.WriteByte('.')
	var mac [16]byte
	s.mac(&mac, []byte(t.Queue), []byte(t.User), t.Epoch, seq)
	sb.WriteString(b64.EncodeToString(mac[:]))
	return sb.String()
}

// Parse checks a ticket string and returns what it binds. Any malformed,
// truncated or forged string yields ErrInvalid. It decodes into stack
// buffers: the only allocation is the one string holding queue and user.
func (s *Signer) Parse(str string) (Ticket, error) {
	if len(str) > MaxLen || !strings.HasPrefix(str, "t2.") {
		return Ticket{}, ErrInvalid
	}
	var parts [5]string
	rest := str[3:]
	for i := range 4 {
		j := strings.IndexByte(rest, '.')
		if j < 0 {
			return Ticket{}, ErrInvalid
		}
		parts[i], rest = rest[:j], rest[j+1:]
	}
	parts[4] = rest
	if strings.IndexByte(rest, '.') >= 0 {
		return Ticket{}, ErrInvalid
	}
	// Decoded parts are shorter than the string they come from.
	var qBuf, userBuf [MaxLen]byte
	var macBuf [24]byte
	q, ok1 := decode(qBuf[:], parts[0])
	user, ok2 := decode(userBuf[:], parts[1])
	gotMAC, ok3 := decode(macBuf[:], parts[4])
	epoch, seqStr := parts[2], parts[3]
	seq, err := strconv.ParseUint(seqStr, 10, 64)
	// The one spelling Issue writes: no leading zeros.
	canonical := err == nil && (len(seqStr) == 1 || seqStr[0] != '0')
	if !ok1 || !ok2 || !ok3 || len(gotMAC) != 16 || !canonical || !validEpoch(epoch) {
		return Ticket{}, ErrInvalid
	}
	var want [16]byte
	s.mac(&want, q, user, epoch, seqStr)
	if !hmac.Equal(gotMAC, want[:]) {
		return Ticket{}, ErrInvalid
	}
	both := string(q) + string(user) // one allocation for both strings
	return Ticket{Queue: both[:len(q)], User: both[len(q):], Epoch: epoch, Seq: seq}, nil
}

// validEpoch reports whether e can be an epoch: 1–16 of 0-9 a-z (a
// base-36 number, as bus.StreamID writes it).
func validEpoch(e string) bool {
	if len(e) == 0 || len(e) > 16 {
		return false
	}
	for i := 0; i < len(e); i++ {
		if c := e[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z') {
			return false
		}
	}
	return true
}

// decode base64url-decodes src into dst, which must be large enough.
// Only the alphabet is allowed: the decoder itself skips CR and LF, which
// would give a ticket more than one spelling.
func decode(dst []byte, src string) ([]byte, bool) {
	if b64.DecodedLen(len(src)) > len(dst) {
		return nil, false
	}
	for i := 0; i < len(src); i++ {
		c := src[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return nil, false
		}
	}
	n, err := b64.Decode(dst, []byte(src))
	return dst[:n], err == nil
}

// LoadOrCreateSigner keys a Signer with the secret in path, creating a
// random 32-byte secret there on first start. Every gateway and notifier of
// a deployment must share the file (or the secret it holds).
func LoadOrCreateSigner(path string) (*Signer, error) {
	b, err := config.LoadOrCreateFile(path, func() ([]byte, error) {
		b := make([]byte, 32)
		_, err := rand.Read(b)
		return []byte(hex.EncodeToString(b)), err
	})
	if err != nil {
		return nil, fmt.Errorf("ticket secret: %w", err)
	}
	return NewSigner(bytes.TrimSpace(b))
}
