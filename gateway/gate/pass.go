package gate

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"usher/internal/catalog"
	"usher/internal/config"
)

// CookieName is the pass cookie's name.
const CookieName = "usher_pass"

// passVersion opens every pass: a pass of another layout never verifies.
const passVersion = "p1"

// maxPassLen bounds the cookie values looked at: a longer one is no pass.
const maxPassLen = 512

// Pass is what a pass cookie says, signed: the admission it was issued
// for (queue, entry) and to whom, until when.
type Pass struct {
	Queue     string
	Seq       uint64
	User      string
	ExpiresAt time.Time // to the millisecond
}

// Keys sign passes with the first key and verify them with any: a second
// key is the one being rotated out.
type Keys struct{ keys [][]byte }

// NewKeys returns keys of secrets, the first signing; each at least 32
// bytes.
func NewKeys(secrets ...[]byte) (*Keys, error) {
	if len(secrets) == 0 {
		return nil, errors.New("no gate key")
	}
	for _, s := range secrets {
		if len(s) < 32 {
			return nil, fmt.Errorf("a gate key of %d bytes: want 32 or more", len(s))
		}
	}
	return &Keys{keys: secrets}, nil
}

// LoadOrCreateKeys reads the gate key file (USHER_GATE_KEY_FILE): one key
// of 32 bytes in hex per line, the first signing, a second one accepted
// while it is rotated out. A missing file is created with a random key.
func LoadOrCreateKeys(path string) (*Keys, error) {
	b, err := config.LoadOrCreateFile(path, func() ([]byte, error) {
		k := make([]byte, 32)
		_, err := rand.Read(k)
		return []byte(hex.EncodeToString(k) + "\n"), err
	})
	if err != nil {
		return nil, fmt.Errorf("gate key: %w", err)
	}
	var keys [][]byte
	for _, line := range bytes.Fields(b) {
		k, err := hex.DecodeString(string(line))
		if err != nil {
			return nil, fmt.Errorf("gate key file %s: a line is not hex", path)
		}
		keys = append(keys, k)
	}
	if len(keys) > 2 {
		return nil, fmt.Errorf("gate key file %s: %d keys, want one, or two while rotating", path, len(keys))
	}
	return NewKeys(keys...)
}

// Seal writes p as a cookie value: p1.<queue>.<seq>.<expires ms>.<user,
// base64url>.<HMAC-SHA256 of what precedes, base64url>.
func (k *Keys) Seal(p Pass) string {
	body := passVersion + "." + p.Queue + "." + strconv.FormatUint(p.Seq, 10) + "." +
		strconv.FormatInt(p.ExpiresAt.UnixMilli(), 10) + "." + base64.RawURLEncoding.EncodeToString([]byte(p.User))
	return body + "." + base64.RawURLEncoding.EncodeToString(mac(k.keys[0], body))
}

// Open verifies a cookie value and reads its pass; ok is false for
// anything but a pass one of the keys signed, whatever its expiry (the
// caller judges that on its clock).
func (k *Keys) Open(v string) (p Pass, ok bool) {
	if len(v) > maxPassLen {
		return Pass{}, false
	}
	i := strings.LastIndexByte(v, '.')
	if i < 0 {
		return Pass{}, false
	}
	body, sig := v[:i], v[i+1:]
	got, err := base64.RawURLEncoding.Strict().DecodeString(sig)
	if err != nil || !k.verify(body, got) {
		return Pass{}, false
	}
	return parsePass(body)
}

// verify reports whether sig is body's MAC under one of the keys, in
// constant time for each.
func (k *Keys) verify(body string, sig []byte) bool {
	ok := false
	for _, key := range k.keys {
		if hmac.Equal(mac(key, body), sig) {
			ok = true
		}
	}
	return ok
}

// parsePass reads a signed body's fields.
func parsePass(body string) (Pass, bool) {
	f := strings.Split(body, ".")
	if len(f) != 5 || f[0] != passVersion || !catalog.ValidName(f[1]) {
		return Pass{}, false
	}
	seq, err := strconv.ParseUint(f[2], 10, 64)
	if err != nil || seq == 0 {
		return Pass{}, false
	}
	ms, err := strconv.ParseInt(f[3], 10, 64)
	if err != nil || ms <= 0 {
		return Pass{}, false
	}
	user, err := base64.RawURLEncoding.Strict().DecodeString(f[4])
	if err != nil || !catalog.ValidUser(string(user)) {
		return Pass{}, false
	}
	return Pass{Queue: f[1], Seq: seq, User: string(user), ExpiresAt: time.UnixMilli(ms)}, true
}

func mac(key []byte, body string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(body))
	return m.Sum(nil)
}

// RandomKeys are keys of a random secret: for a gateway whose gate is off,
// or a test's.
func RandomKeys() *Keys {
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	return &Keys{keys: [][]byte{k}}
}
