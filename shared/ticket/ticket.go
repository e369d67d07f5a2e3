// Package ticket issues and checks the opaque ticket a shopper gets on
// joining a queue.
//
// A ticket binds a queue, a user and the join's stream sequence (the
// shopper's place in line) under an HMAC-SHA256. Checking one needs only the
// secret: no Redis, no database, no password hash — a poll costs
// microseconds. The ticket is URL-safe so it can sit in a path segment.
//
//	t1.<base64url(queue)>.<base64url(user)>.<seq>.<base64url(mac[:16])>
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
	"strconv"
	"strings"
	"sync"
	"usher/shared/config"
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
	s.pool.New = func() any { return hmac.New(sha256.New, key) }
	return s, nil
}

var b64 = base64.RawURLEncoding

func (s *Signer) mac(q, user, seq string) []byte {
	h := s.pool.Get().(interface {
		Write([]byte) (int, error)
		Sum([]byte) []byte
		Reset()
	})
	defer s.pool.Put(h)
	h.Reset()
	// Length-prefixing each part keeps ("ab","c") and ("a","bc") apart.
	var buf [256 + 3*4]byte
	b := buf[:0]
	for _, part := range []string{q, user, seq} {
		b = strconv.AppendInt(b, int64(len(part)), 10)
		b = append(b, ':')
		b = append(b, part...)
	}
	h.Write(b)
	return h.Sum(nil)[:16]
}

// Issue returns the ticket string for t.
func (s *Signer) Issue(t Ticket) string {
	seq := strconv.FormatUint(t.Seq, 10)
	var sb strings.Builder
	sb.Grow(96)
	sb.WriteString("t1.")
	sb.WriteString(b64.EncodeToString([]byte(t.Queue)))
	sb.WriteByte('.')
	sb.WriteString(b64.EncodeToString([]byte(t.User)))
	sb.WriteByte('.')
	sb.WriteString(seq)
	sb.WriteByte('.')
	sb.WriteString(b64.EncodeToString(s.mac(t.Queue, t.User, seq)))
	return sb.String()
}

// Parse checks a ticket string and returns what it binds. Any malformed,
// truncated or forged string yields ErrInvalid.
func (s *Signer) Parse(str string) (Ticket, error) {
	if len(str) > MaxLen || !strings.HasPrefix(str, "t1.") {
		return Ticket{}, ErrInvalid
	}
	parts := strings.Split(str[3:], ".")
	if len(parts) != 4 {
		return Ticket{}, ErrInvalid
	}
	q, err1 := b64.DecodeString(parts[0])
	user, err2 := b64.DecodeString(parts[1])
	mac, err3 := b64.DecodeString(parts[3])
	seq, err4 := strconv.ParseUint(parts[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || len(mac) != 16 ||
		strconv.FormatUint(seq, 10) != parts[2] {
		return Ticket{}, ErrInvalid
	}
	if !hmac.Equal(mac, s.mac(string(q), string(user), parts[2])) {
		return Ticket{}, ErrInvalid
	}
	return Ticket{Queue: string(q), User: string(user), Seq: seq}, nil
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
