package main

import (
	"time"

	"usher/shared/config"
)

type settings struct {
	addr      string
	natsURLs  []string
	redisURL  string
	redisPool int
	replicas  int
	batch     int
	logLevel  string
	shutdown  time.Duration
}

func loadSettings(env *config.Env) (settings, error) {
	s := settings{
		addr:      env.String("USHER_ADMITTER_ADDR", "127.0.0.1:8082"),
		natsURLs:  env.List("USHER_NATS_URL", "nats://127.0.0.1:4222"),
		redisURL:  env.String("USHER_REDIS_URL", "redis://127.0.0.1:6379/0"),
		redisPool: env.Int("USHER_REDIS_POOL", 32, 1),
		replicas:  env.Int("USHER_STREAM_REPLICAS", 1, 1),
		batch:     env.Int("USHER_INGEST_BATCH", 1000, 1),
		logLevel:  env.String("USHER_LOG_LEVEL", "info"),
		shutdown:  env.Duration("USHER_SHUTDOWN_TIMEOUT", 5*time.Second),
	}
	return s, env.Err()
}
