package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"usher/internal/bus"
	"usher/internal/config"
	"usher/internal/redisacl"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/projection"
)

// settings is usherctl's environment, the same variables the services read.
type settings struct {
	nats       bus.Settings
	redis      waitqueue.Settings
	gatewayURL string
	adminToken string
	adminUser  string
	// dataDir is USHER_DATA_DIR, where usherctl's NATS key and Redis
	// password are looked for unless set explicitly.
	dataDir string
}

func (c *cli) settings() (settings, error) {
	env := config.New(c.getenv)
	s := settings{
		nats:       bus.LoadSettings(env),
		redis:      waitqueue.LoadSettings(env, 8),
		gatewayURL: env.String("USHER_GATEWAY_URL", "http://127.0.0.1:8080"),
		adminToken: env.String("USHER_ADMIN_TOKEN", "dev-admin-token"),
		adminUser:  env.String("USER", "usherctl"),
		dataDir:    env.String("USHER_DATA_DIR", ".usher"),
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
		return nil, nil, s.natsRefused(err)
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	return nc, js, nil
}

// redisStore connects to the queue's Redis and returns the line's
// projection there: a rebuild restores records, and usherctl's Redis user
// may run the line's scripts and reads, no more. The caller closes the
// client.
func (c *cli) redisStore(ctx context.Context) (redis.UniversalClient, *projection.Projection, error) {
	s, err := c.settings()
	if err != nil {
		return nil, nil, err
	}
	rs := s.redis.As("usherctl")
	rdb, err := waitqueue.Dial(rs)
	if err != nil {
		return nil, nil, err
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, nil, s.redisRefused(rs, fmt.Errorf("redis: %w", err))
	}
	lc := waitqueue.NewClient(rdb)
	lc.SetTombstoneTTL(s.redis.Tombstones)
	return rdb, projection.New(lc), nil
}

// natsRefused explains a broker's refusal of a connection that offered no
// credentials because usherctl's key was not where it looked. The key's
// default place is in USHER_DATA_DIR, itself by default .usher under the
// current directory: run from anywhere but the repository's root, usherctl
// finds no key, connects anonymously (right for a broker that
// authenticates nobody) and is refused.
func (s settings) natsRefused(err error) error {
	msg := strings.ToLower(err.Error())
	if s.nats.NKeyFile != "" || strings.Contains(strings.Join(s.nats.URLs, ","), "@") ||
		!(errors.Is(err, nats.ErrAuthorization) || strings.Contains(msg, "authorization violation")) {
		return err
	}
	return s.missing("NATS credentials", bus.DefaultKeyFile(s.dataDir, bus.Usherctl), "USHER_NATS_NKEY_FILE", err)
}

// redisRefused is natsRefused for Redis: a server whose default user is
// off refuses a client that found no password file.
func (s settings) redisRefused(r waitqueue.Settings, err error) error {
	msg := err.Error()
	if r.User != "" || r.Password.IsSet() || strings.Contains(r.URL, "@") ||
		!(strings.Contains(msg, "NOAUTH") || strings.Contains(msg, "WRONGPASS")) {
		return err
	}
	user := redisacl.UserOf("usherctl")
	path := redisacl.PasswordFile(waitqueue.DefaultPasswordDir(s.dataDir), user)
	return s.missing("Redis password of "+user, path, "USHER_REDIS_USER and USHER_REDIS_PASSWORD_FILE", err)
}

// missing says that what was looked for at path (in the data folder) is
// not there, when it is not, and how to point usherctl at it; otherwise
// it returns err as it is.
func (s settings) missing(what, path, explicit string, err error) error {
	if _, statErr := os.Stat(path); !errors.Is(statErr, fs.ErrNotExist) {
		return err
	}
	where := path
	if !filepath.IsAbs(path) {
		if abs, absErr := filepath.Abs(path); absErr == nil {
			where = fmt.Sprintf("%s (%s: USHER_DATA_DIR=%s is relative to the current directory)", path, abs, s.dataDir)
		}
	}
	return fmt.Errorf("no %s at %s: set USHER_DATA_DIR to the folder make run wrote (.usher in the repository), or %s: %w",
		what, where, explicit, err)
}
