package main

import (
	"strings"
	"testing"
	"time"
)

func envMap(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestConfigDefaults(t *testing.T) {
	cfg, err := loadConfig(envMap(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Addr:        "127.0.0.1:8090",
		LatencyMean: 200 * time.Millisecond,
		LatencyTail: 0.5,
		FailureRate: 0,
		Seed:        1,
		AdminToken:  "dev-admin-token",
		SlowLatency: 5 * time.Second,
		KeyInUse:    KeyInUseWait,
	}
	if cfg != want {
		t.Fatalf("defaults = %+v, want %+v", cfg, want)
	}
}

func TestConfigFromEnv(t *testing.T) {
	cfg, err := loadConfig(envMap(map[string]string{
		"PGSIM_ADDR":            "0.0.0.0:9000",
		"PGSIM_LATENCY_MEAN_MS": "1.5",
		"PGSIM_LATENCY_TAIL":    "0",
		"PGSIM_FAILURE_RATE":    " 0.25 ",
		"PGSIM_SEED":            "18446744073709551615",
		"PGSIM_ADMIN_TOKEN":     "s3cret",
		"PGSIM_SLOW_MS":         "3000",
		"PGSIM_KEY_IN_USE":      "conflict",
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Addr:        "0.0.0.0:9000",
		LatencyMean: 1500 * time.Microsecond,
		LatencyTail: 0,
		FailureRate: 0.25,
		Seed:        18446744073709551615,
		AdminToken:  "s3cret",
		SlowLatency: 3 * time.Second,
		KeyInUse:    KeyInUseConflict,
	}
	if cfg != want {
		t.Fatalf("config = %+v, want %+v", cfg, want)
	}
}

func TestConfigReportsEveryInvalidVariable(t *testing.T) {
	bad := map[string]string{
		"PGSIM_ADDR":            "no-port",
		"PGSIM_LATENCY_MEAN_MS": "-1",
		"PGSIM_LATENCY_TAIL":    "NaN",
		"PGSIM_FAILURE_RATE":    "1.5",
		"PGSIM_SEED":            "-3",
		"PGSIM_SLOW_MS":         "forever",
		"PGSIM_KEY_IN_USE":      "queue",
	}
	_, err := loadConfig(envMap(bad))
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	for name := range bad {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error does not mention %s:\n%v", name, err)
		}
	}
}
