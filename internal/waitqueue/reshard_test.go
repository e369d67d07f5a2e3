package waitqueue_test

import (
	"context"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"usher/internal/script"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
)

// threeMasters starts a Redis Cluster of three masters (no replicas) and
// returns their addresses.
func threeMasters(t *testing.T) []string {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Skip("redis-cli not found")
	}
	var addrs []string
	for range 3 {
		url, _ := testenv.RedisServerWith(t, "--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(t.TempDir(), "nodes.conf"), "--cluster-require-full-coverage", "no")
		addrs = append(addrs, strings.TrimSuffix(strings.TrimPrefix(url, "redis://"), "/0"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := append([]string{"--cluster", "create"}, addrs...)
	if out, err := exec.CommandContext(ctx, cli, append(args, "--cluster-replicas", "0", "--cluster-yes")...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		for _, a := range addrs {
			c := redis.NewClient(&redis.Options{Addr: a})
			info, err := c.ClusterInfo(ctx).Result()
			c.Close()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				return false
			}
		}
		return true
	}, "the cluster is not ok")
	return addrs
}

// A queue's slot moves to another master (a reshard) while a script on it
// runs: for as long as its keys are split between the two masters Redis
// answers TRYAGAIN, and the call waits the move out and then goes through,
// rather than failing the shopper's request.
func TestAScriptWaitsOutItsSlotsMove(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node Redis Cluster")
	}
	addrs := threeMasters(t)
	ctx := context.Background()
	rdb, err := waitqueue.Dial(waitqueue.Settings{URL: strings.Join(addrs, ","), Pool: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	cc := rdb.(*redis.ClusterClient)
	a, b := "usher:{moving}:a", "usher:{moving}:b"
	testenv.Eventually(t, 10*time.Second, func() error { return rdb.MSet(ctx, a, "A", b, "B").Err() }, "no write before the move")

	src, err := cc.MasterForKey(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	var tgt *redis.Client
	for _, addr := range addrs {
		if addr != src.Options().Addr {
			tgt = redis.NewClient(&redis.Options{Addr: addr})
			break
		}
	}
	defer tgt.Close()
	slot, _ := src.ClusterKeySlot(ctx, a).Result()
	srcID, _ := src.Do(ctx, "CLUSTER", "MYID").Text()
	tgtID, _ := tgt.Do(ctx, "CLUSTER", "MYID").Text()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	host, port, _ := net.SplitHostPort(tgt.Options().Addr)
	// The move begins: a alone has left.
	must(tgt.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err())
	must(src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", tgtID).Err())
	must(src.Do(ctx, "MIGRATE", host, port, "", 0, 5000, "KEYS", a).Err())

	const moveLasts = 500 * time.Millisecond
	moved := make(chan error, 1)
	go func() {
		time.Sleep(moveLasts)
		err := src.Do(ctx, "MIGRATE", host, port, "", 0, 5000, "KEYS", b).Err()
		for _, c := range []*redis.Client{tgt, src} {
			if err == nil {
				err = c.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", tgtID).Err()
			}
		}
		moved <- err
	}()

	c := waitqueue.NewClient(rdb)
	c.EnableBatching()
	bctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = c.RunBatches(bctx, 2) }()
	both := script.New(`return redis.call('GET', KEYS[1]) .. redis.call('GET', KEYS[2])`)
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	began := time.Now()
	got, err := c.RunScript(rctx, both, []string{a, b}).Text()
	took := time.Since(began)
	if err := <-moved; err != nil {
		t.Fatalf("finish the move: %v", err)
	}
	if err != nil || got != "AB" {
		t.Fatalf("RunScript during the move = %q, %v; want \"AB\", nil", got, err)
	}
	if took < moveLasts/2 {
		t.Errorf("RunScript answered after %v, before the move ended (%v): it did not meet the move", took, moveLasts)
	}
}
