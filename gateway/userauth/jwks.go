package userauth

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
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// JWKSKeys holds the shop's public keys from its JWKS URL. They are fetched
// at start and every refresh interval by Run, off the request path; a
// token with a kid not in the set triggers one fetch on the request path,
// at most once per minRefetch however many such tokens arrive (a forger
// cannot make the gateway hammer the shop's key server).
type JWKSKeys struct {
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

// MinJWKSRefresh is the shortest USHER_USER_JWKS_REFRESH, and how long an
// on-demand fetch (a token naming an unknown key) waits after the last.
const MinJWKSRefresh = 30 * time.Second

// NewJWKSKeys holds the keys of the JWKS at u, refreshed every refresh
// once Run runs.
func NewJWKSKeys(u string, refresh time.Duration, now func() time.Time, log *slog.Logger) *JWKSKeys {
	return &JWKSKeys{
		url: u, client: &http.Client{Timeout: 5 * time.Second},
		refresh: refresh, minRefetch: MinJWKSRefresh, now: now, log: log,
		keys: map[string]jwk{},
	}
}

// Run refreshes the keys every refresh interval until ctx ends. A failed
// fetch keeps the keys it has.
func (k *JWKSKeys) Run(ctx context.Context) error {
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
func (k *JWKSKeys) fetch(ctx context.Context, onDemand bool) error {
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
func (k *JWKSKeys) key(t *jwt.Token) (any, error) {
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

// redactURL hides a password in a URL before it is logged.
func redactURL(u string) string {
	if p, err := url.Parse(u); err == nil {
		return p.Redacted()
	}
	return "(unparsable)"
}
