package main

import (
	"time"

	"usher/internal/bus"
	"usher/internal/config"
	"usher/internal/service"
)

type settings struct {
	service.Settings
	addr string
	// databaseURL is where the admitter reads the SKUs' stock (SELECT on
	// stock only).
	databaseURL string
	// orderHold is how long a requested order holds its slot: the gateway's
	// setting of the same name; a line healed from the orders stream holds
	// it as long.
	orderHold time.Duration
	// durables are the durable consumers the admitter declares with the
	// streams: the order workers' (USHER_ORDER_ACK_WAIT,
	// USHER_ORDER_MAX_ACK_PENDING) and each downstream reader's
	// (USHER_DOWNSTREAM_READERS, the names usherctl nats-auth gives keys).
	durables []bus.Durable
}

func loadSettings(env *config.Env) (settings, error) {
	s := settings{
		Settings:    service.Load(env, 32),
		addr:        env.Addr("USHER_ADMITTER_ADDR", "127.0.0.1:8082"),
		databaseURL: env.String("USHER_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/usher?sslmode=disable"),
		orderHold:   env.Duration("USHER_ORDER_HOLD", 6*time.Minute+30*time.Second),
		durables:    bus.LoadPolicy(env).Durables(bus.LoadOrderWork(env)),
	}
	return s, env.Err()
}
