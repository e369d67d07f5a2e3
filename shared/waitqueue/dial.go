package waitqueue

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"usher/shared/config"
	"usher/shared/keyspace"
)

// Settings say how a process reaches Redis and keeps its line.
type Settings struct {
	// URL is a redis:// or rediss:// URL (or a bare host:port) of one
	// server, or a comma-separated list of host:port seeds of a Redis
	// Cluster.
	URL  string
	Pool int
	// AddrMap maps Redis Cluster node addresses to the ones this process
	// dials instead (USHER_REDIS_ADDR_MAP, "host:port=host:port,…"): a
	// cluster client learns its nodes' addresses from the cluster itself,
	// so the seeds alone cannot route one process through a proxy (NAT, a
	// sidecar, the fault suite's toxiproxy).
	AddrMap map[string]string
	// Tombstones is how long finished entries stay (USHER_TOMBSTONE_TTL).
	Tombstones time.Duration
}

// LoadSettings reads the Redis settings; pool is the service's default
// pool size.
func LoadSettings(env *config.Env, pool int) Settings {
	s := Settings{
		URL:        env.String("USHER_REDIS_URL", "redis://127.0.0.1:6379/0"),
		Pool:       env.Int("USHER_REDIS_POOL", pool, 1),
		Tombstones: env.Duration("USHER_TOMBSTONE_TTL", keyspace.TombstoneTTL),
	}
	if spec := env.String("USHER_REDIS_ADDR_MAP", ""); spec != "" {
		m, err := parseAddrMap(spec)
		env.Check(err)
		s.AddrMap = m
	}
	return s
}

// Dial connects to Redis (see Settings.URL).
func Dial(s Settings) (redis.UniversalClient, error) {
	if strings.Contains(s.URL, ",") {
		var addrs []string
		for _, a := range strings.Split(s.URL, ",") {
			if a = strings.TrimSpace(a); a != "" {
				addrs = append(addrs, strings.TrimPrefix(a, "redis://"))
			}
		}
		if len(addrs) == 0 {
			return nil, fmt.Errorf("redis address %q: empty", s.URL)
		}
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, PoolSize: s.Pool, Dialer: mapDialer(s.AddrMap)}), nil
	}
	url := s.URL
	if !strings.Contains(url, "://") {
		url = "redis://" + url
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
	}
	opt.PoolSize = s.Pool
	return redis.NewClient(opt), nil
}

// DialURL connects to the Redis at url with a pool of pool connections.
func DialURL(url string, pool int) (redis.UniversalClient, error) {
	return Dial(Settings{URL: url, Pool: pool})
}

// Connect dials Redis (see Dial) and waits until it answers PING — a Redis
// that is still loading its data set at start-up answers LOADING — for at
// most 30 seconds or until ctx ends.
func Connect(ctx context.Context, s Settings) (redis.UniversalClient, error) {
	rdb, err := Dial(s)
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
			return nil, fmt.Errorf("redis %s not ready: %w", redact(s.URL), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// mapDialer dials the address m maps addr to (nil: go-redis's own dialer).
func mapDialer(m map[string]string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if len(m) == 0 {
		return nil
	}
	var d net.Dialer
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if to, ok := m[addr]; ok {
			addr = to
		}
		return d.DialContext(ctx, network, addr)
	}
}

// parseAddrMap reads "from=to,from=to".
func parseAddrMap(spec string) (map[string]string, error) {
	m := map[string]string{}
	for _, pair := range strings.Split(spec, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		from, to, ok := strings.Cut(pair, "=")
		if _, _, err := net.SplitHostPort(from); !ok || err != nil {
			return nil, fmt.Errorf("USHER_REDIS_ADDR_MAP: %q is not host:port=host:port", pair)
		}
		if _, _, err := net.SplitHostPort(to); err != nil {
			return nil, fmt.Errorf("USHER_REDIS_ADDR_MAP: %q is not host:port=host:port", pair)
		}
		m[from] = to
	}
	return m, nil
}

// redact hides a password in a Redis URL before it is shown.
func redact(u string) string {
	if i := strings.Index(u, "@"); i >= 0 {
		if j := strings.Index(u, "://"); j >= 0 && j < i {
			return u[:j+3] + "***" + u[i:]
		}
	}
	return u
}
