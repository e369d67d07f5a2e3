package main

import (
	"errors"
	"fmt"

	"usher/gateway/userauth"
	"usher/internal/config"
)

// devAdminToken is USHER_ADMIN_TOKEN's default: right for one laptop,
// wrong anywhere else, since everyone knows it.
const devAdminToken = "dev-admin-token"

// unsafe lists the settings that are fine on a laptop and dangerous where
// others can connect, so the gateway refuses to start with them rather
// than serve them: each message says what to set instead. A listener on a
// loopback address is reachable from this host only, so none of this
// applies there (make run, the tests, the fault suite).
//
//   - the development admin token where the admin API is reachable: anyone
//     could reconfigure, pause or close every queue;
//   - user identity from a header (USHER_USER_AUTH=header) with no trusted
//     proxy: anyone could claim to be any shopper;
//   - the proxy gate's pass cookie without Secure (the gate file's
//     insecureCookie): a pass would travel in clear and could be copied
//     off the wire;
//
// (Go profiles, USHER_PPROF_ADDR, are refused beyond loopback for every
// service: service.Load.)
func (s settings) unsafe() error {
	var errs []error
	adminAddr := s.addr
	if s.adminAddr != "" {
		adminAddr = s.adminAddr
	}
	if s.adminToken == devAdminToken && !config.IsLoopback(adminAddr) {
		errs = append(errs, fmt.Errorf("the admin API listens on %s with the development admin token (USHER_ADMIN_TOKEN unset or %q): "+
			"set USHER_ADMIN_TOKEN to a secret of your own (e.g. `openssl rand -hex 32`), or serve the admin API on loopback only (USHER_ADMIN_ADDR=127.0.0.1:8084)",
			adminAddr, devAdminToken))
	}
	if s.protect.users.Mode == userauth.ModeHeader && !s.protect.ips.TrustsProxies() && !config.IsLoopback(s.addr) {
		errs = append(errs, fmt.Errorf("USHER_USER_AUTH=header believes X-User-Id from whoever connects, and the gateway listens on %s: "+
			"set USHER_TRUSTED_PROXIES to the addresses (CIDRs) of the shop's proxy that sets X-User-Id (the header is then believed from it only), "+
			"or verify the shop's user JWTs instead (USHER_USER_AUTH=jwt-hs256 with USHER_USER_JWT_SECRET_FILE, or jwt-jwks with USHER_USER_JWKS_URL)", s.addr))
	}
	if s.gate.InsecureCookie && !config.IsLoopback(s.addr) {
		errs = append(errs, fmt.Errorf("USHER_GATE_FILE sets insecureCookie and the gateway listens on %s: "+
			"a pass cookie without Secure travels in clear; serve the shop over HTTPS and drop insecureCookie (it is for loopback tests only)", s.addr))
	}
	return errors.Join(errs...)
}
