package waitqueue

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Dial connects to Redis. url is a redis:// or rediss:// URL (or a bare
// host:port) for one server, or a comma-separated list of host:port seeds of
// a Redis Cluster.
func Dial(url string, poolSize int) (redis.UniversalClient, error) {
	if strings.Contains(url, ",") {
		var addrs []string
		for _, a := range strings.Split(url, ",") {
			if a = strings.TrimSpace(a); a != "" {
				addrs = append(addrs, strings.TrimPrefix(a, "redis://"))
			}
		}
		if len(addrs) == 0 {
			return nil, fmt.Errorf("redis address %q: empty", url)
		}
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, PoolSize: poolSize, Dialer: addrMapDialer()}), nil
	}
	if !strings.Contains(url, "://") {
		url = "redis://" + url
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
	}
	opt.PoolSize = poolSize
	return redis.NewClient(opt), nil
}

// Connect dials Redis (see Dial) and waits until it answers PING — a Redis
// that is still loading its data set at start-up answers LOADING — for at
// most 30 seconds or until ctx ends.
func Connect(ctx context.Context, url string, poolSize int) (redis.UniversalClient, error) {
	rdb, err := Dial(url, poolSize)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		err := rdb.Ping(ctx).Err()
		if err == nil {
			return rdb, nil
		}
		select {
		case <-ctx.Done():
			rdb.Close()
			return nil, fmt.Errorf("redis %s not ready: %w", url, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
