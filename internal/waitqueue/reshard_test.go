package waitqueue_test

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"usher/internal/keyspace"
	"usher/internal/script"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/roles"
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

// threeMastersDialed starts threeMasters and dials them as a service
// does.
func threeMastersDialed(t *testing.T) ([]string, redis.UniversalClient) {
	t.Helper()
	addrs := threeMasters(t)
	rdb, err := waitqueue.Dial(waitqueue.Settings{URL: strings.Join(addrs, ","), Pool: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	return addrs, rdb
}

// slotMove is a slot moving from one master to another, step by step as
// redis-cli --cluster reshard moves it.
type slotMove struct {
	t            *testing.T
	src, tgt     *redis.Client
	slot         int64
	srcID, tgtID string
	host, port   string
}

// beginMove opens the move of key's slot to another master of addrs
// (SETSLOT IMPORTING, then MIGRATING); every key stays where it is.
func beginMove(t *testing.T, ctx context.Context, cc *redis.ClusterClient, addrs []string, key string) *slotMove {
	t.Helper()
	src, err := cc.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	m := &slotMove{t: t, src: src}
	for _, addr := range addrs {
		if addr != src.Options().Addr {
			m.tgt = redis.NewClient(&redis.Options{Addr: addr})
			break
		}
	}
	t.Cleanup(func() { m.tgt.Close() })
	m.slot, _ = src.ClusterKeySlot(ctx, key).Result()
	m.srcID, _ = src.Do(ctx, "CLUSTER", "MYID").Text()
	m.tgtID, _ = m.tgt.Do(ctx, "CLUSTER", "MYID").Text()
	m.host, m.port, _ = net.SplitHostPort(m.tgt.Options().Addr)
	for _, err := range []error{
		m.tgt.Do(ctx, "CLUSTER", "SETSLOT", m.slot, "IMPORTING", m.srcID).Err(),
		src.Do(ctx, "CLUSTER", "SETSLOT", m.slot, "MIGRATING", m.tgtID).Err(),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return m
}

// migrate moves keys to the target.
func (m *slotMove) migrate(ctx context.Context, keys ...string) error {
	args := []any{"MIGRATE", m.host, m.port, "", 0, 5000, "KEYS"}
	for _, k := range keys {
		args = append(args, k)
	}
	return m.src.Do(ctx, args...).Err()
}

// finish moves every key left in the slot and gives the slot to the
// target (SETSLOT NODE on both masters).
func (m *slotMove) finish(ctx context.Context) error {
	keys, err := m.src.ClusterGetKeysInSlot(ctx, int(m.slot), 1000).Result()
	if err == nil && len(keys) > 0 {
		err = m.migrate(ctx, keys...)
	}
	for _, c := range []*redis.Client{m.tgt, m.src} {
		if err == nil {
			err = c.Do(ctx, "CLUSTER", "SETSLOT", m.slot, "NODE", m.tgtID).Err()
		}
	}
	return err
}

// finishAfter finishes the move after d, and sends its error.
func (m *slotMove) finishAfter(ctx context.Context, d time.Duration) <-chan error {
	moved := make(chan error, 1)
	go func() {
		time.Sleep(d)
		moved <- m.finish(ctx)
	}()
	return moved
}

// A queue's slot moves to another master (a reshard) while a script on it
// runs: for as long as its keys are split between the two masters Redis
// answers TRYAGAIN, and the call waits the move out and then goes through,
// rather than failing the shopper's request.
func TestAScriptWaitsOutItsSlotsMove(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node Redis Cluster")
	}
	addrs, rdb := threeMastersDialed(t)
	ctx := context.Background()
	a, b := "usher:{moving}:a", "usher:{moving}:b"
	testenv.Eventually(t, 10*time.Second, func() error { return rdb.MSet(ctx, a, "A", b, "B").Err() }, "no write before the move")

	// The move begins: a alone has left.
	m := beginMove(t, ctx, rdb.(*redis.ClusterClient), addrs, a)
	if err := m.migrate(ctx, a); err != nil {
		t.Fatal(err)
	}
	const moveLasts = 500 * time.Millisecond
	moved := m.finishAfter(ctx, moveLasts)

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

// A shopper leaves while the queue's slot moves, at two points of the
// move. With every key still on the old master, Redis would stop a
// script at the first key it did not declare that is not there (the set
// of leaves still to record, empty, is on neither master), after the
// writes before it; once the declared keys have moved, it would run the
// script on the new master, where an entry still on the old one reads as
// missing. Either way the leave must be taken once, say it is to be
// recorded, and stay among the leaves the admitter records: a leave the
// line took that the entries stream never holds leaves the shopper
// waiting in every replay and in usherctl audit, behind whom the line
// admitted the next.
func TestALeaveDuringItsSlotsMoveIsStillRecorded(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node Redis Cluster")
	}
	addrs, rdb := threeMastersDialed(t)
	ctx := context.Background()
	s := roles.New(rdb)
	for i, declaredMoved := range []bool{false, true} {
		t.Run(fmt.Sprintf("declared keys moved %v", declaredMoved), func(t *testing.T) {
			q := fmt.Sprintf("%s-%d", testenv.Name(t), i)
			testenv.Eventually(t, 10*time.Second, func() error {
				_, err := s.ApplyEntries(ctx, q, testenv.Epoch, 0, []waitqueue.EntryEvent{{StreamSeq: 1, User: "alice"}, {StreamSeq: 2, User: "bob"}})
				return err
			}, "no join before the move")
			testenv.Tick(t, s, q, waitqueue.Tick{TargetActive: 1, TickLength: 20 * time.Millisecond, TokenTTL: time.Minute})
			// A live queue: every key a script declares is there (one
			// missing and Redis refuses the whole script, TRYAGAIN).
			k := keyspace.Of(q)
			declared := []string{k.Waiting(), k.Active(), k.Outbox(), k.Stats(), k.Admits(), k.Cursor()}
			if n, err := rdb.Exists(ctx, declared...).Result(); err != nil || n != 6 {
				t.Fatalf("the queue's declared keys: %d of 6 there, %v", n, err)
			}

			m := beginMove(t, ctx, rdb.(*redis.ClusterClient), addrs, k.Waiting())
			if declaredMoved {
				if err := m.migrate(ctx, declared...); err != nil {
					t.Fatal(err)
				}
			}
			moved := m.finishAfter(ctx, 300*time.Millisecond)
			had, toRecord, err := s.Leave(ctx, q, 2, "bob")
			if err := <-moved; err != nil {
				t.Fatalf("finish the move: %v", err)
			}
			if err != nil || had != waitqueue.Waiting || !toRecord {
				t.Fatalf("Leave(bob) during the move = %q, %v, %v; want waiting, to record", had, toRecord, err)
			}
			if e, err := s.Poll(ctx, q, 2); err != nil || e.Status != waitqueue.Left {
				t.Errorf("Poll(bob) after the move = %+v, %v; want left", e, err)
			}
			leaves, err := s.LeavesToRecord(ctx, q, 10)
			if want := []waitqueue.UnrecordedLeave{{Seq: 2, User: "bob"}}; err != nil || !reflect.DeepEqual(leaves, want) {
				t.Fatalf("LeavesToRecord = %+v, %v; want %+v", leaves, err, want)
			}
		})
	}
}
