package waitqueue

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// How a cluster client keeps up with the cluster's topology (see
// followTopology).
const (
	// dialTimeout bounds a connection attempt: a node that does not
	// answer a dial in this long is down, or cut off.
	dialTimeout = 2 * time.Second
	// topologyRefresh is how often a cluster client rereads the slot map
	// even when nothing failed (go-redis's default is a minute).
	topologyRefresh = 5 * time.Second
)

// followTopology makes a cluster client reread the cluster's slot map
// (CLUSTER SLOTS, from any node that answers) as soon as a command fails
// in a way that says a node is gone or the cluster is changing: a refused,
// reset or timed-out connection, CLUSTERDOWN, TRYAGAIN, MASTERDOWN, LOADING.
//
// go-redis rereads it by itself only on MOVED and ASK, which a master that
// died never sends: its clients would keep dialing the dead address, slot
// after slot, until the periodic refresh or the old master's return,
// seconds after the replica had taken over. With this hook, the
// first failed command after the election (a command fails every few
// milliseconds while a queue's shard is down) brings the new master in;
// go-redis's own retry of that command then goes to it. Rereads are
// asynchronous and coalesced (at most one every 200 ms), so a storm of
// failures costs a few CLUSTER SLOTS.
func followTopology(c *redis.ClusterClient) {
	h := topologyHook{c}
	c.AddHook(h)
	c.OnNewNode(func(n *redis.Client) { n.AddHook(h) })
}

type topologyHook struct{ c *redis.ClusterClient }

func (topologyHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h topologyHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err != nil && topologyChanging(err) {
			h.c.ReloadState(ctx)
		}
		return err
	}
}

func (h topologyHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if err != nil && topologyChanging(err) {
			h.c.ReloadState(ctx)
		}
		return err
	}
}

// topologyChanging reports whether err says a node is unreachable or the
// cluster is reconfiguring (rather than the command being wrong).
func topologyChanging(err error) bool {
	if errors.Is(err, redis.Nil) || errors.Is(err, context.Canceled) {
		return false
	}
	var ne net.Error
	switch {
	case errors.As(err, &ne), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, context.DeadlineExceeded):
		return true
	}
	msg := err.Error()
	for _, p := range []string{"CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "LOADING"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return strings.Contains(msg, "connection refused") || strings.Contains(msg, "connection reset")
}

// slotMoving reports whether err says the command met its slot moving
// between two masters (CLUSTER SETSLOT MIGRATING/IMPORTING, a reshard):
// TRYAGAIN when its keys are split between them; ASK or MOVED once
// go-redis's own redirections are used up; and, from a script, Redis's
// refusal of a key it did not declare that is not (or no longer) on the
// node — how a script deriving an entry's key from the queue's prefix
// meets a key already moved.
func slotMoving(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	for _, p := range []string{"TRYAGAIN", "ASK ", "MOVED "} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return strings.Contains(msg, "Script attempted to access a non local key")
}
