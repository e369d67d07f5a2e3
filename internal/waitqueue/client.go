package waitqueue

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"usher/internal/keyspace"
	"usher/internal/script"
)

// Client is the line's Redis client, shared by the line's roles: the
// connection, the batcher that pipelines their per-request script calls
// (see batch.go) and the tombstone TTL their scripts write with. A service
// makes one and gives it to each role it takes. It is safe for concurrent
// use.
type Client struct {
	rdb   redis.UniversalClient
	calls chan *scriptCall // set by EnableBatching
	ttl   int              // tombstone TTL in seconds

	// preload are the scripts RunBatches loads as it starts (see Preload).
	preloadMu sync.Mutex
	preload   []*script.Script

	// stopMu guards stopped: a call is queued under its read lock, and
	// RunBatches sets stopped under its write lock, so after that nothing
	// joins the queue it drains.
	stopMu  sync.RWMutex
	stopped bool // RunBatches has ended: calls go straight to Redis
}

// NewClient returns a Client on rdb whose scripts keep finished entries
// keyspace.TombstoneTTL.
func NewClient(rdb redis.UniversalClient) *Client {
	return &Client{rdb: rdb, ttl: int(keyspace.TombstoneTTL.Seconds())}
}

// SetTombstoneTTL changes how long finished entries stay (at least a
// second). Call it before the Client is used.
func (c *Client) SetTombstoneTTL(d time.Duration) { c.ttl = max(int(d.Seconds()), 1) }

// TombstoneTTL is how long finished entries stay.
func (c *Client) TombstoneTTL() time.Duration { return time.Duration(c.ttl) * time.Second }

// Redis is the client the roles send their commands on.
func (c *Client) Redis() redis.UniversalClient { return c.rdb }

// Preload names scripts RunBatches loads before it sends a batch, so the
// first pipelines find them in Redis's script cache: a role calls it for
// its per-request scripts when it is made. A script named again (a role
// made twice, or inside another: admission's Line) is loaded once.
func (c *Client) Preload(scripts ...*script.Script) {
	c.preloadMu.Lock()
	defer c.preloadMu.Unlock()
	for _, s := range scripts {
		if !slices.Contains(c.preload, s) {
			c.preload = append(c.preload, s)
		}
	}
}

// Now returns Redis's time: the one clock every decision uses.
func (c *Client) Now(ctx context.Context) (time.Time, error) {
	t, err := c.rdb.Time(ctx).Result()
	if err != nil {
		return time.Time{}, fmt.Errorf("redis time: %w", err)
	}
	return t, nil
}

// Cursor reads how far each stream is applied to q's line. A stream the
// line has never applied is absent.
func (c *Client) Cursor(ctx context.Context, q string) (Cursor, error) {
	v, err := c.rdb.HGetAll(ctx, keyspace.Of(q).Cursor()).Result()
	if err != nil {
		return nil, fmt.Errorf("cursor %s: %w", q, err)
	}
	out := Cursor{}
	for _, st := range []string{StreamEntries, StreamAdmissions, StreamOrders} {
		id, ok := v[st+".id"]
		if !ok {
			continue
		}
		seq, _ := strconv.ParseUint(v[st], 10, 64)
		since, _ := strconv.ParseUint(v[st+".v2"], 10, 64)
		out[st] = Position{Seq: seq, StreamID: id, GroupsSince: since}
	}
	return out, nil
}
