package service

import (
	"strings"
	"testing"

	"usher/internal/config"
)

// Every service's Go profiles are served on loopback only: anywhere else
// they would hand its memory and goroutines to whoever connects.
func TestProfilesAreRefusedBeyondLoopback(t *testing.T) {
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{"", true},
		{"127.0.0.1:6061", true},
		{"[::1]:6061", true},
		{"localhost:6061", true},
		{"0.0.0.0:6061", false},
		{":6061", false},
		{"10.0.0.5:6061", false},
	} {
		env := config.New(func(k string) string {
			if k == "USHER_PPROF_ADDR" {
				return tc.addr
			}
			return ""
		})
		Load(env, 1)
		err := env.Err()
		switch {
		case tc.ok && err != nil:
			t.Errorf("USHER_PPROF_ADDR=%q refused: %v", tc.addr, err)
		case !tc.ok && (err == nil || !strings.Contains(err.Error(), "set it to a loopback address")):
			t.Errorf("USHER_PPROF_ADDR=%q = %v; want refused, saying what to set", tc.addr, err)
		}
	}
}
