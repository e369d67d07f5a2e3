package main

import (
	"context"
	"fmt"
	"strings"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// proxies is an embedded toxiproxy with one proxy in front of every NATS
// node and every Redis node, used by exactly one service: cutting them
// partitions that service from NATS or Redis while everyone else still
// reaches both.
type proxies struct {
	server *toxiproxy.ApiServer
	nats   []*toxiproxy.Proxy
	redis  []*toxiproxy.Proxy
	// redisMap maps each Redis node's own address (what the cluster
	// announces) to its proxy's.
	redisMap map[string]string
	order    []string // redisMap's keys in node order
}

func newProxies(s *stack) (*proxies, error) {
	px := &proxies{
		server:   toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop()),
		redisMap: map[string]string{},
	}
	ports, err := freePorts(len(s.nats) + len(s.redis))
	if err != nil {
		return nil, err
	}
	add := func(name, upstream string, port int) (*toxiproxy.Proxy, error) {
		p := toxiproxy.NewProxy(px.server, name, fmt.Sprintf("127.0.0.1:%d", port), upstream)
		if err := px.server.Collection.Add(p, true); err != nil {
			return nil, fmt.Errorf("toxiproxy %s: %w", name, err)
		}
		return p, nil
	}
	for i, n := range s.nats {
		p, err := add("nats-"+n.name, fmt.Sprintf("127.0.0.1:%d", n.port), ports[i])
		if err != nil {
			px.close()
			return nil, err
		}
		px.nats = append(px.nats, p)
	}
	for i, n := range s.redis {
		p, err := add(fmt.Sprintf("redis-%d", n.port), n.addr(), ports[len(s.nats)+i])
		if err != nil {
			px.close()
			return nil, err
		}
		px.redis = append(px.redis, p)
		px.redisMap[n.addr()] = p.Listen
		px.order = append(px.order, n.addr())
	}
	return px, nil
}

func (px *proxies) natsURLs() string {
	var urls []string
	for _, p := range px.nats {
		urls = append(urls, "nats://"+p.Listen)
	}
	return strings.Join(urls, ",")
}

func (px *proxies) redisSeeds() string {
	var addrs []string
	for _, p := range px.redis {
		addrs = append(addrs, p.Listen)
	}
	return strings.Join(addrs, ",")
}

// redisAddrMap is USHER_REDIS_ADDR_MAP: node address=proxy address, …
func (px *proxies) redisAddrMap() string {
	var pairs []string
	for _, a := range px.order {
		pairs = append(pairs, a+"="+px.redisMap[a])
	}
	return strings.Join(pairs, ",")
}

// cut black-holes every connection through the proxies, both ways, open
// ones and new ones alike: bytes are swallowed and nothing is closed, as
// in a real partition (no RST tells the client).
func cut(ps []*toxiproxy.Proxy) error {
	for _, p := range ps {
		for _, dir := range []string{"upstream", "downstream"} {
			body := fmt.Sprintf(`{"name":"cut-%s","type":"timeout","stream":%q,"attributes":{"timeout":0}}`, dir, dir)
			if _, err := p.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
				return fmt.Errorf("cut %s %s: %w", p.Name, dir, err)
			}
		}
	}
	return nil
}

// heal removes the cut. The connections that lived through it are closed
// (their bytes were lost, as TCP would have given up on them); clients
// reconnect.
func heal(ps []*toxiproxy.Proxy) error {
	for _, p := range ps {
		for _, dir := range []string{"upstream", "downstream"} {
			if err := p.Toxics.RemoveToxic(context.Background(), "cut-"+dir); err != nil {
				return fmt.Errorf("heal %s %s: %w", p.Name, dir, err)
			}
		}
	}
	return nil
}

func (px *proxies) close() {
	_ = px.server.Collection.Clear()
}
