package service

import (
	"strings"
	"testing"

	"usher/shared/config"
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
