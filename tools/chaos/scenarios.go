package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"usher/internal/event"
	"usher/internal/keyspace"
)

// scenario is one fault, injected into a running stack under load.
type scenario struct {
	name string
	what string // what is injected, for the report
	// prepare chooses, before the stack starts, what the fault needs in
	// place (the service behind toxiproxy).
	prepare func(f *fault, p *plan)
	// inject injects the fault and undoes it; it returns once healed.
	inject func(ctx context.Context, f *fault) error
	// recoverFromHeal: admission pauses by design while this fault lasts.
	recoverFromHeal bool
	// bound is how long recovery may take (0: recoveryBound).
	bound time.Duration
	// partialRedisLoss: the fault loses Redis's last writes on one shard.
	partialRedisLoss bool
	// skewed: the run needs the previous release built (version-skew).
	skewed bool
	// steady: every queue's demand under its capacity (steadyWorkload).
	steady bool
	// named: run only when named (-scenario), not by -all: the soak
	// takes as long as -soak says.
	named bool
}

// fault is what a scenario's injection works with.
type fault struct {
	s      *stack
	rng    *rand.Rand
	j      *journal
	tl     *timeline
	t      timing
	victim string // chosen in prepare
}

func (f *fault) injected(format string, args ...any) {
	f.tl.Inject = time.Now()
	f.j.add(record{Kind: recFault, Detail: fmt.Sprintf(format, args...)})
}

// step records a step of a fault made of many, begun at at.
func (f *fault) step(at time.Time, format string, args ...any) {
	f.tl.Steps = append(f.tl.Steps, at)
	f.j.add(record{Kind: recFault, Detail: fmt.Sprintf(format, args...)})
}

func (f *fault) healed(format string, args ...any) {
	f.tl.Heal = time.Now()
	f.j.add(record{Kind: recHeal, Detail: fmt.Sprintf(format, args...)})
}

// pick returns one of the services of kind, chosen by the seed.
func (f *fault) pick(kind string) *service {
	svs := f.s.servicesOf(kind)
	return svs[f.rng.IntN(len(svs))]
}

// killRestart is kill -9 of one service of a kind, restarted after down.
func killRestart(kind string) func(context.Context, *fault) error {
	return func(ctx context.Context, f *fault) error {
		sv := f.pick(kind)
		pid := sv.proc.pid()
		if err := sv.proc.kill(); err != nil {
			return err
		}
		f.injected("kill -9 %s (pid %d)", sv.name(), pid)
		if !sleepCtx(ctx, f.t.down) {
			return ctx.Err()
		}
		if err := f.s.restart(ctx, sv); err != nil {
			return fmt.Errorf("restart %s: %w", sv.name(), err)
		}
		f.healed("%s restarted and ready", sv.name())
		return nil
	}
}

// rollingUpgrade restarts every service one copy at a time, as a rolling
// update of a deployment does — SIGTERM, wait until the copy is ready
// again, then the next — every kind in turn, twice over, onto the build
// under test. Joins in flight at a SIGTERM are drained or retried by the
// load, streams reconnect with Last-Event-ID, and at any moment every kind
// but the one being restarted runs all its copies.
func rollingUpgrade(ctx context.Context, f *fault) error {
	f.injected("rolling restart of every service, one copy at a time (SIGTERM, ready, next), twice over")
	for round := 1; round <= 2; round++ {
		for _, kind := range serviceKinds {
			for _, sv := range f.s.servicesOf(kind) {
				at := time.Now()
				if err := sv.proc.terminate(syscall.SIGTERM, 10*time.Second); err != nil {
					return fmt.Errorf("stop %s: %w", sv.name(), err)
				}
				if err := f.s.restart(ctx, sv); err != nil {
					return fmt.Errorf("restart %s: %w", sv.name(), err)
				}
				f.step(at, "round %d: %s stopped by SIGTERM, restarted and ready", round, sv.name())
			}
		}
	}
	f.healed("every service restarted twice, one copy at a time")
	return nil
}

// freeze is SIGSTOP of one service of a kind for d, then SIGCONT.
func freeze(kind string, d func(timing) time.Duration) func(context.Context, *fault) error {
	return func(ctx context.Context, f *fault) error {
		sv := f.pick(kind)
		if err := sv.proc.signal(syscall.SIGSTOP); err != nil {
			return err
		}
		f.injected("SIGSTOP %s for %v", sv.name(), d(f.t))
		slept := sleepCtx(ctx, d(f.t))
		if err := sv.proc.signal(syscall.SIGCONT); err != nil {
			return err
		}
		f.healed("SIGCONT %s", sv.name())
		if !slept {
			return ctx.Err()
		}
		return nil
	}
}

// streamLeader is the NATS node leading a stream's RAFT group.
func (s *stack) streamLeader(ctx context.Context, stream string) (*natsNode, error) {
	var leader string
	err := poll(ctx, 30*time.Second, stream+" has a leader", func(ctx context.Context) error {
		st, err := s.js.Stream(ctx, stream)
		if err != nil {
			return err
		}
		info, err := st.Info(ctx)
		if err != nil {
			return err
		}
		if info.Cluster == nil || info.Cluster.Leader == "" {
			return fmt.Errorf("no leader")
		}
		leader = info.Cluster.Leader
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, n := range s.nats {
		if n.name == leader {
			return n, nil
		}
	}
	return nil, fmt.Errorf("stream %s led by unknown server %q", stream, leader)
}

// streamCurrent waits until every replica of a stream is current again.
func (s *stack) streamCurrent(ctx context.Context, stream string, within time.Duration) error {
	return poll(ctx, within, stream+" replicas current", func(ctx context.Context) error {
		st, err := s.js.Stream(ctx, stream)
		if err != nil {
			return err
		}
		info, err := st.Info(ctx)
		if err != nil {
			return err
		}
		if info.Cluster == nil || info.Cluster.Leader == "" {
			return fmt.Errorf("no leader")
		}
		for _, r := range info.Cluster.Replicas {
			if !r.Current || r.Offline {
				return fmt.Errorf("replica %s not current", r.Name)
			}
		}
		return nil
	})
}

func natsLeaderKill(ctx context.Context, f *fault) error {
	n, err := f.s.streamLeader(ctx, event.StreamEntries)
	if err != nil {
		return err
	}
	if err := n.proc.kill(); err != nil {
		return err
	}
	f.injected("kill -9 NATS node %s, leader of USHER_ENTRIES", n.name)
	if !sleepCtx(ctx, f.t.down) {
		return ctx.Err()
	}
	if err := n.proc.start(); err != nil {
		return err
	}
	if err := f.s.streamCurrent(ctx, event.StreamEntries, 60*time.Second); err != nil {
		return err
	}
	f.healed("NATS node %s restarted, USHER_ENTRIES replicas current", n.name)
	return nil
}

// redisNodeOf returns the node at addr.
func (s *stack) redisNodeOf(addr string) *redisNode {
	for _, n := range s.redis {
		if n.addr() == addr {
			return n
		}
	}
	return nil
}

// redisMasterOf returns the node serving queue q's slot, and its replicas.
// It asks again until it has an answer: the harness's client gives each
// call a second (its sampler's bound), which a loaded machine can exceed,
// and a fault that could not find its node is no finding about usher.
func (s *stack) redisMasterOf(ctx context.Context, q string) (master *redisNode, replicas []*redisNode, err error) {
	err = poll(ctx, 30*time.Second, "the Redis master of queue "+q, func(ctx context.Context) error {
		master, replicas, err = s.redisMasterOnce(ctx, q)
		return err
	})
	return master, replicas, err
}

func (s *stack) redisMasterOnce(ctx context.Context, q string) (*redisNode, []*redisNode, error) {
	s.rdb.ReloadState(ctx)
	c, err := s.rdb.MasterForKey(ctx, keyspace.Of(q).Waiting())
	if err != nil {
		return nil, nil, err
	}
	master := s.redisNodeOf(c.Options().Addr)
	if master == nil {
		return nil, nil, fmt.Errorf("master %s is no node of ours", c.Options().Addr)
	}
	nodes, err := c.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, nil, err
	}
	var masterID string
	type line struct{ id, addr, flags, master string }
	var lines []line
	for _, l := range strings.Split(strings.TrimSpace(nodes), "\n") {
		fs := strings.Fields(l)
		if len(fs) < 4 {
			continue
		}
		addr, _, _ := strings.Cut(fs[1], "@")
		lines = append(lines, line{fs[0], addr, fs[2], fs[3]})
		if addr == master.addr() {
			masterID = fs[0]
		}
	}
	var replicas []*redisNode
	for _, l := range lines {
		if l.master == masterID && strings.Contains(l.flags, "slave") {
			if n := s.redisNodeOf(l.addr); n != nil {
				replicas = append(replicas, n)
			}
		}
	}
	return master, replicas, nil
}

func (f *fault) pickQueue() queueSpec {
	qs := f.s.queues
	return qs[f.rng.IntN(len(qs))]
}

func redisMasterFailover(ctx context.Context, f *fault) error {
	q := f.pickQueue()
	master, _, err := f.s.redisMasterOf(ctx, q.Name)
	if err != nil {
		return err
	}
	if err := master.proc.kill(); err != nil {
		return err
	}
	f.injected("kill -9 Redis master %s (serves queue %s); its replica takes over", master.addr(), q.Name)
	if err := f.s.waitRedisCluster(ctx); err != nil {
		return err
	}
	if !sleepCtx(ctx, f.t.down) {
		return ctx.Err()
	}
	if err := master.proc.start(); err != nil {
		return err
	}
	if err := waitRedisPing(ctx, master.addr()); err != nil {
		return err
	}
	f.healed("old master %s restarted (rejoins as a replica)", master.addr())
	return f.s.waitRedisCluster(ctx)
}

// aofTracker records the size of every AOF file of some nodes, often, so
// that a kill can be followed by losing what was written in the last
// second: what an OS crash does to an AOF fsynced every second. (A kill -9
// alone loses nothing: Redis write()s the AOF before it answers, and the
// kernel keeps what was written.)
type aofTracker struct {
	mu      sync.Mutex
	samples []aofSample
}

type aofSample struct {
	at    time.Time
	sizes map[string]int64 // file path → size
}

func (t *aofTracker) run(ctx context.Context, nodes []*redisNode) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		sizes := map[string]int64{}
		for _, n := range nodes {
			files, _ := filepath.Glob(filepath.Join(n.dir, "appendonlydir", "*.aof"))
			for _, p := range files {
				if st, err := os.Stat(p); err == nil {
					sizes[p] = st.Size()
				}
			}
		}
		t.mu.Lock()
		t.samples = append(t.samples, aofSample{time.Now(), sizes})
		t.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// truncate cuts every tracked file back to its size at the last sample
// taken at or before at.
func (t *aofTracker) truncate(at time.Time) (int64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var base *aofSample
	for i := range t.samples {
		if !t.samples[i].at.After(at) {
			base = &t.samples[i]
		}
	}
	if base == nil {
		return 0, fmt.Errorf("no AOF sample before %s", at)
	}
	var cut int64
	last := t.samples[len(t.samples)-1]
	for p, size := range last.sizes {
		was, ok := base.sizes[p]
		if !ok {
			was = 0
		}
		if size > was {
			if err := os.Truncate(p, was); err != nil {
				return cut, err
			}
			cut += size - was
		}
	}
	return cut, nil
}

func redisLoseLastSecond(ctx context.Context, f *fault) error {
	q := f.pickQueue()
	master, replicas, err := f.s.redisMasterOf(ctx, q.Name)
	if err != nil {
		return err
	}
	nodes := append([]*redisNode{master}, replicas...)
	var tr aofTracker
	tctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); tr.run(tctx, nodes) }()
	if !sleepCtx(ctx, 2*time.Second) {
		stop()
		return ctx.Err()
	}
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		go func() { defer wg.Done(); _ = n.proc.kill() }()
	}
	wg.Wait()
	killedAt := time.Now()
	stop()
	<-done
	cut, err := tr.truncate(killedAt.Add(-time.Second))
	if err != nil {
		return err
	}
	var names []string
	for _, n := range nodes {
		names = append(names, n.addr())
	}
	f.injected("kill -9 Redis master %s and its replica(s) together (queue %s), AOF cut back to 1 s before the kill (%d bytes lost, as an OS crash with appendfsync everysec)",
		strings.Join(names, ", "), q.Name, cut)
	if !sleepCtx(ctx, f.t.down) {
		return ctx.Err()
	}
	for _, n := range nodes {
		if err := n.proc.start(); err != nil {
			return err
		}
	}
	for _, n := range nodes {
		if err := waitRedisPing(ctx, n.addr()); err != nil {
			return err
		}
	}
	// Healed once the shard answers again: while both copies were dead
	// nothing could serve its queues, for as long as the harness chose.
	f.healed("both restarted from their AOF files and answering")
	return f.s.waitRedisCluster(ctx)
}

func redisFlushAll(ctx context.Context, f *fault) error {
	var masters []string
	var mu sync.Mutex
	err := f.s.rdb.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		mu.Lock()
		masters = append(masters, c.Options().Addr)
		mu.Unlock()
		return c.FlushAll(ctx).Err()
	})
	if err != nil {
		return err
	}
	f.injected("FLUSHALL on every master (%s): Redis loses everything", strings.Join(masters, ", "))
	f.healed("(instant)")
	return nil
}

// pgsimMode switches the payment simulator's mode.
func (s *stack) pgsimMode(ctx context.Context, body string) error {
	req, _ := http.NewRequestWithContext(ctx, "PUT", s.pgsimURL+"/v1/admin/mode", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		return fmt.Errorf("pgsim mode %s: status %d", body, res.StatusCode)
	}
	return nil
}

func paymentMode(mode, body string) func(context.Context, *fault) error {
	return func(ctx context.Context, f *fault) error {
		if err := f.s.pgsimMode(ctx, body); err != nil {
			return err
		}
		f.injected("payment gateway %s for %v", mode, f.t.outage)
		slept := sleepCtx(ctx, f.t.outage)
		if err := f.s.pgsimMode(context.Background(), `{"mode":"normal"}`); err != nil {
			return err
		}
		f.healed("payment gateway normal")
		if !slept {
			return ctx.Err()
		}
		return nil
	}
}

func postgresCrash(ctx context.Context, f *fault) error {
	if err := f.s.pg.proc.kill(); err != nil {
		return err
	}
	f.injected("kill -9 PostgreSQL (every process), restart after %v", f.t.down)
	if !sleepCtx(ctx, f.t.down) {
		return ctx.Err()
	}
	if err := f.s.pg.proc.start(); err != nil {
		return err
	}
	if err := f.s.waitPostgres(ctx); err != nil {
		return err
	}
	f.healed("PostgreSQL restarted (crash recovery) and answering")
	return nil
}

// partitionVictim chooses the service to cut off: any of the eight.
func partitionVictim(f *fault) string {
	kind := serviceKinds[f.rng.IntN(len(serviceKinds))]
	return fmt.Sprintf("%s-%d", kind, 1+f.rng.IntN(2))
}

func partition(to string) func(context.Context, *fault) error {
	return func(ctx context.Context, f *fault) error {
		ps := f.s.proxies.nats
		if to == "Redis" {
			ps = f.s.proxies.redis
		}
		if err := cut(ps); err != nil {
			return err
		}
		f.injected("partition %s from %s (every connection black-holed) for %v", f.victim, to, f.t.partition)
		slept := sleepCtx(ctx, f.t.partition)
		if err := heal(ps); err != nil {
			return err
		}
		f.healed("partition healed")
		if !slept {
			return ctx.Err()
		}
		return nil
	}
}

// clockSkew restarts one admitter (gracefully) with its clock 2 minutes
// ahead (USHER_FAULT_CLOCK_OFFSET), and leaves it so.
func clockSkew(ctx context.Context, f *fault) error {
	sv := f.pick(kindAdmitter)
	if err := sv.proc.terminate(syscall.SIGTERM, 10*time.Second); err != nil {
		return err
	}
	sv.env["USHER_FAULT_CLOCK_OFFSET"] = "2m"
	if err := f.s.restart(ctx, sv); err != nil {
		return err
	}
	f.injected("%s restarted with its clock 2 minutes ahead (USHER_FAULT_CLOCK_OFFSET=2m), for the rest of the run", sv.name())
	f.healed("(the skew stays)")
	return nil
}

// clockJumpBack restarts one admitter (gracefully) with its clock set to
// step back 2 minutes 10 s after its start (USHER_FAULT_CLOCK_STEP): an NTP
// step while it ticks. The knob counts from the process's start, so the
// restart arms it; the fault is the step, well after the admitter is
// ready and ticking again.
func clockJumpBack(ctx context.Context, f *fault) error {
	const after = 10 * time.Second
	sv := f.pick(kindAdmitter)
	if err := sv.proc.terminate(syscall.SIGTERM, 10*time.Second); err != nil {
		return err
	}
	sv.env["USHER_FAULT_CLOCK_STEP"] = "-2m@" + after.String()
	started := time.Now()
	if err := f.s.restart(ctx, sv); err != nil {
		return err
	}
	f.j.add(record{Kind: recFault, Detail: fmt.Sprintf("%s restarted (SIGTERM) with USHER_FAULT_CLOCK_STEP=-2m@%s, ready after %.1fs",
		sv.name(), after, time.Since(started).Seconds())})
	if !sleepCtx(ctx, time.Until(started.Add(after))) {
		return ctx.Err()
	}
	f.injected("%s's clock steps back 2 minutes while it ticks (NTP step), for the rest of the run", sv.name())
	f.healed("(the step stays)")
	return nil
}

// scenarios is every scenario, in the order -all runs them.
func scenarios() []scenario {
	// Past the admitter's 30 s ack wait (fixed in its code), and past the
	// order worker's (USHER_ORDER_ACK_WAIT, shortened here).
	ackWait := func(timing) time.Duration { return 35 * time.Second }
	owAck := func(timing) time.Duration { return orderAckWait + 5*time.Second }
	return []scenario{
		{name: "kill-gateway", what: "kill -9 a gateway, restart it", inject: killRestart(kindGateway)},
		// A gateway killed with a group gathered or being recorded. Without
		// a linger (kill-gateway) the load's few dozen joins a second go
		// mostly one by one; a long linger (20 ms) has them meet in groups
		// of several.
		{name: "kill-gateway-grouping", what: "kill -9 a gateway whose groups of joins linger 20 ms (USHER_JOIN_LINGER), restart it",
			prepare: func(_ *fault, p *plan) { p.env = map[string]string{"USHER_JOIN_LINGER": "20ms"} }, inject: killRestart(kindGateway)},
		{name: "rolling-upgrade", what: "restart every service one copy at a time (SIGTERM, wait until ready, the next), twice over, as a rolling update does", inject: rollingUpgrade},
		{name: "version-skew", what: "half the copies of every service on the previous release (-skew-ref), half on this build, for the rest of the run",
			skewed: true, prepare: func(_ *fault, p *plan) { p.env = map[string]string{"USHER_JOIN_GROUPS": "off"} }, inject: versionSkew},
		{name: "soak", what: "no fault: the load with churn for -soak (make soak), every process's memory, goroutines and files, Redis's and the streams' size sampled",
			steady: true, named: true, recoverFromHeal: true, prepare: soakPlan, inject: soak},
		{name: "kill-admitter", what: "kill -9 an admitter, restart it", inject: killRestart(kindAdmitter)},
		{name: "kill-notifier", what: "kill -9 a notifier, restart it", inject: killRestart(kindNotifier)},
		{name: "kill-orderworker", what: "kill -9 an order worker, restart it", inject: killRestart(kindOrderworker)},
		{name: "stop-admitter", what: "SIGSTOP an admitter for 35 s (past the 30 s ack wait), SIGCONT", inject: freeze(kindAdmitter, ackWait)},
		{name: "stop-orderworker", what: "SIGSTOP an order worker past its ack wait, SIGCONT", inject: freeze(kindOrderworker, owAck)},
		{name: "nats-leader-kill", what: "kill -9 the NATS node leading USHER_ENTRIES, restart it", inject: natsLeaderKill},
		// Partitioned, not killed: the old leader lives on with its
		// clients, and must not acknowledge a write the new leader never
		// gets.
		{name: "partition-nats-leader", what: "partition the NATS node leading USHER_ENTRIES from the other two (routes through toxiproxy; clients still reach it) until a new leader is elected, heal",
			prepare: func(_ *fault, p *plan) { p.natsRoutesProxied = true }, inject: partitionNATSLeader},
		// One node's store full: NATS turns that node's JetStream off and
		// the other two carry the streams.
		{name: "jetstream-disk-full", what: "fill the store (a tmpfs) of the NATS node leading USHER_ENTRIES until ENOSPC, free it after the outage (10 s); restart the node if its JetStream stays off",
			prepare: func(_ *fault, p *plan) { p.natsTmpfs = true }, inject: jetstreamDiskFull},
		// One node's disk stops completing writes: the node lives on and
		// the streams it leads store nothing until the other two elect a
		// leader (past a 4–9 s election timeout) or the disk resumes.
		{name: "jetstream-disk-stall", what: "hold every write and fsync on the store (a stalling FUSE mount) of the NATS node leading USHER_ENTRIES for the outage (10 s), resume; restart the node if its replicas are not current 15 s later",
			prepare: func(_ *fault, p *plan) { p.natsStall = true }, inject: jetstreamDiskStall},
		{name: "redis-master-failover", what: "kill -9 a Redis master (its replica takes over), restart it", inject: redisMasterFailover,
			bound: failoverBound, partialRedisLoss: true},
		{name: "redis-lose-last-second", what: "kill -9 a Redis master and its replica, lose the last second of their AOF, restart both", inject: redisLoseLastSecond,
			recoverFromHeal: true, partialRedisLoss: true},
		// A queue's keys share one slot; while it moves, a script whose
		// keys are split between the masters answers TRYAGAIN, one whose
		// keys all left answers ASK. Nothing is lost, so no
		// partialRedisLoss.
		{name: "redis-reshard", what: "move the busiest queue's hash slot to another master under load (SETSLOT IMPORTING/MIGRATING, MIGRATE in batches of 10, SETSLOT NODE)", inject: redisReshard},
		{name: "redis-flushall", what: "FLUSHALL on every Redis master under traffic", inject: redisFlushAll},
		{name: "payment-outage", what: "payment gateway outage (503), then normal", inject: paymentMode("outage", `{"mode":"outage"}`), recoverFromHeal: true},
		{name: "payment-slow", what: "payment gateway slow (4 s, past the 2 s timeout), then normal", inject: paymentMode("slow", `{"mode":"slow","slowMs":4000}`), recoverFromHeal: true},
		{name: "payment-capture-hang", what: "payment gateway captures, then never answers; then normal", inject: paymentMode("capture-hang", `{"mode":"capture-hang"}`), recoverFromHeal: true},
		// While PostgreSQL is down no order finishes, so the slots of the
		// shoppers admitted meanwhile stay held and admission stops when
		// they are all taken: back-pressure, as with a payment outage. How
		// long the database takes to come back (crash recovery: 3–4 s on
		// top of its 5 s down here) is not usher's to shorten.
		{name: "postgres-restart", what: "kill -9 PostgreSQL, restart it", inject: postgresCrash, recoverFromHeal: true},
		{name: "partition-nats", what: "partition one service from NATS (toxiproxy), heal",
			prepare: func(f *fault, p *plan) { f.victim = partitionVictim(f); p.natsProxied = f.victim }, inject: partition("NATS")},
		{name: "partition-redis", what: "partition one service from Redis (toxiproxy + USHER_REDIS_ADDR_MAP), heal",
			prepare: func(f *fault, p *plan) { f.victim = partitionVictim(f); p.redisProxied = f.victim }, inject: partition("Redis")},
		{name: "clock-skew", what: "one admitter's clock 2 minutes ahead (USHER_FAULT_CLOCK_OFFSET)", inject: clockSkew},
		{name: "clock-jump-back", what: "one admitter's clock steps back 2 minutes while it ticks (USHER_FAULT_CLOCK_STEP)", inject: clockJumpBack},
	}
}

// consumersInFlight sums, over a stream's durable consumers, the messages
// not yet delivered and delivered but not acknowledged.
func consumersInFlight(ctx context.Context, js jetstream.JetStream, stream string) (uint64, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, err
	}
	var n uint64
	lister := st.ListConsumers(ctx)
	for info := range lister.Info() {
		if info.Config.Durable == "" {
			continue
		}
		n += info.NumPending + uint64(info.NumAckPending)
	}
	return n, lister.Err()
}
