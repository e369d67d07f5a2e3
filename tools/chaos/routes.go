package main

import (
	"context"
	"fmt"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"usher/internal/event"
)

// routeProxies puts a toxiproxy on every directed route between the NATS
// nodes: node a dials node b's cluster port through its own proxy a→b.
// Cutting every proxy to and from one node partitions it from the other
// two while its clients still reach it. One proxy per destination would
// not do: a node's own outgoing routes would go through the proxies of the
// others, which stay open.
type routeProxies struct {
	server *toxiproxy.ApiServer
	pair   map[[2]string]*toxiproxy.Proxy // {from, to} → proxy
	// deadEnd is the cluster address every node advertises: a reserved
	// port nobody listens on. A node learns of the others' routes by
	// gossip and dials what they advertise once (implicit routes are never
	// retried); dialling their real ports would bypass the proxies, so it
	// must fail, and the configured routes through the proxies carry
	// everything.
	deadEnd int
}

// newRouteProxies makes the six proxies; each node's cluster port must be
// known (their servers need not run yet).
func newRouteProxies(nodes []*natsNode) (*routeProxies, error) {
	rp := &routeProxies{
		server: toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop()),
		pair:   map[[2]string]*toxiproxy.Proxy{},
	}
	ports, err := freePorts(len(nodes)*(len(nodes)-1) + 1)
	if err != nil {
		return nil, err
	}
	rp.deadEnd, ports = ports[0], ports[1:]
	for _, a := range nodes {
		for _, b := range nodes {
			if a == b {
				continue
			}
			name := fmt.Sprintf("route-%s-%s", a.name, b.name)
			p := toxiproxy.NewProxy(rp.server, name, fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", b.clusterPort))
			ports = ports[1:]
			if err := rp.server.Collection.Add(p, true); err != nil {
				rp.close()
				return nil, fmt.Errorf("toxiproxy %s: %w", name, err)
			}
			rp.pair[[2]string{a.name, b.name}] = p
		}
	}
	return rp, nil
}

// routeURL is where node a dials node b.
func (rp *routeProxies) routeURL(a, b *natsNode) string {
	return "nats-route://" + rp.pair[[2]string{a.name, b.name}].Listen
}

// around returns the proxies of every route to and from node n.
func (rp *routeProxies) around(n *natsNode) []*toxiproxy.Proxy {
	var ps []*toxiproxy.Proxy
	for k, p := range rp.pair {
		if k[0] == n.name || k[1] == n.name {
			ps = append(ps, p)
		}
	}
	return ps
}

func (rp *routeProxies) close() { _ = rp.server.Collection.Clear() }

// streamLeaderSeenFrom is the leader of a stream as the node at url sees
// it ("" when it knows of none), asked over a connection to that node
// alone: while a node is partitioned the harness's own connection may sit
// on either side.
func streamLeaderSeenFrom(ctx context.Context, url, stream string) (string, error) {
	nc, err := nats.Connect(url, nats.Timeout(time.Second), nats.NoReconnect())
	if err != nil {
		return "", err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return "", err
	}
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return "", err
	}
	info := st.CachedInfo()
	if info.Cluster == nil {
		return "", nil
	}
	return info.Cluster.Leader, nil
}

// partitionNATSLeader cuts the routes of the node leading USHER_ENTRIES
// (its clients still reach it), keeps the cut until the other two have
// elected a new leader and the partition's length has passed, heals it
// and waits until every replica is current again. What the old leader
// believed meanwhile goes into the journal.
func partitionNATSLeader(ctx context.Context, f *fault) error {
	old, err := f.s.streamLeader(ctx, event.StreamEntries)
	if err != nil {
		return err
	}
	if err := cut(f.s.routes.around(old)); err != nil {
		return err
	}
	cutAt := time.Now()
	f.injected("partition NATS node %s, leader of USHER_ENTRIES, from the other two (its routes black-holed, clients still reach it)", old.name)
	var other *natsNode
	for _, n := range f.s.nats {
		if n != old {
			other = n
			break
		}
	}
	var elected string
	err = poll(ctx, 30*time.Second, "a new USHER_ENTRIES leader beyond the partition", func(ctx context.Context) error {
		l, err := streamLeaderSeenFrom(ctx, other.url(), event.StreamEntries)
		if err != nil {
			return err
		}
		if l == "" || l == old.name {
			return fmt.Errorf("leader %q", l)
		}
		elected = l
		return nil
	})
	if err != nil {
		_ = heal(f.s.routes.around(old))
		return err
	}
	f.j.add(record{Kind: recFault, Detail: fmt.Sprintf("%s elected leader of USHER_ENTRIES %.1fs after the cut; the old leader %s sees leader %s",
		elected, time.Since(cutAt).Seconds(), old.name, oldLeaderView(ctx, old))})
	slept := sleepCtx(ctx, max(time.Until(cutAt.Add(f.t.partition)), 2*time.Second))
	f.j.add(record{Kind: recFault, Detail: fmt.Sprintf("at the heal the old leader %s sees leader %s", old.name, oldLeaderView(ctx, old))})
	if err := heal(f.s.routes.around(old)); err != nil {
		return err
	}
	f.healed("partition of NATS node %s healed", old.name)
	if !slept {
		return ctx.Err()
	}
	return f.s.streamCurrent(ctx, event.StreamEntries, 60*time.Second)
}

// oldLeaderView says which leader a partitioned node believes in.
func oldLeaderView(ctx context.Context, n *natsNode) string {
	actx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	l, err := streamLeaderSeenFrom(actx, n.url(), event.StreamEntries)
	switch {
	case err != nil:
		return fmt.Sprintf("none (%v)", err)
	case l == "":
		return "none"
	default:
		return l
	}
}
