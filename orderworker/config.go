package main

import (
	"time"

	"usher/shared/config"
	"usher/shared/keyspace"
)

type settings struct {
	addr           string
	natsURLs       []string
	redisURL       string
	redisPool      int
	replicas       int
	databaseURL    string
	dbPool         int
	dbWriters      int
	paymentURL     string
	paymentTimeout time.Duration
	orderDeadline  time.Duration
	lookupGrace    time.Duration // past the deadline, how long an unknown payment outcome may wait
	tombstones     time.Duration
	local          func() time.Time
	breakerOpen    time.Duration
	ackWait        time.Duration
	concurrency    int
	logLevel       string
	shutdown       time.Duration
}

// loadSettings reads the order worker's environment; every problem is
// reported at once.
func loadSettings(env *config.Env) (settings, error) {
	s := settings{
		addr:           env.String("USHER_ORDERWORKER_ADDR", "127.0.0.1:8083"),
		natsURLs:       env.List("USHER_NATS_URL", "nats://127.0.0.1:4222"),
		redisURL:       env.String("USHER_REDIS_URL", "redis://127.0.0.1:6379/0"),
		redisPool:      env.Int("USHER_REDIS_POOL", 64, 1),
		replicas:       env.Int("USHER_STREAM_REPLICAS", 1, 1),
		databaseURL:    env.String("USHER_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/usher?sslmode=disable"),
		dbPool:         env.Int("USHER_DB_POOL", 40, 1),
		dbWriters:      env.Int("USHER_ORDER_WRITERS", 4, 0),
		paymentURL:     env.String("USHER_PAYMENT_URL", "http://127.0.0.1:8090"),
		paymentTimeout: env.Duration("USHER_PAYMENT_TIMEOUT", 2*time.Second),
		orderDeadline:  env.Duration("USHER_ORDER_DEADLINE", 60*time.Second),
		lookupGrace:    env.Duration("USHER_PAYMENT_LOOKUP_GRACE", 5*time.Minute),
		tombstones:     env.Duration("USHER_TOMBSTONE_TTL", keyspace.TombstoneTTL),
		local:          env.LocalClock(),
		breakerOpen:    env.Duration("USHER_BREAKER_OPEN", 5*time.Second),
		ackWait:        env.Duration("USHER_ORDER_ACK_WAIT", 30*time.Second),
		concurrency:    env.Int("USHER_ORDER_CONCURRENCY", 256, 1),
		logLevel:       env.String("USHER_LOG_LEVEL", "info"),
		shutdown:       env.Duration("USHER_SHUTDOWN_TIMEOUT", 5*time.Second),
	}
	return s, env.Err()
}
