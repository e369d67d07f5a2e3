package opshttp_test

import (
	"context"
	"fmt"
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
	testenv.Eventually(t, 5*time.Second, func() error {
		return want(reg, `usher_redis_pool_connections{pool="commands",state="in_use"} 5`)
	}, "five connections in use")

	// The push that wakes them finds none idle and dials a sixth.
	rdb.RPush(ctx, "wake", 1, 2, 3, 4, 5)
	wg.Wait()
	if err := want(reg, `usher_redis_pool_connections{pool="commands",state="idle"} 6`,
		`usher_redis_pool_connections{pool="commands",state="in_use"} 0`,
		`usher_redis_pool_dials_total{pool="commands"} 6`); err != nil {
		t.Fatal(err)
	}
	clients, err := rdb.ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(strings.TrimSpace(clients), "\n") + 1; n != 6 {
		t.Errorf("redis lists %d clients, want the pool's 6:\n%s", n, clients)
	}
}

// want reports the lines of the form name{labels} value that reg's
// metrics lack.
func want(reg *prometheus.Registry, lines ...string) error {
	families, err := reg.Gather()
	if err != nil {
		return err
	}
	have := map[string]bool{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			have[fmt.Sprintf("%s{%s} %g", f.GetName(), strings.Join(labels, ","), v)] = true
		}
	}
	var missing []string
	for _, l := range lines {
		if !have[l] {
			missing = append(missing, l)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("metrics lack %q; they are %v", missing, have)
	}
	return nil
}
