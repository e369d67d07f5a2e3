package main

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"usher/shared/bus"
	"usher/shared/config"
	"usher/shared/waitqueue"
)

// settings is usherctl's environment, the same variables the services read.
type settings struct {
	nats       bus.Settings
	redis      waitqueue.Settings
	gatewayURL string
	adminToken string
	adminUser  string
}

func (c *cli) settings() (settings, error) {
	env := config.New(c.getenv)
	s := settings{
		nats:       bus.LoadSettings(env),
		redis:      waitqueue.LoadSettings(env, 8),
		gatewayURL: env.String("USHER_GATEWAY_URL", "http://127.0.0.1:8080"),
		adminToken: env.String("USHER_ADMIN_TOKEN", "dev-admin-token"),
		adminUser:  env.String("USER", "usherctl"),
	}
	return s, env.Err()
}

// jetStream connects to NATS. The caller closes the connection. Streams are
// not declared here: a CLI reading history must not create empty streams
// where the services have not.
func (c *cli) jetStream(ctx context.Context) (*nats.Conn, jetstream.JetStream, error) {
	s, err := c.settings()
	if err != nil {
		return nil, nil, err
	}
	nc, err := bus.Connect(s.nats.As(bus.Usherctl, nil), "usherctl")
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	return nc, js, nil
}

// redisStore connects to the queue's Redis. The caller closes the client.
func (c *cli) redisStore(ctx context.Context) (redis.UniversalClient, *waitqueue.Store, error) {
	s, err := c.settings()
	if err != nil {
		return nil, nil, err
	}
	rdb, err := waitqueue.Dial(s.redis.As("usherctl"))
	if err != nil {
		return nil, nil, err
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, nil, fmt.Errorf("redis: %w", err)
	}
	st := waitqueue.New(rdb)
	st.SetTombstoneTTL(s.redis.Tombstones)
	return rdb, st, nil
}
