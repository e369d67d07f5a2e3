package main

import (
	"time"

	"usher/shared/config"
	"usher/shared/service"
)

type settings struct {
	service.Settings
	addr string
	// orderHold is how long a requested order holds its slot: the gateway's
	// setting of the same name; a line healed from the orders stream holds
	// it as long.
	orderHold time.Duration
}

func loadSettings(env *config.Env) (settings, error) {
	s := settings{
		Settings:  service.Load(env, 32),
		addr:      env.String("USHER_ADMITTER_ADDR", "127.0.0.1:8082"),
		orderHold: env.Duration("USHER_ORDER_HOLD", 6*time.Minute+30*time.Second),
	}
	return s, env.Err()
}
