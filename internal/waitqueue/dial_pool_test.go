package waitqueue_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"usher/internal/config"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
)

// A burst dials what it needs; once it ends, a pool keeps Idle idle
// connections and closes the rest, so Redis sees the pool shrink back
// rather than keep the burst's connections open until another burst
// reaches them. The same for one server and for a cluster's node.
func TestAPoolClosesWhatABurstLeftAboveIdle(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cluster bool
	}{{"one server", false}, {"a cluster", true}} {
		t.Run(tc.name, func(t *testing.T) {
			rdb, observer := afterABurst(t, tc.cluster, waitqueue.Settings{Pool: 8, Idle: 2})

			// A loaded machine can take seconds here; the error says what
			// Redis and the pool held when the wait ended.
			testenv.Eventually(t, 10*time.Second, func() error {
				if n := listed(t, observer, "blpop"); n != 2 {
					return fmt.Errorf("Redis lists %d of the burst's connections, the pool %+v", n, *rdb.PoolStats())
				}
				return nil
			}, "Redis to see the pool's 2 idle connections")
			if s := rdb.PoolStats(); s.TotalConns != 2 || s.IdleConns != 2 {
				t.Errorf("pool after the burst: %d connections, %d idle; want 2 and 2", s.TotalConns, s.IdleConns)
			}
		})
	}
}

// Below Idle too, a pool follows the load it has now: a connection is
// closed once its Lifetime has passed, as the pool next reaches it, so
// those a burst dialed close after it under a load one connection serves,
// rather than sit idle under that one, never taken, for as long as the
// process runs. The same for one server and for a cluster's node.
func TestAPoolLetsABurstsConnectionsGoBelowIdle(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cluster bool
	}{{"one server", false}, {"a cluster", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			rdb, observer := afterABurst(t, tc.cluster, waitqueue.Settings{Pool: 8, Idle: 8, Lifetime: 300 * time.Millisecond})
			if s := rdb.PoolStats(); s.TotalConns < 6 {
				t.Fatalf("pool after the burst: %d connections; want the burst's 6 kept idle (Idle 8)", s.TotalConns)
			}

			// One command at a time: a load one connection serves.
			testenv.Eventually(t, 10*time.Second, func() error {
				for range 10 {
					if err := rdb.Ping(ctx).Err(); err != nil {
						return err
					}
					time.Sleep(5 * time.Millisecond)
				}
				if n := listed(t, observer, "blpop", "ping"); n > 2 {
					return fmt.Errorf("Redis lists %d connections that served the test, the pool %+v", n, *rdb.PoolStats())
				}
				return nil
			}, "the burst's connections closed under a load of one")
		})
	}
}

// afterABurst dials a server of the test's own (burstServer) with s, and
// returns the client once six blocking reads have held six of its
// connections at once and ended, and a client that watches the server.
func afterABurst(t *testing.T, cluster bool, s waitqueue.Settings) (redis.UniversalClient, *redis.Client) {
	ctx := context.Background()
	url, observer := burstServer(t, cluster)
	if cluster {
		// One address twice: a list is what makes Dial a cluster client.
		addr := strings.TrimPrefix(url, "redis://")
		addr = addr[:strings.IndexByte(addr, '/')]
		url = addr + "," + addr
	}
	s.URL = url
	rdb, err := waitqueue.Dial(s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })

	// Six blocking reads hold six connections until the list gets items.
	var wg sync.WaitGroup
	var woken atomic.Int32
	for range 6 {
		wg.Go(func() {
			rdb.BLPop(ctx, 10*time.Second, "wake")
			woken.Add(1)
		})
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return listed(t, observer, "blpop") == 6 }, "six blocking reads")
	// Woken one at a time: go-redis reads its idle count and adds to it
	// without a lock between, so connections given back at the same
	// instant may all be kept idle, past MaxIdleConns.
	for i := range int32(6) {
		if err := observer.RPush(ctx, "wake", i).Err(); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 10*time.Second, func() bool { return woken.Load() > i }, "a blocking read woken")
	}
	wg.Wait()
	return rdb, observer
}

// burstServer starts a redis-server of the test's own — for a cluster, a
// one-node cluster serving every slot — and returns its URL and a client
// that watches it.
func burstServer(t *testing.T, cluster bool) (string, *redis.Client) {
	var args []string
	if cluster {
		args = []string{"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(t.TempDir(), "nodes.conf")}
	}
	url, _ := testenv.RedisServerWith(t, args...)
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	observer := redis.NewClient(opt)
	t.Cleanup(func() { observer.Close() })
	if cluster {
		ctx := context.Background()
		if err := observer.ClusterAddSlotsRange(ctx, 0, 16383).Err(); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 10*time.Second, func() bool {
			info, err := observer.ClusterInfo(ctx).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok")
		}, "the one-node cluster to be ok")
	}
	return url, observer
}

// listed counts the connections Redis lists whose last command was one
// of cmds: the test's own (BLPOP, PING), not the observer's nor a cluster
// client's state reads (CLUSTER SLOTS), which run on others.
func listed(t *testing.T, observer *redis.Client, cmds ...string) int {
	list, err := observer.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for line := range strings.SplitSeq(strings.TrimSpace(list), "\n") {
		for _, cmd := range cmds {
			if strings.Contains(line, " cmd="+cmd+" ") {
				n++
			}
		}
	}
	return n
}

// A pool keeps 8 idle connections a node, or all of a smaller pool, unless
// USHER_REDIS_IDLE says otherwise; 0 keeps every one.
func TestIdleDefaultsToEightOrThePool(t *testing.T) {
	for _, tt := range []struct {
		env  map[string]string
		want int
	}{
		{map[string]string{}, 8},
		{map[string]string{"USHER_REDIS_POOL": "4"}, 4},
		{map[string]string{"USHER_REDIS_IDLE": "0"}, 0},
		{map[string]string{"USHER_REDIS_IDLE": "20"}, 20},
	} {
		e := config.New(func(k string) string { return tt.env[k] })
		if s := waitqueue.LoadSettings(e, 32); s.Idle != tt.want || e.Err() != nil {
			t.Errorf("LoadSettings with %v: Idle %d, error %v; want %d", tt.env, s.Idle, e.Err(), tt.want)
		}
	}
	e := config.New(func(k string) string { return map[string]string{"USHER_REDIS_IDLE": "-1"}[k] })
	if waitqueue.LoadSettings(e, 32); e.Err() == nil || !strings.Contains(e.Err().Error(), "USHER_REDIS_IDLE") {
		t.Errorf("USHER_REDIS_IDLE=-1: error %v, want one naming it", e.Err())
	}
}

// A connection's read and write buffers are a few KiB: a command, a bulk
// reply and an array reply ten times longer each go through whole, in more
// reads and writes.
func TestCommandsAndRepliesLongerThanTheBuffersGoThroughWhole(t *testing.T) {
	rdb, err := waitqueue.Dial(waitqueue.Settings{URL: testenv.RedisURL(t), Pool: 2, Idle: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	ctx := context.Background()
	key := "usher:test:{" + testenv.Name(t) + "}"
	long := strings.Repeat("0123456789abcdef", 5120) + "end" // 80 KiB and 3 bytes
	if err := rdb.Set(ctx, key+":bulk", long, time.Minute).Err(); err != nil {
		t.Fatalf("SET of %d bytes: %v", len(long), err)
	}
	if got, err := rdb.Get(ctx, key+":bulk").Result(); err != nil || got != long {
		t.Fatalf("GET = %d bytes, %v; want the %d bytes set", len(got), err, len(long))
	}
	items := make([]any, 5000)
	for i := range items {
		items[i] = fmt.Sprintf("item-%d", i)
	}
	if err := rdb.RPush(ctx, key+":list", items...).Err(); err != nil {
		t.Fatalf("RPUSH of %d items: %v", len(items), err)
	}
	rdb.Expire(ctx, key+":list", time.Minute)
	got, err := rdb.LRange(ctx, key+":list", 0, -1).Result()
	if err != nil || len(got) != len(items) || got[0] != "item-0" || got[len(got)-1] != "item-4999" {
		t.Fatalf("LRANGE = %d items, %v; want item-0 … item-4999", len(got), err)
	}
}
