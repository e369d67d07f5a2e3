package main

import (
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"time"
)

// Environment variables read by pgsim, with their defaults.
const (
	envAddr        = "PGSIM_ADDR"
	envLatencyMean = "PGSIM_LATENCY_MEAN_MS"
	envLatencyTail = "PGSIM_LATENCY_TAIL"
	envFailureRate = "PGSIM_FAILURE_RATE"
	envSeed        = "PGSIM_SEED"
	envAdminToken  = "PGSIM_ADMIN_TOKEN"
	envSlowMS      = "PGSIM_SLOW_MS"
	envKeyInUse    = "PGSIM_KEY_IN_USE"

	defaultAddr       = "127.0.0.1:8090"
	defaultLatencyMS  = 200
	defaultTail       = 0.5
	defaultSeed       = 1
	defaultAdminToken = "dev-admin-token"
	defaultSlowMS     = 5000

	// maxConfigMS bounds every millisecond setting (10 minutes).
	maxConfigMS = 600_000
	// maxTail bounds the log-normal sigma; beyond it the distribution is
	// so skewed that almost every draw hits the latency cap.
	maxTail = 5.0
)

// Config is pgsim's configuration, read from the environment.
type Config struct {
	// Addr is the TCP address to listen on (host:port; port 0 picks one).
	Addr string
	// LatencyMean is the mean simulated latency of a payment.
	LatencyMean time.Duration
	// LatencyTail is the sigma of the log-normal latency distribution;
	// 0 makes every latency exactly LatencyMean.
	LatencyTail float64
	// FailureRate is the fraction (0..1) of new charges that fail with 502.
	FailureRate float64
	// Seed seeds the simulator's random source (latency, failures, ids).
	Seed uint64
	// AdminToken is the bearer token required by /v1/admin/*.
	AdminToken string
	// SlowLatency is the latency of every payment in slow mode until an
	// admin request changes it.
	SlowLatency time.Duration
	// KeyInUse is how a charge meets another in flight under its key:
	// wait for it (default) or, as Stripe, 409 at once (see KeyInUse).
	KeyInUse KeyInUse
}

// loadConfig reads the configuration through getenv, applying defaults to
// unset (empty) variables. Every invalid variable is reported, joined with
// errors.Join, so one run shows all mistakes at once.
func loadConfig(getenv func(string) string) (Config, error) {
	cfg := Config{
		Addr:        defaultAddr,
		LatencyMean: defaultLatencyMS * time.Millisecond,
		LatencyTail: defaultTail,
		FailureRate: 0,
		Seed:        defaultSeed,
		AdminToken:  defaultAdminToken,
		SlowLatency: defaultSlowMS * time.Millisecond,
		KeyInUse:    KeyInUseWait,
	}
	var errs []error
	get := func(name string) (string, bool) {
		v := strings.TrimSpace(getenv(name))
		return v, v != ""
	}

	if v, ok := get(envAddr); ok {
		if _, _, err := net.SplitHostPort(v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: want host:port: %w", envAddr, v, err))
		} else {
			cfg.Addr = v
		}
	}
	if v, ok := get(envLatencyMean); ok {
		d, err := parseMillis(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", envLatencyMean, v, err))
		} else {
			cfg.LatencyMean = d
		}
	}
	if v, ok := get(envLatencyTail); ok {
		f, err := parseFloatIn(v, 0, maxTail)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", envLatencyTail, v, err))
		} else {
			cfg.LatencyTail = f
		}
	}
	if v, ok := get(envFailureRate); ok {
		f, err := parseFloatIn(v, 0, 1)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", envFailureRate, v, err))
		} else {
			cfg.FailureRate = f
		}
	}
	if v, ok := get(envSeed); ok {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: want an unsigned 64-bit integer", envSeed, v))
		} else {
			cfg.Seed = n
		}
	}
	if v, ok := get(envAdminToken); ok {
		cfg.AdminToken = v
	}
	if v, ok := get(envSlowMS); ok {
		d, err := parseMillis(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", envSlowMS, v, err))
		} else {
			cfg.SlowLatency = d
		}
	}
	if v, ok := get(envKeyInUse); ok {
		if k := KeyInUse(v); k.Valid() {
			cfg.KeyInUse = k
		} else {
			errs = append(errs, fmt.Errorf("%s=%q: want %q or %q", envKeyInUse, v, KeyInUseWait, KeyInUseConflict))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// parseMillis parses a non-negative number of milliseconds (fractions
// allowed) up to maxConfigMS.
func parseMillis(s string) (time.Duration, error) {
	f, err := parseFloatIn(s, 0, maxConfigMS)
	if err != nil {
		return 0, err
	}
	return time.Duration(f * float64(time.Millisecond)), nil
}

// parseFloatIn parses a finite float within [lo, hi].
func parseFloatIn(s string, lo, hi float64) (float64, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("want a number in [%g, %g]", lo, hi)
	}
	if f < lo || f > hi {
		return 0, fmt.Errorf("%g is outside [%g, %g]", f, lo, hi)
	}
	return f, nil
}
