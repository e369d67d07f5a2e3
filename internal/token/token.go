// Package token mints and verifies entry tokens: the JWTs that let an
// admitted shopper place an order.
//
// Tokens are signed with Ed25519 (JWS alg EdDSA) and carry the key id in the
// header, so a downstream service can verify them offline against the JWKS
// usher publishes. Ed25519 signatures are deterministic: the same admission
// always yields the same token string, which lets the gateway and the notifier
// both hand it out without storing it anywhere.
//
// Rotation: start every service with the new key as USHER_SIGNING_KEY_FILE
// and the old key's file listed in USHER_VERIFY_KEY_FILES; the JWKS then
// lists both. Drop the old file once the longest token TTL has passed.
package token

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"usher/internal/config"
)

// Issuer is the iss claim of every entry token.
const Issuer = "usher"

// Errors Verify returns; callers map them to HTTP statuses.
var (
	ErrInvalid = errors.New("invalid entry token")
	ErrExpired = errors.New("entry token expired")
	ErrEarly   = errors.New("entry token not valid yet")
)

// Claims are what an entry token says.
type Claims struct {
	ID        string // jti: the admission's token id
	Queue     string // aud
	User      string // sub
	ReadyAt   time.Time
	ExpiresAt time.Time
}

// Key is an Ed25519 key pair with its key id.
type Key struct {
	ID      string
	Private ed25519.PrivateKey
	Public  ed25519.PublicKey
}

// LoadOrCreateKey reads a PKCS#8 PEM Ed25519 private key from path, creating
// one when the file does not exist.
func LoadOrCreateKey(path string) (Key, error) {
	b, err := config.LoadOrCreateFile(path, func() ([]byte, error) {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, err
		}
		der, err := x509.MarshalPKCS8PrivateKey(priv)
		if err != nil {
			return nil, err
		}
		return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
	})
	if err != nil {
		return Key{}, fmt.Errorf("signing key: %w", err)
	}
	return ParseKey(b)
}

// ParseKey decodes a PKCS#8 PEM Ed25519 private key.
func ParseKey(pemBytes []byte) (Key, error) {
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		return Key{}, errors.New("signing key: no PEM block")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return Key{}, fmt.Errorf("signing key: %w", err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return Key{}, errors.New("signing key: not an Ed25519 key")
	}
	pub := priv.Public().(ed25519.PublicKey)
	sum := sha256.Sum256(pub)
	return Key{ID: base64.RawURLEncoding.EncodeToString(sum[:12]), Private: priv, Public: pub}, nil
}

// Keyring signs with one key and verifies with any of its keys.
type Keyring struct {
	signing Key
	header  string // the base64url JWS header of signing's tokens
	verify  map[string]ed25519.PublicKey
	order   []string
}

// NewKeyring signs with signing and also accepts tokens of the older keys.
func NewKeyring(signing Key, older ...Key) *Keyring {
	h := appendJSONString([]byte(`{"alg":"EdDSA","kid":`), signing.ID)
	h = append(h, `,"typ":"JWT"}`...)
	kr := &Keyring{signing: signing, header: base64.RawURLEncoding.EncodeToString(h), verify: map[string]ed25519.PublicKey{}}
	for _, k := range append([]Key{signing}, older...) {
		if _, dup := kr.verify[k.ID]; !dup {
			kr.verify[k.ID] = k.Public
			kr.order = append(kr.order, k.ID)
		}
	}
	return kr
}

type claims struct {
	jwt.RegisteredClaims
}

// Sign returns the entry token for c. The same claims always give the same
// string.
//
// The token is spelled by hand, not through the JWT library's reflection:
// it is minted once per READY, thousands a second on the notifier during a
// sale, and encoding the claims by reflection would cost three times the
// Ed25519 signature itself (most of it growing the small stacks of parked
// stream goroutines). The bytes are the library's own — header keys sorted, claims
// in RegisteredClaims' order, the audience as a one-element array, times in
// whole seconds, strings escaped as encoding/json escapes them — which a
// test and a fuzz target check against the library (TestSignMatchesJWT,
// FuzzSignMatchesJWT).
func (kr *Keyring) Sign(c Claims) (string, error) {
	body := make([]byte, 0, 256)
	body = append(body, `{"iss":"`+Issuer+`"`...)
	if c.User != "" {
		body = appendJSONString(append(body, `,"sub":`...), c.User)
	}
	body = appendJSONString(append(body, `,"aud":[`...), c.Queue)
	// exp is whole seconds, rounded up: a token lapses no earlier than
	// its line's expiresAt (ms), which judges the order exactly (the claim).
	// Rounded down, a token of tokenTtlSeconds 1 readied at .95 s would be
	// refused as expired 50 ms after READY.
	exp := c.ExpiresAt.Unix()
	if c.ExpiresAt.After(time.Unix(exp, 0)) {
		exp++
	}
	body = strconv.AppendInt(append(body, `],"exp":`...), exp, 10)
	nbf := c.ReadyAt.Unix()
	body = strconv.AppendInt(append(body, `,"nbf":`...), nbf, 10)
	body = strconv.AppendInt(append(body, `,"iat":`...), nbf, 10)
	if c.ID != "" {
		body = appendJSONString(append(body, `,"jti":`...), c.ID)
	}
	body = append(body, '}')

	enc := base64.RawURLEncoding
	msg := make([]byte, 0, len(kr.header)+1+enc.EncodedLen(len(body))+1+enc.EncodedLen(ed25519.SignatureSize))
	msg = append(msg, kr.header...)
	msg = append(msg, '.')
	msg = enc.AppendEncode(msg, body)
	sig := ed25519.Sign(kr.signing.Private, msg)
	msg = append(msg, '.')
	return string(enc.AppendEncode(msg, sig)), nil
}

// appendJSONString appends s as encoding/json writes it: plain printable
// ASCII as is, anything else (quotes, backslashes, control and HTML
// characters, non-ASCII, invalid UTF-8) through encoding/json itself.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// MaxLen bounds the token strings Verify looks at.
const MaxLen = 2048

// Verify checks signature, issuer, expiry and not-before at now, and returns
// the claims. Queue and user checks are the caller's.
func (kr *Keyring) Verify(s string, now time.Time) (Claims, error) {
	if len(s) > MaxLen {
		return Claims{}, ErrInvalid
	}
	var c claims
	_, err := jwt.ParseWithClaims(s, &c, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		if k, ok := kr.verify[kid]; ok {
			return k, nil
		}
		return nil, errors.New("unknown kid")
	},
		jwt.WithValidMethods([]string{"EdDSA"}),
		// One spelling per token: no padding, no stray trailing bits.
		jwt.WithStrictDecoding(),
		jwt.WithIssuer(Issuer),
		jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(func() time.Time { return now }),
	)
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return Claims{}, ErrExpired
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return Claims{}, ErrEarly
	case err != nil:
		return Claims{}, ErrInvalid
	}
	if len(c.Audience) != 1 || c.ID == "" || c.Subject == "" || c.NotBefore == nil {
		return Claims{}, ErrInvalid
	}
	return Claims{ID: c.ID, Queue: c.Audience[0], User: c.Subject, ReadyAt: c.NotBefore.Time, ExpiresAt: c.ExpiresAt.Time}, nil
}

// VerifyExpired returns the claims of a token that Verify refuses at now
// for its expiry alone: signed by a key of the keyring, by usher, and
// valid when it was (checked at its not-before). Anything else is the
// error Verify gives at now (nil for a token still valid: ErrInvalid
// then, it is not expired). It grants nothing: a caller may answer only
// for what the token did while it was valid — the order it placed, which
// a shopper whose answer was lost asks for again with it.
func (kr *Keyring) VerifyExpired(s string, now time.Time) (Claims, error) {
	_, err := kr.Verify(s, now)
	switch {
	case err == nil:
		return Claims{}, ErrInvalid
	case !errors.Is(err, ErrExpired):
		return Claims{}, err
	}
	var c claims
	if _, _, err := jwt.NewParser().ParseUnverified(s, &c); err != nil || c.NotBefore == nil {
		return Claims{}, ErrInvalid
	}
	got, err := kr.Verify(s, c.NotBefore.Time)
	if err != nil {
		return Claims{}, ErrInvalid
	}
	return got, nil
}

// JWKS returns the JSON Web Key Set (RFC 7517, OKP keys per RFC 8037) of
// every key the keyring accepts.
func (kr *Keyring) JWKS() []byte {
	type jwk struct {
		Kty string `json:"kty"`
		Crv string `json:"crv"`
		X   string `json:"x"`
		Kid string `json:"kid"`
		Alg string `json:"alg"`
		Use string `json:"use"`
	}
	var set struct {
		Keys []jwk `json:"keys"`
	}
	for _, kid := range kr.order {
		set.Keys = append(set.Keys, jwk{"OKP", "Ed25519", base64.RawURLEncoding.EncodeToString(kr.verify[kid]), kid, "EdDSA", "sig"})
	}
	b, _ := json.Marshal(set)
	return b
}

// LoadKeyring signs with the key in signingFile (created on first start)
// and also accepts tokens of the keys in verifyFiles (the keys being rotated
// out).
func LoadKeyring(signingFile string, verifyFiles []string) (*Keyring, error) {
	k, err := LoadOrCreateKey(signingFile)
	if err != nil {
		return nil, err
	}
	var older []Key
	for _, f := range verifyFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("verify key: %w", err)
		}
		ok, err := ParseKey(b)
		if err != nil {
			return nil, fmt.Errorf("verify key %s: %w", f, err)
		}
		older = append(older, ok)
	}
	return NewKeyring(k, older...), nil
}
