package main

import (
	"os"
	"time"

	"usher/gateway/httpapi"
	"usher/gateway/userauth"
	"usher/internal/config"
)

// protectSettings are the settings of the gateway's protections: who the
// shopper is, which address a request comes from, and the HTTP limits.
type protectSettings struct {
	users userauth.Settings
	ips   httpapi.ClientIPs
	http  httpapi.Limits
}

// loadProtectSettings reads USHER_USER_*, USHER_TRUSTED_PROXIES,
// USHER_CLIENT_IP_HEADER and USHER_HTTP_*; problems go to env.
func loadProtectSettings(env *config.Env) protectSettings {
	var p protectSettings
	p.users = userauth.Settings{
		Mode:         env.String("USHER_USER_AUTH", userauth.ModeHeader),
		SecretFile:   env.String("USHER_USER_JWT_SECRET_FILE", ""),
		JWKSURL:      env.String("USHER_USER_JWKS_URL", ""),
		Issuer:       env.String("USHER_USER_JWT_ISSUER", ""),
		Audience:     env.String("USHER_USER_JWT_AUDIENCE", ""),
		JWKSRefresh:  env.Duration("USHER_USER_JWKS_REFRESH", 5*time.Minute),
		SecretLoader: os.ReadFile,
	}
	env.Check(p.users.Check())
	ips, err := httpapi.ParseClientIPs(env.List("USHER_TRUSTED_PROXIES", ""), env.String("USHER_CLIENT_IP_HEADER", ""))
	env.Check(err)
	p.ips = ips
	p.users.Proxies = ips // X-User-Id is believed from these only
	def := httpapi.DefaultLimits()
	p.http = httpapi.Limits{
		Body:   env.Int("USHER_HTTP_BODY_LIMIT", def.Body, 1024),
		Header: env.Int("USHER_HTTP_HEADER_LIMIT", def.Header, 1024),
		Read:   env.Duration("USHER_HTTP_READ_TIMEOUT", def.Read),
		Write:  env.Duration("USHER_HTTP_WRITE_TIMEOUT", def.Write),
		Idle:   env.Duration("USHER_HTTP_IDLE_TIMEOUT", def.Idle),
	}
	return p
}
