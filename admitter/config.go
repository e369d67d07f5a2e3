package main

import (
	"time"

	"usher/shared/config"
	"usher/shared/keyspace"
)

type settings struct {
	addr      string
	natsURLs  []string
	redisURL  string
	redisPool int
	replicas  int
	logLevel  string
	shutdown  time.Duration
	// tombstones is how long finished entries stay in Redis.
	tombstones time.Duration
	// orderHold is how long a requested order holds its slot: the gateway's
	// setting of the same name; a line healed from the orders stream holds
	// it as long.
	orderHold time.Duration
	local     func() time.Time
}

func loadSettings(env *config.Env) (settings, error) {
	s := settings{
		addr:       env.String("USHER_ADMITTER_ADDR", "127.0.0.1:8082"),
		natsURLs:   env.List("USHER_NATS_URL", "nats://127.0.0.1:4222"),
		redisURL:   env.String("USHER_REDIS_URL", "redis://127.0.0.1:6379/0"),
		redisPool:  env.Int("USHER_REDIS_POOL", 32, 1),
		replicas:   env.Int("USHER_STREAM_REPLICAS", 1, 1),
		logLevel:   env.String("USHER_LOG_LEVEL", "info"),
		shutdown:   env.Duration("USHER_SHUTDOWN_TIMEOUT", 5*time.Second),
		tombstones: env.Duration("USHER_TOMBSTONE_TTL", keyspace.TombstoneTTL),
		orderHold:  env.Duration("USHER_ORDER_HOLD", 6*time.Minute+30*time.Second),
		local:      env.LocalClock(),
	}
	return s, env.Err()
}
