package waitqueue_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"usher/internal/testenv"
	"usher/internal/waitqueue"
)

// failoverNodeTimeout is the test cluster's cluster-node-timeout.
const failoverNodeTimeout = time.Second

// A Redis Cluster master dies and its replica takes over: a service's
// cluster client writes to the new master within moments of the election,
// without waiting for its periodic slot map refresh (go-redis rereads the
// map by itself only on MOVED, which a dead master never sends) and
// without the old master coming back.
func TestAClusterClientFollowsAFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 6-node Redis Cluster")
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Skip("redis-cli not found")
	}
	var addrs []string
	stops := map[string]func(){}
	for range 6 {
		url, stop := testenv.RedisServerWith(t, "--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(t.TempDir(), "nodes.conf"),
			"--cluster-node-timeout", "1000", "--cluster-require-full-coverage", "no")
		addr := strings.TrimSuffix(strings.TrimPrefix(url, "redis://"), "/0")
		addrs = append(addrs, addr)
		stops[addr] = stop
	}
	ctx := context.Background()
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	args := append([]string{"--cluster", "create"}, addrs...)
	if out, err := exec.CommandContext(cctx, cli, append(args, "--cluster-replicas", "1", "--cluster-yes")...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	clusterOK := func() bool {
		for _, a := range addrs {
			if stops[a] == nil {
				continue
			}
			c := redis.NewClient(&redis.Options{Addr: a})
			info, err := c.ClusterInfo(ctx).Result()
			c.Close()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				return false
			}
		}
		return true
	}
	testenv.Eventually(t, 30*time.Second, clusterOK, "the cluster is not ok")
	// A replica that never finished its first sync does not stand for
	// election: wait until every one has.
	testenv.Eventually(t, 30*time.Second, func() bool {
		synced := 0
		for _, a := range addrs {
			c := redis.NewClient(&redis.Options{Addr: a})
			info, _ := c.Info(ctx, "replication").Result()
			c.Close()
			if strings.Contains(info, "master_link_status:up") {
				synced++
			}
		}
		return synced == 3
	}, "the replicas have not synced")

	rdb, err := waitqueue.Dial(waitqueue.Settings{URL: strings.Join(addrs, ","), Pool: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	cc := rdb.(*redis.ClusterClient)
	const key = "usher:{failover}:probe"
	testenv.Eventually(t, 10*time.Second, func() error { return rdb.Set(ctx, key, "before", 0).Err() }, "no write before the failover")
	master, err := cc.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	dead := master.Options().Addr
	stops[dead]()
	stops[dead] = nil
	killed := time.Now()

	// The replica is elected after the node timeout, the failure's
	// agreement and the election's delay (about a second more); the
	// client then writes within a slot map reread.
	var took time.Duration
	testenv.Eventually(t, failoverNodeTimeout+6*time.Second, func() error {
		wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		if err := rdb.Set(wctx, key, "after", 0).Err(); err != nil {
			return err
		}
		took = time.Since(killed)
		return nil
	}, "no write to the new master %v after killing %s", failoverNodeTimeout+6*time.Second, dead)
	now, err := cc.MasterForKey(ctx, key)
	if err != nil || now.Options().Addr == dead {
		t.Fatalf("the key's master is %v (%v), want the promoted replica", now, err)
	}
	t.Logf("master %s killed; a write reached the new master %s after %v", dead, now.Options().Addr, took.Round(10*time.Millisecond))
}
