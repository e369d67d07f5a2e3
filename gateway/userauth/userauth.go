// Package userauth tells who the shopper making a request is. usher has no
// accounts: the shop says who its user is, either by a header its own edge
// sets (USHER_USER_AUTH=header, the default: X-User-Id, believed only from
// the proxies in USHER_TRUSTED_PROXIES when there are any, and a gateway
// listening beyond loopback refuses to start without them), or by the
// shop's own signed user JWT, which the gateway verifies itself: jwt-hs256
// with a shared secret, or jwt-jwks with the shop's public keys (RS256,
// ES256 or EdDSA) fetched from its JWKS URL. The user id is the JWT's sub,
// held to the same rule as X-User-Id.
//
// The user JWT travels in X-User-Token (a "Bearer " prefix is allowed):
// Authorization already carries usher's own credentials on the routes that
// have them (the entry token on orders, the admin token), and one header
// with one meaning is what keeps a token from being taken for another.
package userauth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/golang-jwt/jwt/v5"

	"usher/gateway/httpapi"
	"usher/internal/catalog"
	"usher/internal/problem"
)

// Header names of the shopper's identity.
const (
	HeaderUserID    = "X-User-Id"
	HeaderUserToken = "X-User-Token"
)

// MaxTokenLen bounds the user JWTs looked at: a longer one names nobody.
const MaxTokenLen = 4096

// jwtLeeway forgives clock skew between the shop and usher.
const jwtLeeway = 30 * time.Second

// Auth tells who the shopper making a request is.
type Auth interface {
	// Identify is the shopper's id, or the problem that says why the
	// request names nobody.
	Identify(c *fiber.Ctx) (string, error)
	// AnyClientNamesUser reports whether any client may name its user:
	// X-User-Id believed from anyone (header mode with no trusted proxy,
	// which the gateway allows on loopback only).
	AnyClientNamesUser() bool
}

// Header is the authentication that trusts X-User-Id from proxies (from
// anyone when there are none).
func Header(proxies httpapi.ClientIPs) Auth { return headerAuth{proxies: proxies} }

// headerAuth trusts X-User-Id: from any peer when no proxy is trusted (a
// gateway on loopback, behind a proxy on the same host), else only from a
// trusted proxy, so a client that reaches the gateway around the shop's
// proxy names nobody.
type headerAuth struct {
	proxies httpapi.ClientIPs
}

func (h headerAuth) AnyClientNamesUser() bool { return !h.proxies.TrustsProxies() }

func (h headerAuth) Identify(c *fiber.Ctx) (string, error) {
	if h.proxies.TrustsProxies() {
		peer, _ := netip.AddrFromSlice(c.Context().RemoteIP())
		if !h.proxies.IsTrusted(peer.Unmap()) {
			return "", problem.New(fiber.StatusUnauthorized, "untrusted-user-header",
				"X-User-Id is believed only from the shop's proxy; this request did not come through it")
		}
	}
	// Given twice, the header names nobody: a proxy that adds its own
	// beside the client's (rather than replacing it) leaves the client's
	// first, which is the one a single read would believe.
	if n := len(c.Request().Header.PeekAll(HeaderUserID)); n > 1 {
		return "", problem.New(fiber.StatusBadRequest, "invalid-user",
			fmt.Sprintf("X-User-Id was given %d times; the shop's proxy must set it once, replacing any the client sent", n))
	}
	id := c.Get(HeaderUserID)
	if !catalog.ValidUser(id) {
		return "", problem.New(fiber.StatusBadRequest, "invalid-user",
			"X-User-Id must be 1-64 characters of A-Z a-z 0-9 . _ : @ -")
	}
	return strings.Clone(id), nil // fiber's strings die with the request
}

// jwtAuth verifies the shop's user JWT.
type jwtAuth struct {
	parser *jwt.Parser
	key    jwt.Keyfunc
}

// newJWTAuth accepts tokens signed by one of methods with a key from key,
// with an expiry, and the issuer and audience when they are not empty.
func newJWTAuth(methods []string, key jwt.Keyfunc, issuer, audience string, now func() time.Time) *jwtAuth {
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(methods),
		jwt.WithExpirationRequired(),
		jwt.WithLeeway(jwtLeeway),
		jwt.WithTimeFunc(now),
	}
	if issuer != "" {
		opts = append(opts, jwt.WithIssuer(issuer))
	}
	if audience != "" {
		opts = append(opts, jwt.WithAudience(audience))
	}
	return &jwtAuth{parser: jwt.NewParser(opts...), key: key}
}

// bearer extracts a token from a header value, with or without the
// "Bearer " scheme (case-insensitive, RFC 9110 section 11.1).
func bearer(v string) string {
	if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
		v = v[7:]
	}
	return strings.TrimSpace(v)
}

func (j *jwtAuth) AnyClientNamesUser() bool { return false }

func (j *jwtAuth) Identify(c *fiber.Ctx) (string, error) {
	raw := bearer(c.Get(HeaderUserToken))
	if raw == "" || len(raw) > MaxTokenLen {
		return "", unauthorizedUser("requests need " + HeaderUserToken + ": <the shop's user JWT>")
	}
	var claims jwt.RegisteredClaims
	if _, err := j.parser.ParseWithClaims(raw, &claims, j.key); err != nil {
		if errors.Is(err, jwt.ErrTokenExpired) {
			return "", unauthorizedUser("the user token has expired")
		}
		return "", unauthorizedUser("the user token is not valid")
	}
	if !catalog.ValidUser(claims.Subject) {
		return "", unauthorizedUser("the user token's sub must be 1-64 characters of A-Z a-z 0-9 . _ : @ -")
	}
	return claims.Subject, nil // decoded from JSON: a string of its own
}

func unauthorizedUser(detail string) problem.Problem {
	return problem.New(fiber.StatusUnauthorized, "invalid-user-token", detail)
}

// hs256Key is the Keyfunc of a shared secret.
func hs256Key(secret []byte) jwt.Keyfunc {
	return func(*jwt.Token) (any, error) { return secret, nil }
}

// NewHS256 verifies user JWTs signed with secret (HS256), with the issuer
// and audience when they are not empty.
func NewHS256(secret []byte, issuer, audience string, now func() time.Time) Auth {
	return newJWTAuth([]string{"HS256"}, hs256Key(secret), issuer, audience, now)
}

// NewJWKS verifies user JWTs signed with one of keys, with the issuer and
// audience when they are not empty.
func NewJWKS(keys *JWKSKeys, issuer, audience string, now func() time.Time) Auth {
	return newJWTAuth(jwksMethods, keys.key, issuer, audience, now)
}

// Settings are the USHER_USER_* settings.
type Settings struct {
	Mode         string // header | jwt-hs256 | jwt-jwks
	SecretFile   string
	JWKSURL      string
	Issuer       string
	Audience     string
	JWKSRefresh  time.Duration
	SecretLoader func(string) ([]byte, error)
	Proxies      httpapi.ClientIPs // USHER_TRUSTED_PROXIES: who may set X-User-Id (mode header)
}

// User authentication modes.
const (
	ModeHeader   = "header"
	ModeJWTHS256 = "jwt-hs256"
	ModeJWTJWKS  = "jwt-jwks"
)

// Check lists what is wrong with the settings.
func (s Settings) Check() error {
	var errs []error
	switch s.Mode {
	case ModeHeader:
	case ModeJWTHS256:
		if s.SecretFile == "" {
			errs = append(errs, errors.New("USHER_USER_AUTH=jwt-hs256 needs USHER_USER_JWT_SECRET_FILE"))
		}
	case ModeJWTJWKS:
		u, err := url.Parse(s.JWKSURL)
		if s.JWKSURL == "" || err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			errs = append(errs, errors.New("USHER_USER_AUTH=jwt-jwks needs USHER_USER_JWKS_URL, an http(s) URL"))
		}
		// The refresh fetches the shop's key set on every tick, back to
		// back: at 1ms that was thousands of requests a second to the
		// shop's identity provider. An unknown key is fetched on demand
		// at most this often anyway.
		if s.JWKSRefresh < MinJWKSRefresh {
			errs = append(errs, fmt.Errorf("USHER_USER_JWKS_REFRESH=%s: want at least %s", s.JWKSRefresh, MinJWKSRefresh))
		}
	default:
		errs = append(errs, fmt.Errorf("USHER_USER_AUTH=%q: want header, jwt-hs256 or jwt-jwks", s.Mode))
	}
	return errors.Join(errs...)
}

// New builds the configured authentication; run, when not nil, must run
// for as long as the gateway does (it refreshes the JWKS).
func New(s Settings, now func() time.Time, log *slog.Logger) (auth Auth, run func(context.Context) error, err error) {
	switch s.Mode {
	case ModeJWTHS256:
		secret, err := s.SecretLoader(s.SecretFile)
		if err != nil {
			return nil, nil, fmt.Errorf("user JWT secret: %w", err)
		}
		secret = []byte(strings.TrimSpace(string(secret)))
		if len(secret) < 32 {
			return nil, nil, errors.New("user JWT secret: want at least 32 bytes")
		}
		return NewHS256(secret, s.Issuer, s.Audience, now), nil, nil
	case ModeJWTJWKS:
		keys := NewJWKSKeys(s.JWKSURL, s.JWKSRefresh, now, log)
		return NewJWKS(keys, s.Issuer, s.Audience, now), keys.Run, nil
	}
	return Header(s.Proxies), nil, nil
}
