package opshttp_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"usher/internal/opshttp"
	"usher/internal/testenv"
)

// The pool's figures are the connections Redis sees from the client: held
// in use while commands wait, idle once they are done, and every one
// counted by the server as a connected client.
func TestRedisPoolsCountTheConnectionsRedisSees(t *testing.T) {
	url, _ := testenv.RedisServer(t)
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	opt.PoolSize = 8
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	reg := prometheus.NewRegistry()
	reg.MustRegister(opshttp.RedisPools(rdb))

	// Five blocking reads hold five connections until the list gets items.
	ctx := context.Background()
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() { rdb.BLPop(ctx, 10*time.Second, "wake") })
	}
	conns := func(state string) float64 {
		return testenv.GatherValues(t, reg).Value("usher_redis_pool_connections", map[string]string{"pool": "commands", "state": state})
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return conns("in_use") == 5 }, "five connections in use")

	// The push that wakes them finds none idle and dials a sixth.
	rdb.RPush(ctx, "wake", 1, 2, 3, 4, 5)
	wg.Wait()
	dials := testenv.GatherValues(t, reg).Value("usher_redis_pool_dials_total", map[string]string{"pool": "commands"})
	if idle, inUse := conns("idle"), conns("in_use"); idle != 6 || inUse != 0 || dials != 6 {
		t.Fatalf("commands pool: %v idle, %v in use, %v dialed; want 6, 0, 6", idle, inUse, dials)
	}
	clients, err := rdb.ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(strings.TrimSpace(clients), "\n") + 1; n != 6 {
		t.Errorf("redis lists %d clients, want the pool's 6:\n%s", n, clients)
	}
}
