package gate

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func noSecret(string) ([]byte, error) { return nil, errors.New("no such file") }

// A gate file is checked whole at start: each mistake is named, at once.
func TestParseGateFile(t *testing.T) {
	tests := []struct {
		name, file string
		wantErr    []string // each must be in the error; none: valid
	}{
		{"the smallest", `{"rules": [{"queue": "drop"}]}`, nil},
		{"every field", `{"rules": [{"queue": "drop", "host": "Shop.Example", "paths": ["/p/"], "bypass": {"paths": ["/s/"],
			"methods": ["OPTIONS"], "cidrs": ["10.0.0.0/8"]}, "completePath": "/done", "passIdle": "1m", "passTTL": "1h",
			"cookieDomain": ".shop.example", "failMode": "open", "waitingRoom": "https://q.shop.example/q/drop",
			"returnHosts": ["www.shop.example"], "deny": "401"}], "insecureCookie": true}`, nil},
		{"no rules", `{"rules": []}`, []string{"no rules"}},
		{"not JSON", `{"rules": [`, []string{"not a gate file"}},
		{"an unknown field", `{"rules": [{"queue": "drop", "pahts": ["/"]}]}`, []string{"pahts"}},
		{"two values", `{"rules": [{"queue": "drop"}]} {}`, []string{"more than one"}},
		{"many mistakes", `{"rules": [{"queue": "a b", "paths": ["p/"], "passIdle": "soon", "failMode": "maybe",
			"waitingRoom": "//evil.example", "bypass": {"cidrs": ["ten"], "methods": ["get"], "header": "X-K"}}]}`,
			[]string{"queue", "path prefix", "passIdle", "failMode", "waitingRoom", "cidr", "method", "secretFile"}},
		{"idle beyond the TTL", `{"rules": [{"queue": "drop", "passIdle": "2h", "passTTL": "1h"}]}`, []string{"passIdle"}},
		{"a secret file that is not there", `{"rules": [{"queue": "drop", "bypass": {"header": "X-K", "secretFile": "/nope"}}]}`,
			[]string{"secretFile"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tt.file), noSecret)
			if len(tt.wantErr) == 0 {
				if err != nil || len(cfg.Rules) == 0 {
					t.Fatalf("Parse = %v, want a valid file", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Parse = %+v, want an error naming %q", cfg, tt.wantErr)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Parse error %q does not name %q", err, w)
				}
			}
		})
	}
}

// A rule's defaults: every path, failMode closed, redirect, the gateway's
// own waiting room, passIdle and passTTL.
func TestGateFileDefaults(t *testing.T) {
	cfg, err := Parse([]byte(`{"rules": [{"queue": "drop", "host": "shop.example"}]}`), noSecret)
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Rules[0]
	if len(r.Paths) != 1 || r.Paths[0] != "/" || r.FailMode != FailClosed || r.Deny != DenyRedirect ||
		r.WaitingRoom != "/q/drop" || r.PassIdle != DefaultPassIdle || r.PassTTL != DefaultPassTTL ||
		len(r.ReturnHosts) != 1 || r.ReturnHosts[0] != "shop.example" || cfg.InsecureCookie {
		t.Errorf("defaults = %+v", r)
	}
	if DefaultPassIdle > 30*time.Minute {
		t.Error("the default passIdle outlives the default passTTL")
	}
}
