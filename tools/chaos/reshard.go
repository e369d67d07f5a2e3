package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"usher/internal/keyspace"
)

// reshardBatch is how many keys one MIGRATE moves: redis-cli --cluster
// reshard's default (--cluster-pipeline 10).
const reshardBatch = 10

// reshard is one slot's move from one master to another.
type reshard struct {
	queue    string
	slot     int64
	src, tgt *redis.Client // the masters, one connection each
	srcID    string
	tgtID    string
	masters  []*redis.Client // every master serving slots, src and tgt among them
	keys     int64           // in the slot before the move
	moved    int
	batches  int
	replaced []string // the keys of batches that met one the target held already (BUSYKEY)
}

func (r *reshard) close() {
	for _, c := range r.masters {
		c.Close()
	}
}

// planReshard finds queue q's slot, the master serving it and another
// master, chosen by the seed, to move it to.
func planReshard(ctx context.Context, f *fault, q string) (*reshard, error) {
	src, _, err := f.s.redisMasterOf(ctx, q)
	if err != nil {
		return nil, err
	}
	r := &reshard{queue: q}
	sc := redis.NewClient(&redis.Options{Addr: src.addr()})
	defer sc.Close()
	if r.slot, err = sc.ClusterKeySlot(ctx, keyspace.Of(q).Waiting()).Result(); err != nil {
		return nil, err
	}
	nodes, err := sc.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, err
	}
	var others []*redis.Client
	var otherIDs []string
	for _, l := range strings.Split(strings.TrimSpace(nodes), "\n") {
		fs := strings.Fields(l) // id addr@bus flags master ping pong epoch link slot…
		if len(fs) < 9 || !strings.Contains(fs[2], "master") || strings.Contains(fs[2], "fail") {
			continue
		}
		addr, _, _ := strings.Cut(fs[1], "@")
		c := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 10 * time.Second})
		r.masters = append(r.masters, c)
		if addr == src.addr() {
			r.src, r.srcID = c, fs[0]
		} else {
			others, otherIDs = append(others, c), append(otherIDs, fs[0])
		}
	}
	if r.src == nil || len(others) == 0 {
		r.close()
		return nil, fmt.Errorf("slot %d: no master %s or no other master in %q", r.slot, src.addr(), nodes)
	}
	i := f.rng.IntN(len(others))
	r.tgt, r.tgtID = others[i], otherIDs[i]
	return r, nil
}

// start marks the slot importing on the target, then migrating on the
// source, in redis-cli's order: a client sent to the target by ASK finds
// it ready.
func (r *reshard) start(ctx context.Context) error {
	if err := r.tgt.Do(ctx, "CLUSTER", "SETSLOT", r.slot, "IMPORTING", r.srcID).Err(); err != nil {
		return fmt.Errorf("SETSLOT IMPORTING on the target: %w", err)
	}
	if err := r.src.Do(ctx, "CLUSTER", "SETSLOT", r.slot, "MIGRATING", r.tgtID).Err(); err != nil {
		return fmt.Errorf("SETSLOT MIGRATING on the source: %w", err)
	}
	var err error
	r.keys, err = r.src.ClusterCountKeysInSlot(ctx, int(r.slot)).Result()
	return err
}

// migrate moves the slot's keys reshardBatch at a time until the source
// holds none. A key the target holds already (written there through ASK
// while the slot moved) answers BUSYKEY: the batch is moved again with
// REPLACE, as redis-cli --cluster-replace does, and the key is reported.
func (r *reshard) migrate(ctx context.Context) error {
	host, port, _ := net.SplitHostPort(r.tgt.Options().Addr)
	for {
		keys, err := r.src.ClusterGetKeysInSlot(ctx, int(r.slot), reshardBatch).Result()
		if err != nil {
			return fmt.Errorf("GETKEYSINSLOT: %w", err)
		}
		if len(keys) == 0 {
			return nil
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		err = r.src.Do(ctx, args...).Err()
		if err != nil && strings.Contains(err.Error(), "BUSYKEY") {
			r.replaced = append(r.replaced, keys...)
			args = append(args[:6:6], append([]any{"REPLACE", "KEYS"}, args[7:]...)...)
			err = r.src.Do(ctx, args...).Err()
		}
		if err != nil {
			return fmt.Errorf("MIGRATE %d keys: %w", len(keys), err)
		}
		r.moved += len(keys)
		r.batches++
	}
}

// finish gives the slot to the target on every master, the target first
// (as redis-cli does): once the source learns it, it answers MOVED.
func (r *reshard) finish(ctx context.Context) error {
	order := []*redis.Client{r.tgt, r.src}
	for _, c := range r.masters {
		if c != r.tgt && c != r.src {
			order = append(order, c)
		}
	}
	for _, c := range order {
		if err := c.Do(ctx, "CLUSTER", "SETSLOT", r.slot, "NODE", r.tgtID).Err(); err != nil {
			return fmt.Errorf("SETSLOT NODE on %s: %w", c.Options().Addr, err)
		}
	}
	return nil
}

// redisReshard moves the slot of the queue whose admission rate is checked
// to another master under load, as redis-cli --cluster reshard does:
// IMPORTING, MIGRATING, MIGRATE the keys in batches, SETSLOT NODE. While
// it moves, multi-key scripts on the queue meet ASK and TRYAGAIN.
func redisReshard(ctx context.Context, f *fault) error {
	q := f.s.queues[0]
	for _, c := range f.s.queues {
		if c.RateChecked {
			q = c
		}
	}
	r, err := planReshard(ctx, f, q.Name)
	if err != nil {
		return err
	}
	defer r.close()
	if err := r.start(ctx); err != nil {
		return err
	}
	f.injected("reshard: slot %d of queue %s (%d keys) migrating from %s to %s", r.slot, q.Name, r.keys, r.src.Options().Addr, r.tgt.Options().Addr)
	began := time.Now()
	if err := r.migrate(ctx); err != nil {
		return err
	}
	if err := r.finish(ctx); err != nil {
		return err
	}
	f.healed("slot %d now served by %s: %d keys moved in %d MIGRATE batches in %v; %d key(s) in batches that met one the target held already (BUSYKEY; moved again with REPLACE)%s",
		r.slot, r.tgt.Options().Addr, r.moved, r.batches, time.Since(began).Round(time.Millisecond), len(r.replaced), firstKeys(r.replaced))
	return f.s.waitRedisCluster(ctx)
}

func firstKeys(keys []string) string {
	if len(keys) == 0 {
		return ""
	}
	return ": " + strings.Join(keys[:min(len(keys), 5)], ", ")
}
