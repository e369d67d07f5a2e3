package main

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

// Who a shopper is. usher has no accounts: the shop says who its user is,
// either by a header its own edge sets (USHER_USER_AUTH=header, the
// default: X-User-Id, believed only from the proxies in
// USHER_TRUSTED_PROXIES when there are any, and a gateway listening beyond
// loopback refuses to start without them — see safedefaults.go),
// or by the shop's own signed user JWT, which the gateway verifies itself:
// jwt-hs256 with a shared secret, or jwt-jwks with the shop's public keys
// (RS256, ES256 or EdDSA) fetched from its JWKS URL. The user id is the
// JWT's sub, held to the same rule as X-User-Id.
//
// The user JWT travels in X-User-Token (a "Bearer " prefix is allowed):
// Authorization already carries usher's own credentials on the routes that
// have them (the entry token on orders, the admin token), and one header
// with one meaning is what keeps a token from being taken for another.

// Header names of the shopper's identity.
const (
	headerUserID    = "X-User-Id"
	headerUserToken = "X-User-Token"
)

// maxUserTokenLen bounds the user JWTs looked at.
const maxUserTokenLen = 4096

// jwtLeeway forgives clock skew between the shop and usher.
const jwtLeeway = 30 * time.Second

// userAuth tells who the shopper making a request is.
type userAuth interface {
	identify(c *fiber.Ctx) (string, error)
}

// user is the shopper's id, by the gateway's user authentication; every
// handler that needs it (joins, orders) asks here.
func (a *api) user(c *fiber.Ctx) (string, error) {
	if a.users == nil {
		return headerAuth{}.identify(c)
	}
	return a.users.identify(c)
}

// headerAuth trusts X-User-Id: from any peer when no proxy is trusted (a
// gateway on loopback, behind a proxy on the same host), else only from a
// trusted proxy, so a client that reaches the gateway around the shop's
// proxy names nobody.
type headerAuth struct {
	proxies httpapi.ClientIPs
}

func (h headerAuth) identify(c *fiber.Ctx) (string, error) {
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
	if n := len(c.Request().Header.PeekAll(headerUserID)); n > 1 {
		return "", problem.New(fiber.StatusBadRequest, "invalid-user",
			fmt.Sprintf("X-User-Id was given %d times; the shop's proxy must set it once, replacing any the client sent", n))
	}
	id := c.Get(headerUserID)
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

func (j *jwtAuth) identify(c *fiber.Ctx) (string, error) {
	raw := bearer(c.Get(headerUserToken))
	if raw == "" || len(raw) > maxUserTokenLen {
		return "", unauthorizedUser("requests need " + headerUserToken + ": <the shop's user JWT>")
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

// userAuthSettings are the USHER_USER_* settings.
type userAuthSettings struct {
	mode         string // header | jwt-hs256 | jwt-jwks
	secretFile   string
	jwksURL      string
	issuer       string
	audience     string
	jwksRefresh  time.Duration
	secretLoader func(string) ([]byte, error)
	proxies      httpapi.ClientIPs // USHER_TRUSTED_PROXIES: who may set X-User-Id (mode header)
}

// User authentication modes.
const (
	authHeader   = "header"
	authJWTHS256 = "jwt-hs256"
	authJWTJWKS  = "jwt-jwks"
)

// check lists what is wrong with the settings.
func (s userAuthSettings) check() error {
	var errs []error
	switch s.mode {
	case authHeader:
	case authJWTHS256:
		if s.secretFile == "" {
			errs = append(errs, errors.New("USHER_USER_AUTH=jwt-hs256 needs USHER_USER_JWT_SECRET_FILE"))
		}
	case authJWTJWKS:
		u, err := url.Parse(s.jwksURL)
		if s.jwksURL == "" || err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			errs = append(errs, errors.New("USHER_USER_AUTH=jwt-jwks needs USHER_USER_JWKS_URL, an http(s) URL"))
		}
		// The refresh fetches the shop's key set on every tick, back to
		// back: at 1ms that was thousands of requests a second to the
		// shop's identity provider. An unknown key is fetched on demand
		// at most this often anyway.
		if s.jwksRefresh < minJWKSRefresh {
			errs = append(errs, fmt.Errorf("USHER_USER_JWKS_REFRESH=%s: want at least %s", s.jwksRefresh, minJWKSRefresh))
		}
	default:
		errs = append(errs, fmt.Errorf("USHER_USER_AUTH=%q: want header, jwt-hs256 or jwt-jwks", s.mode))
	}
	return errors.Join(errs...)
}

// newUserAuth builds the configured authentication; run, when not nil, must
// run for as long as the gateway does (it refreshes the JWKS).
func newUserAuth(s userAuthSettings, now func() time.Time, log *slog.Logger) (auth userAuth, run func(context.Context) error, err error) {
	switch s.mode {
	case authJWTHS256:
		secret, err := s.secretLoader(s.secretFile)
		if err != nil {
			return nil, nil, fmt.Errorf("user JWT secret: %w", err)
		}
		secret = []byte(strings.TrimSpace(string(secret)))
		if len(secret) < 32 {
			return nil, nil, errors.New("user JWT secret: want at least 32 bytes")
		}
		return newJWTAuth([]string{"HS256"}, hs256Key(secret), s.issuer, s.audience, now), nil, nil
	case authJWTJWKS:
		keys := newJWKSKeys(s.jwksURL, s.jwksRefresh, now, log)
		return newJWTAuth(jwksMethods, keys.key, s.issuer, s.audience, now), keys.Run, nil
	}
	return headerAuth{proxies: s.proxies}, nil, nil
}
