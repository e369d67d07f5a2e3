package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"
)

// The kinds of usher service the stack runs, two of each.
const (
	kindGateway     = "gateway"
	kindAdmitter    = "admitter"
	kindNotifier    = "notifier"
	kindOrderworker = "orderworker"
)

var serviceKinds = []string{kindGateway, kindAdmitter, kindNotifier, kindOrderworker}

// addrVar is the variable naming each kind's listen address.
var addrVar = map[string]string{
	kindGateway:     "USHER_GATEWAY_ADDR",
	kindAdmitter:    "USHER_ADMITTER_ADDR",
	kindNotifier:    "USHER_NOTIFIER_ADDR",
	kindOrderworker: "USHER_ORDERWORKER_ADDR",
}

// stack is everything production has, on loopback: a 3-node JetStream
// cluster, a Redis Cluster of 3 masters and 3 replicas, PostgreSQL, the
// payment simulator and two of each usher service.
type stack struct {
	dir   string // this scenario's folder: stores, configuration, logs
	bins  *binaries
	token string // the admin token of usher and pgsim
	// queues is the workload's queues (faults choose among them).
	queues []queueSpec

	mu    sync.Mutex
	procs []*proc // every process started, for the final cleanup

	nats     []*natsNode
	redis    []*redisNode
	pg       *pgServer
	pgsim    *proc
	pgsimURL string
	services []*service
	proxies  *proxies // toxiproxy in front of NATS and Redis for one service
	// routes is toxiproxy on every route between the NATS nodes, when a
	// scenario partitions one of them.
	routes *routeProxies
	// mounts are the tmpfs mounts made for the NATS stores, if any.
	mounts []string
	// stalls are the stalling mounts serving the NATS stores, if any.
	stalls []*stallFS

	// rdb is the harness's own Redis Cluster client (sampling, records).
	rdb *redis.ClusterClient
	// nc and js are the harness's own NATS connection (leaders, streams).
	nc *nats.Conn
	js jetstream.JetStream
}

// natsNode is one JetStream cluster member.
type natsNode struct {
	proc        *proc
	name        string
	port        int
	clusterPort int
	// stall serves the node's store through a file system whose writes
	// can be held (plan.natsStall), if it is.
	stall *stallFS
}

func (n *natsNode) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.port) }

// redisNode is one Redis Cluster node.
type redisNode struct {
	proc *proc
	port int
	dir  string
}

func (n *redisNode) addr() string { return fmt.Sprintf("127.0.0.1:%d", n.port) }

// pgServer is the throwaway PostgreSQL cluster.
type pgServer struct {
	proc *proc
	port int
	url  string // the usher database
}

// service is one usher process.
type service struct {
	kind string
	idx  int
	proc *proc
	addr string
	// profiles is where the service serves the Go runtime's profiles
	// (USHER_PPROF_ADDR): the soak reads heap profiles from it.
	profiles string
	env      map[string]string
}

func (s *service) name() string { return fmt.Sprintf("%s-%d", s.kind, s.idx+1) }
func (s *service) url() string  { return "http://" + s.addr }

// environ is the service's environment as exec wants it.
func (s *service) environ() []string {
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	keys := make([]string, 0, len(s.env))
	for k := range s.env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+s.env[k])
	}
	return env
}

// Ports. The servers of a run listen on loopback ports picked at random
// below the kernel's ephemeral range (net.ipv4.ip_local_port_range), where
// no outgoing connection and no listener on port 0 is ever given one: a
// port found free there stays free until its server binds it, seconds
// later. Within the ephemeral range, as the kernel's port 0 gave them, a
// busy machine (other tests, or stacks run at once) took one in between
// now and then: it was some connection's local port by the time the
// server started ("bind: Address already in use", seen first on a Redis
// node's cluster bus port, its port + 10000, which nothing reserved). No
// port is given twice in a run, so stacks run at once never share one.
var portPool struct {
	mu    sync.Mutex
	given map[int]bool
}

// redisBusOffset is how far above its port a Redis Cluster node listens
// for the cluster bus.
const redisBusOffset = 10000

// lowestPort is the bottom of the range ports are picked in.
const lowestPort = 10000

// freePort returns a loopback port that is free and given to no one else.
func freePort() (int, error) {
	ps, err := pickPorts(1, 0)
	if err != nil {
		return 0, err
	}
	return ps[0], nil
}

// freePorts returns n such ports.
func freePorts(n int) ([]int, error) { return pickPorts(n, 0) }

// pickPorts returns n free ports p, each with p+plus free and reserved as
// well when plus > 0.
func pickPorts(n, plus int) ([]int, error) {
	hi := ephemeralLow() - plus // exclusive
	if hi-lowestPort < 1000 {
		return nil, fmt.Errorf("no room for ports between %d and the ephemeral range (from %d)", lowestPort, ephemeralLow())
	}
	portPool.mu.Lock()
	defer portPool.mu.Unlock()
	if portPool.given == nil {
		portPool.given = map[int]bool{}
	}
	// Hold every one open until all are found.
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	listen := func(p int) bool {
		if portPool.given[p] {
			return false
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			return false
		}
		ls = append(ls, l)
		return true
	}
	var out []int
	for tries := 0; len(out) < n; tries++ {
		if tries == 1000+100*n {
			return nil, fmt.Errorf("found %d of %d free loopback ports in %d–%d", len(out), n, lowestPort, hi)
		}
		p := lowestPort + rand.IntN(hi-lowestPort)
		if !listen(p) || (plus > 0 && !listen(p+plus)) {
			continue
		}
		out = append(out, p)
	}
	for _, p := range out {
		portPool.given[p] = true
		if plus > 0 {
			portPool.given[p+plus] = true
		}
	}
	return out, nil
}

// ephemeralLow is the first port of the kernel's ephemeral range.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				return n
			}
		}
	}
	return 32768 // Linux's default
}

// newProc registers a process of the stack (not started yet).
func (s *stack) newProc(name, path string, args []string, env []string) *proc {
	p := &proc{name: name, path: path, args: args, env: env, log: filepath.Join(s.dir, "logs", name+".log")}
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
	return p
}

// close kills every process and waits for them: nothing outlives a
// scenario, whatever happened to it.
func (s *stack) close() {
	if s.proxies != nil {
		s.proxies.close()
	}
	if s.routes != nil {
		s.routes.close()
	}
	if s.rdb != nil {
		s.rdb.Close()
	}
	if s.nc != nil {
		s.nc.Close()
	}
	// A node held by its stalled store would only die of the kill.
	s.resumeStores()
	s.mu.Lock()
	procs := append([]*proc(nil), s.procs...)
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = p.kill()
		}()
	}
	wg.Wait()
	s.unmountStores()
}

// plan is what a scenario changes in the stack before it starts.
type plan struct {
	// natsProxied and redisProxied name the one service whose way to NATS
	// or Redis goes through toxiproxy ("admitter-1"…), if any.
	natsProxied, redisProxied string
	// natsRoutesProxied puts the NATS cluster's routes through toxiproxy.
	natsRoutesProxied bool
	// natsTmpfs puts every NATS node's store on a small tmpfs of its own.
	natsTmpfs bool
	// natsStall serves every NATS node's store through a stalling FUSE
	// mount over a folder beside it (stallFS).
	natsStall bool
	// env adds variables to every service.
	env map[string]string
}

// startStack starts everything, in dependency order, and waits until each
// part answers. On error the caller still calls close.
func startStack(ctx context.Context, s *stack, p plan, pgTemplate string) error {
	if err := os.MkdirAll(filepath.Join(s.dir, "logs"), 0o755); err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.startNATS(gctx, p) })
	g.Go(func() error { return s.startRedis(gctx) })
	g.Go(func() error { return s.startPostgres(gctx, pgTemplate) })
	g.Go(func() error { return s.startPgsim(gctx) })
	if err := g.Wait(); err != nil {
		return err
	}
	if p.natsProxied != "" || p.redisProxied != "" {
		px, err := newProxies(s)
		if err != nil {
			return err
		}
		s.proxies = px
	}
	return s.startServices(ctx, p)
}

// startNATS starts three JetStream nodes routed to each other and waits for
// the cluster's meta leader. no_advertise keeps clients on the URLs they
// were given (a service behind toxiproxy must not learn the real ones).
// The plan may put every route through toxiproxy (routeProxies) and each
// store on a tmpfs or a stalling mount.
func (s *stack) startNATS(ctx context.Context, p plan) error {
	ports, err := freePorts(6)
	if err != nil {
		return err
	}
	for i := range 3 {
		s.nats = append(s.nats, &natsNode{name: fmt.Sprintf("n%d", i+1), port: ports[i], clusterPort: ports[3+i]})
	}
	if p.natsRoutesProxied {
		if s.routes, err = newRouteProxies(s.nats); err != nil {
			return err
		}
	}
	for _, n := range s.nats {
		var routes []string
		advertise := ""
		for _, o := range s.nats {
			switch {
			case o == n:
			case s.routes != nil:
				routes = append(routes, s.routes.routeURL(n, o))
				advertise = fmt.Sprintf("\n  advertise: 127.0.0.1:%d", s.routes.deadEnd)
			default:
				routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", o.clusterPort))
			}
		}
		store := filepath.Join(s.dir, "nats", n.name)
		if err := os.MkdirAll(store, 0o755); err != nil {
			return err
		}
		if p.natsTmpfs {
			if err := s.mountStore(store); err != nil {
				return err
			}
		}
		if p.natsStall {
			if err := s.mountStall(n, store); err != nil {
				return err
			}
		}
		conf := fmt.Sprintf(`server_name: %s
listen: 127.0.0.1:%d
jetstream { store_dir: %q, max_memory_store: 256MB, max_file_store: 4GB }
cluster {
  name: usher-chaos
  listen: 127.0.0.1:%d
  routes: [%s]
  no_advertise: true%s
}
`, n.name, n.port, store, n.clusterPort, strings.Join(routes, ", "), advertise)
		path := filepath.Join(s.dir, "nats", n.name+".conf")
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			return err
		}
		n.proc = s.newProc("nats-"+n.name, s.bins.natsServer, []string{"-c", path}, nil)
		if err := n.proc.start(); err != nil {
			return err
		}
	}
	nc, err := nats.Connect(s.natsURLs(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond),
		nats.RetryOnFailedConnect(true))
	if err != nil {
		return fmt.Errorf("harness nats connection: %w", err)
	}
	s.nc = nc
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	s.js = js
	// Ready means an R3 stream can be made: a meta leader and three
	// current peers.
	return poll(ctx, 60*time.Second, "JetStream cluster takes an R3 stream", func(ctx context.Context) error {
		if _, err := js.AccountInfo(ctx); err != nil {
			return err
		}
		if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "CHAOS_PROBE", Subjects: []string{"chaos.probe"},
			Replicas: 3, Storage: jetstream.MemoryStorage}); err != nil {
			return err
		}
		return js.DeleteStream(ctx, "CHAOS_PROBE")
	})
}

func (s *stack) natsURLs() string {
	var urls []string
	for _, n := range s.nats {
		urls = append(urls, n.url())
	}
	return strings.Join(urls, ",")
}

// redisNodeTimeout is the Redis Cluster's cluster-node-timeout: what a
// shop would run for a waiting room (see docs/operations.md, "Running at scale"). A
// master silent this long is failed over to its replica, so it bounds how
// long a dead master pauses its queues: the failover takes it plus about a
// second for the other masters to agree and the replica to be elected.
// Any shorter and a master stalled by its own disk (Redis blocks writes
// when an AOF fsync has been pending 2 s) or a brief network hiccup would
// be failed over for nothing.
const redisNodeTimeout = 5 * time.Second

// startRedis starts six cluster-enabled nodes with AOF (fsync every
// second, as production), creates the cluster (3 masters, 1 replica each)
// and waits until every node sees every slot served. A cluster missing a
// shard keeps serving the others (cluster-require-full-coverage no), as
// production should: one shard's failover pauses its own queues, not
// every queue.
func (s *stack) startRedis(ctx context.Context) error {
	ports, err := pickPorts(6, redisBusOffset)
	if err != nil {
		return err
	}
	var addrs []string
	for i, port := range ports {
		dir := filepath.Join(s.dir, "redis", strconv.Itoa(port))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		n := &redisNode{port: port, dir: dir}
		n.proc = s.newProc(fmt.Sprintf("redis-%d", i+1), s.bins.redisServer, []string{
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--protected-mode", "no",
			"--dir", dir, "--daemonize", "no", "--save", "",
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.Itoa(int(redisNodeTimeout.Milliseconds())), "--cluster-require-full-coverage", "no",
			"--appendonly", "yes", "--appendfsync", "everysec",
		}, nil)
		if err := n.proc.start(); err != nil {
			return err
		}
		s.redis = append(s.redis, n)
		addrs = append(addrs, n.addr())
	}
	for _, n := range s.redis {
		if err := waitRedisPing(ctx, n.addr()); err != nil {
			return err
		}
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(cctx, s.bins.redisCLI, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("redis-cli --cluster create: %v: %s", err, out)
	}
	// The harness's own client rereads the slot map every second: its
	// sampler follows a failover without the services' reload-on-error.
	s.rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, MaxRedirects: 8,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
		ClusterStateReloadInterval: time.Second})
	return s.waitRedisCluster(ctx)
}

// waitRedisCluster waits until every running node says cluster_state:ok
// and the cluster's 3 masters serving slots are running nodes. It asks the
// nodes themselves, one connection each: the harness's cluster client may
// still hold a slot map naming a killed master, and every call through it
// to that master hangs in its dial retries (CI: a minute of 5-second
// attempts, each ending in its deadline).
func (s *stack) waitRedisCluster(ctx context.Context) error {
	return poll(ctx, 60*time.Second, "Redis Cluster state ok on every node", func(ctx context.Context) error {
		var nodes string
		for _, n := range s.redis {
			if !n.proc.running() {
				continue
			}
			c := redis.NewClient(&redis.Options{Addr: n.addr(), DialTimeout: time.Second, ReadTimeout: time.Second})
			info, err := c.ClusterInfo(ctx).Result()
			if err == nil && nodes == "" {
				nodes, err = c.ClusterNodes(ctx).Result()
			}
			c.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", n.addr(), err)
			}
			if !strings.Contains(info, "cluster_state:ok") {
				return fmt.Errorf("%s: cluster state not ok", n.addr())
			}
		}
		masters := 0
		for _, l := range strings.Split(strings.TrimSpace(nodes), "\n") {
			fs := strings.Fields(l) // id addr@bus flags master ping pong epoch link slot…
			if len(fs) < 9 || !strings.Contains(fs[2], "master") || strings.Contains(fs[2], "fail") {
				continue
			}
			addr, _, _ := strings.Cut(fs[1], "@")
			if n := s.redisNodeOf(addr); n == nil || !n.proc.running() {
				return fmt.Errorf("master %s serves slots but is not running", addr)
			}
			masters++
		}
		if masters != 3 {
			return fmt.Errorf("%d masters serving slots, want 3", masters)
		}
		return nil
	})
}

func waitRedisPing(ctx context.Context, addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, ReadTimeout: time.Second})
	defer c.Close()
	return poll(ctx, 30*time.Second, "redis "+addr+" answers PING", func(ctx context.Context) error {
		return c.Ping(ctx).Err()
	})
}

// postgresUser is the user PostgreSQL runs as: postgres when the harness
// is root (initdb refuses root), else the harness's own user.
func postgresUser() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root needs a postgres user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// pgTemplate runs initdb once per run; each scenario copies the result.
func pgTemplate(ctx context.Context, dir, pgBin string) (string, error) {
	cred, err := postgresUser()
	if err != nil {
		return "", err
	}
	data := filepath.Join(dir, "pg-template")
	if err := os.MkdirAll(data, 0o700); err != nil {
		return "", err
	}
	if cred != nil {
		if err := os.Chown(data, int(cred.Uid), int(cred.Gid)); err != nil {
			return "", err
		}
	}
	cmd := exec.CommandContext(ctx, filepath.Join(pgBin, "initdb"), "-D", data, "-U", "postgres",
		"--auth=trust", "--no-sync", "-E", "UTF8")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	cmd.Dir = "/"
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("initdb: %v: %s", err, out)
	}
	return data, nil
}

// startPostgres copies the template cluster and runs postgres in the
// foreground as a child: synchronous commits (a crash loses no committed
// order), fsync off (the harness kills processes, not the machine).
func (s *stack) startPostgres(ctx context.Context, template string) error {
	cred, err := postgresUser()
	if err != nil {
		return err
	}
	data := filepath.Join(s.dir, "pg")
	if out, err := exec.CommandContext(ctx, "cp", "-a", template, data).CombinedOutput(); err != nil {
		return fmt.Errorf("copy the PostgreSQL template: %v: %s", err, out)
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	p := s.newProc("postgres", filepath.Join(s.bins.pgBin, "postgres"), []string{
		"-D", data, "-h", "127.0.0.1", "-p", strconv.Itoa(port), "-k", "",
		"-c", "fsync=off", "-c", "full_page_writes=off", "-c", "max_connections=300",
		"-c", "shared_buffers=64MB", "-c", "logging_collector=off",
	}, []string{"PATH=" + os.Getenv("PATH")})
	p.cred = cred
	s.pg = &pgServer{proc: p, port: port,
		url: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/usher?sslmode=disable", port)}
	if err := p.start(); err != nil {
		return err
	}
	admin := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	return poll(ctx, 60*time.Second, "PostgreSQL accepts connections", func(ctx context.Context) error {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		conn, err := pgx.Connect(cctx, admin)
		if err != nil {
			return err
		}
		defer conn.Close(cctx)
		var n int
		if err := conn.QueryRow(cctx, "SELECT count(*) FROM pg_database WHERE datname = 'usher'").Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			_, err = conn.Exec(cctx, "CREATE DATABASE usher")
		}
		return err
	})
}

// waitPostgres waits until the usher database answers again.
func (s *stack) waitPostgres(ctx context.Context) error {
	return poll(ctx, 60*time.Second, "PostgreSQL answers", func(ctx context.Context) error {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		conn, err := pgx.Connect(cctx, s.pg.url)
		if err != nil {
			return err
		}
		return conn.Close(cctx)
	})
}

func (s *stack) startPgsim(ctx context.Context) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	s.pgsimURL = "http://" + addr
	s.pgsim = s.newProc("pgsim", s.bins.pgsim, nil, []string{
		"PATH=" + os.Getenv("PATH"), "PGSIM_ADDR=" + addr, "PGSIM_ADMIN_TOKEN=" + s.token,
		"PGSIM_LATENCY_MEAN_MS=40", "PGSIM_LATENCY_TAIL=0.3", "PGSIM_SLOW_MS=4000",
	})
	if err := s.pgsim.start(); err != nil {
		return err
	}
	return waitHTTP(ctx, s.pgsimURL+"/healthz", 30*time.Second)
}

// startServices starts two of each service. The first gateway starts
// before the other gateways and the notifiers: it generates the signing
// key and ticket secret in the shared data folder that they then read.
func (s *stack) startServices(ctx context.Context, p plan) error {
	ports, err := freePorts(4 * len(serviceKinds)) // each one's address and its profiles'
	if err != nil {
		return err
	}
	common := map[string]string{
		"USHER_NATS_URL":        s.natsURLs(),
		"USHER_REDIS_URL":       s.redisSeeds(),
		"USHER_STREAM_REPLICAS": "3",
		"USHER_DATA_DIR":        filepath.Join(s.dir, "data"),
		"USHER_ADMIN_TOKEN":     s.token,
		"USHER_DATABASE_URL":    s.pg.url,
		"USHER_PAYMENT_URL":     s.pgsimURL,
		"USHER_LOG_LEVEL":       "info",
		// Shorter than production (60 s, 30 s) so a scenario sees orders
		// through their deadline and redelivery within its minute.
		"USHER_ORDER_DEADLINE": orderDeadline.String(),
		"USHER_ORDER_ACK_WAIT": orderAckWait.String(),
	}
	for k, v := range p.env {
		common[k] = v
	}
	i := 0
	for _, kind := range serviceKinds {
		for idx := range 2 {
			sv := &service{kind: kind, idx: idx, addr: fmt.Sprintf("127.0.0.1:%d", ports[i]),
				profiles: fmt.Sprintf("127.0.0.1:%d", ports[i+1]), env: map[string]string{}}
			i += 2
			for k, v := range common {
				sv.env[k] = v
			}
			sv.env[addrVar[kind]] = sv.addr
			sv.env["USHER_PPROF_ADDR"] = sv.profiles
			if sv.name() == p.natsProxied {
				sv.env["USHER_NATS_URL"] = s.proxies.natsURLs()
			}
			if sv.name() == p.redisProxied {
				sv.env["USHER_REDIS_URL"] = s.proxies.redisSeeds()
				sv.env["USHER_REDIS_ADDR_MAP"] = s.proxies.redisAddrMap()
			}
			sv.proc = s.newProc(sv.name(), s.bins.service[kind], nil, sv.environ())
			s.services = append(s.services, sv)
		}
	}
	// One admitter alone first (it may be the one that declares the
	// streams and the catalog, and services declaring them at once on a
	// fresh cluster can time out), then the first gateway alone, then the
	// rest at once.
	first := s.service(kindGateway, 0)
	started := map[*service]bool{}
	for _, sv := range []*service{s.service(kindAdmitter, 0), first} {
		if err := sv.proc.start(); err != nil {
			return err
		}
		started[sv] = true
		if err := waitHTTP(ctx, sv.url()+"/readyz", 90*time.Second); err != nil {
			return fmt.Errorf("%s: %w", sv.name(), err)
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, sv := range s.services {
		if sv == first {
			continue
		}
		if !started[sv] {
			if err := sv.proc.start(); err != nil {
				return err
			}
		}
		g.Go(func() error {
			if err := waitHTTP(gctx, sv.url()+"/readyz", 90*time.Second); err != nil {
				return fmt.Errorf("%s: %w", sv.name(), err)
			}
			return nil
		})
	}
	return g.Wait()
}

func (s *stack) redisSeeds() string {
	var addrs []string
	for _, n := range s.redis {
		addrs = append(addrs, n.addr())
	}
	return strings.Join(addrs, ",")
}

// service returns the idx-th service of a kind.
func (s *stack) service(kind string, idx int) *service {
	for _, sv := range s.services {
		if sv.kind == kind && sv.idx == idx {
			return sv
		}
	}
	return nil
}

// servicesOf returns the services of a kind.
func (s *stack) servicesOf(kind string) []*service {
	var out []*service
	for _, sv := range s.services {
		if sv.kind == kind {
			out = append(out, sv)
		}
	}
	return out
}

// restart starts a service again (after a kill) with its current env and
// waits until it is ready.
func (s *stack) restart(ctx context.Context, sv *service) error {
	sv.proc.env = sv.environ()
	if err := sv.proc.start(); err != nil {
		return err
	}
	return waitHTTP(ctx, sv.url()+"/readyz", 90*time.Second)
}

// waitHTTP waits until url answers 200.
func waitHTTP(ctx context.Context, url string, within time.Duration) error {
	client := &http.Client{Timeout: 2 * time.Second}
	return poll(ctx, within, url+" answers 200", func(ctx context.Context) error {
		res, err := client.Get(url)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			return fmt.Errorf("status %d", res.StatusCode)
		}
		return nil
	})
}

// poll calls f until it succeeds, ctx ends or within passes: the harness
// waits for effects this way, never by sleeping and hoping. Each attempt
// gets at most 5 s, so a call that hangs on a dead server is only one
// failed attempt.
func poll(ctx context.Context, within time.Duration, what string, f func(ctx context.Context) error) error {
	deadline := time.Now().Add(within)
	var last error // the last attempt's error, or the one before when the last only ran out of time
	for {
		actx, cancel := context.WithTimeout(ctx, min(5*time.Second, max(time.Until(deadline), 100*time.Millisecond)))
		err := f(actx)
		ranOut := actx.Err() != nil
		cancel()
		if err == nil {
			return nil
		}
		if !ranOut || last == nil {
			last = err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v still waiting for %s: %w", within, what, last)
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}
