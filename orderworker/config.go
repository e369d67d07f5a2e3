package main

import (
	"fmt"
	"net/url"
	"time"

	"usher/internal/config"
	"usher/internal/service"
)

type settings struct {
	service.Settings
	addr           string
	databaseURL    string
	dbPool         int
	dbWriters      int
	dbBatch        int
	paymentURL     string
	paymentTimeout time.Duration
	orderDeadline  time.Duration
	lookupGrace    time.Duration // past the deadline, how long an unknown payment outcome may wait
	breakerOpen    time.Duration
	ackWait        time.Duration
	concurrency    int
}

// loadSettings reads the order worker's environment; every problem is
// reported at once.
func loadSettings(env *config.Env) (settings, error) {
	s := settings{
		Settings:       service.Load(env, 64),
		addr:           env.Addr("USHER_ORDERWORKER_ADDR", "127.0.0.1:8083"),
		databaseURL:    env.String("USHER_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/usher?sslmode=disable"),
		dbPool:         env.Int("USHER_DB_POOL", 40, 1),
		dbWriters:      env.Int("USHER_ORDER_WRITERS", 4, 0),
		dbBatch:        env.Int("USHER_ORDER_BATCH", 64, 1),
		paymentURL:     env.String("USHER_PAYMENT_URL", "http://127.0.0.1:8090"),
		paymentTimeout: env.Duration("USHER_PAYMENT_TIMEOUT", 2*time.Second),
		orderDeadline:  env.Duration("USHER_ORDER_DEADLINE", 60*time.Second),
		lookupGrace:    env.Duration("USHER_PAYMENT_LOOKUP_GRACE", 5*time.Minute),
		breakerOpen:    env.Duration("USHER_BREAKER_OPEN", 5*time.Second),
		ackWait:        env.Duration("USHER_ORDER_ACK_WAIT", 30*time.Second),
		concurrency:    env.Int("USHER_ORDER_CONCURRENCY", 512, 1),
	}
	env.Check(checkPaymentURL(s.paymentURL))
	if s.ackWait < minAckWait {
		// A worker tells the broker it is still working every third of
		// the ack wait: below this the ticker cannot tick (a panic at the
		// first order), and the broker would redeliver every order while
		// it is worked on. The durable consumer keeps the setting for
		// every worker.
		env.Check(fmt.Errorf("USHER_ORDER_ACK_WAIT=%s: want at least %s", s.ackWait, minAckWait))
	}
	return s, env.Err()
}

// minAckWait is the shortest USHER_ORDER_ACK_WAIT a worker takes.
const minAckWait = time.Second

// checkPaymentURL refuses a payment gateway URL no charge can be sent to.
// Without a scheme ("127.0.0.1:8090") no charge's request can even be
// made: every order would wait out its deadline and fail, every shopper's
// slot held meanwhile.
func checkPaymentURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("USHER_PAYMENT_URL %q: want http://host:port or https://host:port", raw)
	}
	return nil
}
