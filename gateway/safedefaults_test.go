package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"usher/gateway/httpapi"
	"usher/gateway/userauth"
	"usher/internal/config"
)

// Settings that are fine on a laptop are refused where others can connect,
// each with a message that says what to set; on loopback they all start.
func TestUnsafeSettingsAreRefusedBeyondLoopback(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "user.secret")
	if err := os.WriteFile(secret, []byte(strings.Repeat("s", 32)), 0o600); err != nil {
		t.Fatal(err)
	}
	const (
		wantToken   = "set USHER_ADMIN_TOKEN to a secret of your own"
		wantProxies = "set USHER_TRUSTED_PROXIES"
		wantPprof   = "USHER_PPROF_ADDR=0.0.0.0:6060 serves Go profiles"
	)
	safe := map[string]string{"USHER_ADMIN_TOKEN": "a-long-secret-of-our-own", "USHER_TRUSTED_PROXIES": "10.0.0.0/8"}
	with := func(base map[string]string, kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	tests := []struct {
		name string
		env  map[string]string
		want []string // in the error; none: it starts
	}{
		{"the defaults, on loopback (make run)", nil, nil},
		{"the defaults on every interface", map[string]string{"USHER_GATEWAY_ADDR": "0.0.0.0:8080"}, []string{wantToken, wantProxies}},
		{"the defaults on a LAN address", map[string]string{"USHER_GATEWAY_ADDR": "10.1.2.3:8080"}, []string{wantToken, wantProxies}},
		{"the defaults on a host name", map[string]string{"USHER_GATEWAY_ADDR": "gateway.internal:8080"}, []string{wantToken, wantProxies}},
		{"all set, on every interface", with(safe, "USHER_GATEWAY_ADDR", ":8080"), nil},
		{"the dev token, said out loud", with(safe, "USHER_GATEWAY_ADDR", ":8080", "USHER_ADMIN_TOKEN", "dev-admin-token"), []string{wantToken}},
		{"the dev token with the admin API on loopback", with(safe, "USHER_GATEWAY_ADDR", ":8080", "USHER_ADMIN_TOKEN", "", "USHER_ADMIN_ADDR", "127.0.0.1:8084"), nil},
		{"the dev token with the admin API on its own public listener", with(safe, "USHER_GATEWAY_ADDR", "127.0.0.1:8080", "USHER_ADMIN_TOKEN", "", "USHER_ADMIN_ADDR", "0.0.0.0:8084"), []string{wantToken}},
		{"header identity without trusted proxies", with(safe, "USHER_GATEWAY_ADDR", ":8080", "USHER_TRUSTED_PROXIES", ""), []string{wantProxies}},
		{"user JWTs need no proxy", with(safe, "USHER_GATEWAY_ADDR", ":8080", "USHER_TRUSTED_PROXIES", "", "USHER_USER_AUTH", "jwt-hs256", "USHER_USER_JWT_SECRET_FILE", secret), nil},
		{"profiles on every interface", with(safe, "USHER_GATEWAY_ADDR", ":8080", "USHER_PPROF_ADDR", "0.0.0.0:6060"), []string{wantPprof}},
		{"profiles on loopback", with(safe, "USHER_GATEWAY_ADDR", ":8080", "USHER_PPROF_ADDR", "127.0.0.1:6060"), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadSettings(config.New(func(k string) string { return tt.env[k] }))
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("loadSettings = %v, want it to start", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("loadSettings = nil, want refused with %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("loadSettings = %v\nwant it to say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "a-long-secret-of-our-own") {
				t.Errorf("the error shows the admin token: %v", err)
			}
		})
	}
}

// run on every interface with the defaults stops before it connects to
// anything, and says exactly what to set.
func TestRunRefusesTheDefaultsOnEveryInterface(t *testing.T) {
	env := map[string]string{
		"USHER_GATEWAY_ADDR": "0.0.0.0:0",
		// Nothing listens here: run must not get as far as dialling.
		"USHER_NATS_URL": "nats://127.0.0.1:1", "USHER_REDIS_URL": "redis://127.0.0.1:1",
	}
	err := run(context.Background(), func(k string) string { return env[k] }, &strings.Builder{})
	if err == nil {
		t.Fatal("run = nil, want refused")
	}
	for _, want := range []string{
		"the admin API listens on 0.0.0.0:0 with the development admin token",
		"set USHER_ADMIN_TOKEN to a secret of your own",
		"USHER_USER_AUTH=header believes X-User-Id from whoever connects",
		"set USHER_TRUSTED_PROXIES to the addresses (CIDRs) of the shop's proxy",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("run = %v\nwant it to say %q", err, want)
		}
	}
}

// With trusted proxies, X-User-Id is believed from them only: a client
// that reaches the gateway directly names nobody.
func TestUserHeaderOnlyFromTrustedProxies(t *testing.T) {
	tests := []struct {
		proxies string
		want    int
	}{
		{"", 202},             // no proxy configured (a loopback gateway): anyone's header
		{"127.0.0.1/32", 202}, // the test client is the proxy
		{"10.0.0.0/8", 401},   // the test client is not
	}
	for _, tt := range tests {
		t.Run("proxies="+tt.proxies, func(t *testing.T) {
			h := newHarness(t)
			ips, err := httpapi.ParseClientIPs(strings.Fields(tt.proxies), "")
			if err != nil {
				t.Fatal(err)
			}
			users, _, err := userauth.New(userauth.Settings{Mode: userauth.ModeHeader, Proxies: ips}, h.gw.now, h.gw.log)
			if err != nil {
				t.Fatal(err)
			}
			h.gw.users, h.gw.ips = users, ips
			h.rebuild()
			base := h.serve()
			req, _ := http.NewRequest("POST", base+"/v1/queues/"+h.queue+"/tickets", nil)
			req.Header.Set("X-User-Id", "alice")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != tt.want {
				t.Errorf("join with X-User-Id from 127.0.0.1, proxies %q = %d, want %d", tt.proxies, res.StatusCode, tt.want)
			}
		})
	}
}
