package main

import (
	"time"

	"usher/internal/config"
	"usher/internal/service"
	"usher/internal/shopper"
)

// settings are the notifier's environment. The names and defaults it
// shares with the gateway (data folder, keys, ticket secret, NATS, Redis)
// are the gateway's, so one environment serves both.
type settings struct {
	service.Settings
	addr        string
	keyFiles    shopper.KeyFiles
	corsOrigins []string
	timing      timing
}

// timing is the stream's pacing; tests shorten it.
type timing struct {
	positions    time.Duration // how often positions are recomputed and pushed
	heartbeat    time.Duration // comment line on an idle stream
	writeTimeout time.Duration // a write that takes longer drops the client
	retry        time.Duration // the reconnection delay suggested to clients
	// resyncPerTick is how many of a queue's clients have their rank read
	// again each position tick: a fixed budget, so a tick's Redis work does
	// not grow with the clients held (each is re-read every n/budget ticks).
	resyncPerTick int
}

func loadSettings(env *config.Env) (settings, error) {
	data := env.String("USHER_DATA_DIR", ".usher")
	s := settings{
		Settings:    service.Load(env, 64),
		addr:        env.Addr("USHER_NOTIFIER_ADDR", "127.0.0.1:8081"),
		keyFiles:    shopper.LoadKeyFiles(env, data),
		corsOrigins: loadCORSOrigins(env),
		timing: timing{
			positions:     env.Duration("USHER_NOTIFIER_POSITION_INTERVAL", time.Second),
			heartbeat:     env.Duration("USHER_NOTIFIER_HEARTBEAT", 15*time.Second),
			writeTimeout:  env.Duration("USHER_NOTIFIER_WRITE_TIMEOUT", 10*time.Second),
			retry:         env.Duration("USHER_NOTIFIER_RETRY", 2*time.Second),
			resyncPerTick: env.Int("USHER_NOTIFIER_RESYNC_PER_TICK", 500, 1),
		},
	}
	env.Check(unsafeCORS(s.addr, s.corsOrigins)) // refused where others can connect: see cors.go
	return s, env.Err()
}
