package main

import (
	"path/filepath"
	"time"

	"usher/shared/config"
	"usher/shared/keyspace"
)

type settings struct {
	addr           string
	natsURLs       []string
	redisURL       string
	redisPool      int
	databaseURL    string
	redisPipelines int
	replicas       int
	adminToken     string
	signingKeyFile string
	verifyKeyFiles []string
	ticketSecret   string
	notifierURL    string
	pageCSS        string
	pprofAddr      string
	logLevel       string
	shutdown       time.Duration
	protect        protectSettings
	orderHold      time.Duration
	tombstones     time.Duration
	local          func() time.Time
}

// loadSettings reads the gateway's environment; every problem is reported
// at once.
func loadSettings(env *config.Env) (settings, error) {
	data := env.String("USHER_DATA_DIR", ".usher")
	s := settings{
		addr:           env.String("USHER_GATEWAY_ADDR", "127.0.0.1:8080"),
		natsURLs:       env.List("USHER_NATS_URL", "nats://127.0.0.1:4222"),
		redisURL:       env.String("USHER_REDIS_URL", "redis://127.0.0.1:6379/0"),
		redisPool:      env.Int("USHER_REDIS_POOL", 32, 1),
		redisPipelines: env.Int("USHER_REDIS_PIPELINES", 4, 1),
		databaseURL:    env.String("USHER_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/usher?sslmode=disable"),
		replicas:       env.Int("USHER_STREAM_REPLICAS", 1, 1),
		adminToken:     env.String("USHER_ADMIN_TOKEN", "dev-admin-token"),
		signingKeyFile: env.String("USHER_SIGNING_KEY_FILE", filepath.Join(data, "signing.key")),
		verifyKeyFiles: env.List("USHER_VERIFY_KEY_FILES", ""),
		ticketSecret:   env.String("USHER_TICKET_SECRET_FILE", filepath.Join(data, "ticket.secret")),
		notifierURL:    env.String("USHER_NOTIFIER_PUBLIC_URL", ""),
		pageCSS:        env.String("USHER_PAGE_CSS_URL", ""),
		pprofAddr:      env.String("USHER_PPROF_ADDR", ""),
		logLevel:       env.String("USHER_LOG_LEVEL", "info"),
		shutdown:       env.Duration("USHER_SHUTDOWN_TIMEOUT", 5*time.Second),
		protect:        loadProtectSettings(env),
		orderHold:      env.Duration("USHER_ORDER_HOLD", 6*time.Minute+30*time.Second),
		tombstones:     env.Duration("USHER_TOMBSTONE_TTL", keyspace.TombstoneTTL),
		local:          env.LocalClock(),
	}
	return s, env.Err()
}
