package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/golang-jwt/jwt/v5"

	"usher/shared/config"
	"usher/shared/problem"
)

// Who a shopper is. usher has no accounts: the shop says who its user is,
// either by a header its own edge sets (USHER_USER_AUTH=header, the
// default: X-User-Id, trusted because nothing else can reach the gateway),
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

// headerAuth trusts X-User-Id.
type headerAuth struct{}

func (headerAuth) identify(c *fiber.Ctx) (string, error) {
	id := c.Get(headerUserID)
	if !validUser(id) {
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
	if !validUser(claims.Subject) {
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

// jwksKeys holds the shop's public keys from its JWKS URL. They are fetched
// at start and every refresh interval by Run, off the request path; a
// token with a kid not in the set triggers one fetch on the request path,
// at most once per minRefetch however many such tokens arrive (a forger
// cannot make the gateway hammer the shop's key server).
type jwksKeys struct {
	url        string
	client     *http.Client
	refresh    time.Duration
	minRefetch time.Duration
	now        func() time.Time
	log        *slog.Logger

	mu   sync.RWMutex
	keys map[string]jwk

	fetchMu   sync.Mutex // one fetch at a time
	lastFetch time.Time  // guarded by fetchMu
}

// jwk is one usable key of the set.
type jwk struct {
	key any    // *rsa.PublicKey, *ecdsa.PublicKey or ed25519.PublicKey
	alg string // the alg the key is for: RS256, ES256 or EdDSA
}

// jwksMethods are the algorithms a JWKS key may sign with.
var jwksMethods = []string{"RS256", "ES256", "EdDSA"}

func newJWKSKeys(u string, refresh time.Duration, now func() time.Time, log *slog.Logger) *jwksKeys {
	return &jwksKeys{
		url: u, client: &http.Client{Timeout: 5 * time.Second},
		refresh: refresh, minRefetch: 30 * time.Second, now: now, log: log,
		keys: map[string]jwk{},
	}
}

// Run refreshes the keys every refresh interval until ctx ends. A failed
// fetch keeps the keys it has.
func (k *jwksKeys) Run(ctx context.Context) error {
	t := time.NewTicker(k.refresh)
	defer t.Stop()
	for {
		if err := k.fetch(ctx, false); err != nil {
			k.log.Warn("user JWKS not refreshed; keeping the keys held", "url", redactURL(k.url), "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// fetch loads the key set; onDemand fetches only when the last fetch is
// older than minRefetch.
func (k *jwksKeys) fetch(ctx context.Context, onDemand bool) error {
	k.fetchMu.Lock()
	defer k.fetchMu.Unlock()
	now := k.now()
	if onDemand && !k.lastFetch.IsZero() && now.Sub(k.lastFetch) < k.minRefetch {
		return nil
	}
	k.lastFetch = now
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	res, err := k.client.Do(req)
	if err != nil {
		return errors.New("fetch failed") // the URL, with any credentials in it, stays out of logs
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", res.StatusCode)
	}
	keys, err := parseJWKS(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return err
	}
	k.mu.Lock()
	k.keys = keys
	k.mu.Unlock()
	return nil
}

// key is the Keyfunc: the key named by the token's kid, of the token's alg.
func (k *jwksKeys) key(t *jwt.Token) (any, error) {
	kid, _ := t.Header["kid"].(string)
	if kid == "" {
		return nil, errors.New("no kid")
	}
	k.mu.RLock()
	key, ok := k.keys[kid]
	k.mu.RUnlock()
	if !ok {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := k.fetch(ctx, true); err != nil {
			k.log.Warn("user JWKS not fetched for an unknown kid", "err", err)
		}
		k.mu.RLock()
		key, ok = k.keys[kid]
		k.mu.RUnlock()
		if !ok {
			return nil, errors.New("unknown kid")
		}
	}
	if key.alg != t.Method.Alg() {
		return nil, errors.New("the key is for another algorithm")
	}
	return key.key, nil
}

// parseJWKS reads a JSON Web Key Set (RFC 7517), keeping the signature keys
// it can use and skipping the others.
func parseJWKS(r io.Reader) (map[string]jwk, error) {
	var set struct {
		Keys []struct {
			Kty, Kid, Alg, Use, Crv string
			N, E, X, Y              string
		} `json:"keys"`
	}
	if err := json.NewDecoder(r).Decode(&set); err != nil {
		return nil, fmt.Errorf("JWKS: %w", err)
	}
	b64 := base64.RawURLEncoding
	out := map[string]jwk{}
	for _, k := range set.Keys {
		if k.Kid == "" || (k.Use != "" && k.Use != "sig") {
			continue
		}
		var key jwk
		switch {
		case k.Kty == "RSA":
			n, err1 := b64.DecodeString(k.N)
			e, err2 := b64.DecodeString(k.E)
			if err1 != nil || err2 != nil || len(e) == 0 || len(e) > 4 {
				continue
			}
			pub := &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
			if pub.N.BitLen() < 2048 || pub.E < 3 {
				continue
			}
			key = jwk{pub, "RS256"}
		case k.Kty == "OKP" && k.Crv == "Ed25519":
			x, err := b64.DecodeString(k.X)
			if err != nil || len(x) != ed25519.PublicKeySize {
				continue
			}
			key = jwk{ed25519.PublicKey(x), "EdDSA"}
		case k.Kty == "EC" && k.Crv == "P-256":
			x, err1 := b64.DecodeString(k.X)
			y, err2 := b64.DecodeString(k.Y)
			if err1 != nil || err2 != nil || len(x) != 32 || len(y) != 32 {
				continue
			}
			pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, x...), y...))
			if err != nil {
				continue
			}
			key = jwk{pub, "ES256"}
		default:
			continue
		}
		if k.Alg != "" && k.Alg != key.alg {
			continue
		}
		out[k.Kid] = key
	}
	return out, nil
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
	return headerAuth{}, nil, nil
}

// protectSettings are the settings of the gateway's protections: who the
// shopper is, which address a request comes from, and the HTTP limits.
type protectSettings struct {
	users userAuthSettings
	ips   clientIPs
	http  httpLimits
}

// loadProtectSettings reads USHER_USER_*, USHER_TRUSTED_PROXIES,
// USHER_CLIENT_IP_HEADER and USHER_HTTP_*; problems go to env.
func loadProtectSettings(env *config.Env) protectSettings {
	var p protectSettings
	p.users = userAuthSettings{
		mode:         env.String("USHER_USER_AUTH", authHeader),
		secretFile:   env.String("USHER_USER_JWT_SECRET_FILE", ""),
		jwksURL:      env.String("USHER_USER_JWKS_URL", ""),
		issuer:       env.String("USHER_USER_JWT_ISSUER", ""),
		audience:     env.String("USHER_USER_JWT_AUDIENCE", ""),
		jwksRefresh:  env.Duration("USHER_USER_JWKS_REFRESH", 5*time.Minute),
		secretLoader: os.ReadFile,
	}
	env.Check(p.users.check())
	ips, err := parseClientIPs(env.List("USHER_TRUSTED_PROXIES", ""), env.String("USHER_CLIENT_IP_HEADER", ""))
	env.Check(err)
	p.ips = ips
	p.http = httpLimits{
		body:   env.Int("USHER_HTTP_BODY_LIMIT", defaultHTTPLimits.body, 1024),
		header: env.Int("USHER_HTTP_HEADER_LIMIT", defaultHTTPLimits.header, 1024),
		read:   env.Duration("USHER_HTTP_READ_TIMEOUT", defaultHTTPLimits.read),
		write:  env.Duration("USHER_HTTP_WRITE_TIMEOUT", defaultHTTPLimits.write),
		idle:   env.Duration("USHER_HTTP_IDLE_TIMEOUT", defaultHTTPLimits.idle),
	}
	return p
}

// httpLimits bound what one client can make the gateway hold: a request
// body (413 beyond), the request line and headers together (431 beyond),
// the time to send a whole request (slow clients are cut off; SSE lives on
// the notifier, so no gateway request is long), to take an answer, and to
// keep an idle connection.
type httpLimits struct {
	body, header      int
	read, write, idle time.Duration
}

var defaultHTTPLimits = httpLimits{body: 16 << 10, header: 8 << 10, read: 10 * time.Second, write: 10 * time.Second, idle: 60 * time.Second}

// orDefault fills unset limits with the defaults.
func (l httpLimits) orDefault() httpLimits {
	d := defaultHTTPLimits
	if l.body > 0 {
		d.body = l.body
	}
	if l.header > 0 {
		d.header = l.header
	}
	if l.read > 0 {
		d.read = l.read
	}
	if l.write > 0 {
		d.write = l.write
	}
	if l.idle > 0 {
		d.idle = l.idle
	}
	return d
}
