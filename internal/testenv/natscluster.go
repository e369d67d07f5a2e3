package testenv

import (
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// NATSCluster starts three embedded JetStream servers routed to each other
// in one cluster, each storing in a temporary folder, and returns their
// client URLs once JetStream has a meta leader: the cluster a replicated
// (R3) stream needs, whose leader stores a message only once a second
// node has it. The servers stop when the test ends.
func NATSCluster(t testing.TB) []string {
	t.Helper()
	const n = 3
	routes := make([]*url.URL, n)
	ports := make([]int, n)
	for i := range n {
		port, err := FreePort()
		if err != nil {
			t.Fatalf("nats cluster: %v", err)
		}
		ports[i] = port
		routes[i] = &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", ports[i])}
	}
	servers := make([]*server.Server, n)
	urls := make([]string, n)
	for i := range n {
		s, err := server.NewServer(&server.Options{
			ServerName: fmt.Sprintf("n%d", i+1), Host: "127.0.0.1", Port: -1,
			JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
			Cluster: server.ClusterOpts{Name: "testenv", Host: "127.0.0.1", Port: ports[i]},
			Routes:  routes,
		})
		if err != nil {
			t.Fatalf("nats cluster: %v", err)
		}
		go s.Start()
		t.Cleanup(s.Shutdown)
		servers[i] = s
	}
	for i, s := range servers {
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatalf("nats cluster: n%d not ready after 10s", i+1)
		}
		urls[i] = s.ClientURL()
	}
	deadline := time.Now().Add(20 * time.Second)
	for leaderOf(servers) == nil {
		if time.Now().After(deadline) {
			t.Fatal("nats cluster: no JetStream meta leader after 20s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return urls
}

// leaderOf is the server leading JetStream's meta group, or nil.
func leaderOf(servers []*server.Server) *server.Server {
	for _, s := range servers {
		if s.JetStreamIsLeader() {
			return s
		}
	}
	return nil
}
