package service

import (
	"strings"
	"testing"

	"usher/internal/config"
)

// A bad USHER_LOG_LEVEL is reported with every other bad setting at once,
// as each service promises, not alone after the others are fixed.
func TestLogLevelIsReportedWithTheOtherSettings(t *testing.T) {
	env := map[string]string{"USHER_LOG_LEVEL": "loud", "USHER_REDIS_POOL": "0"}
	e := config.New(func(k string) string { return env[k] })
	Load(e, 1)
	err := e.Err()
	for _, want := range []string{`USHER_LOG_LEVEL="loud"`, `USHER_REDIS_POOL="0"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Load with USHER_LOG_LEVEL=loud and USHER_REDIS_POOL=0: error %v, want it to say %q", err, want)
		}
	}
	for _, level := range []string{"", "debug", "info", "warn", "error", "WARN"} {
		env := map[string]string{"USHER_LOG_LEVEL": level}
		e := config.New(func(k string) string { return env[k] })
		if Load(e, 1); e.Err() != nil {
			t.Errorf("USHER_LOG_LEVEL=%q refused: %v", level, e.Err())
		}
	}
}

// USHER_PPROF_ADDR is a listen address: without its port it stops the
// start with the other settings. Left to the listen, once the service
// runs, it would stop the service on "missing port in address", naming no
// variable.
func TestProfilesAddressWithoutAPortIsRefused(t *testing.T) {
	env := map[string]string{"USHER_PPROF_ADDR": "127.0.0.1"}
	e := config.New(func(k string) string { return env[k] })
	Load(e, 1)
	if err := e.Err(); err == nil || !strings.Contains(err.Error(), `USHER_PPROF_ADDR="127.0.0.1": want host:port`) {
		t.Errorf("Load with USHER_PPROF_ADDR=127.0.0.1: error %v, want it refused naming USHER_PPROF_ADDR", err)
	}
}
