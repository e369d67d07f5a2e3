package waitqueue

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
)

// addrMapVar names the variable that maps Redis Cluster node addresses to
// the addresses this process dials instead: "host:port=host:port,…".
//
// A cluster client learns its nodes' addresses from the cluster itself
// (CLUSTER SLOTS), so the seeds in USHER_REDIS_URL alone cannot route one
// process through a proxy. The map can: the chaos harness puts toxiproxy in
// front of every node for one service and partitions that service from
// Redis while every other one still reaches it. Unset, nothing changes.
const addrMapVar = "USHER_REDIS_ADDR_MAP"

// addrMapDialer returns the cluster client's dialer for USHER_REDIS_ADDR_MAP,
// or nil (go-redis's own) when it is unset. A malformed map fails every
// dial with an error naming it, so the service reports it at start-up.
func addrMapDialer() func(ctx context.Context, network, addr string) (net.Conn, error) {
	spec := strings.TrimSpace(os.Getenv(addrMapVar))
	if spec == "" {
		return nil
	}
	m, err := parseAddrMap(spec)
	var d net.Dialer
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if err != nil {
			return nil, err
		}
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
			return nil, fmt.Errorf("%s: %q is not host:port=host:port", addrMapVar, pair)
		}
		if _, _, err := net.SplitHostPort(to); err != nil {
			return nil, fmt.Errorf("%s: %q is not host:port=host:port", addrMapVar, pair)
		}
		m[from] = to
	}
	return m, nil
}
