package waitqueue

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"usher/internal/script"
)

// Smart batching: a busy gateway has many joins and polls in flight at once,
// each one a single script call. Sending each as its own request costs a
// write and a read system call per call on both ends; sending whatever has
// queued up as one pipeline costs them once per batch. A batch goes out as
// soon as a worker is free — there is no timer — so an idle gateway pays
// no extra latency and a busy one pays far fewer system calls. Within a
// batch, the calls of one script on one queue's slot go as one many-call
// script (package script): one command for Redis to dispatch and answer
// instead of one per shopper.

// maxBatch bounds one pipeline.
const maxBatch = 512

type scriptCall struct {
	script *script.Script
	keys   []string
	args   []any
	ctx    context.Context
	cmd    *redis.Cmd
	done   chan struct{}
}

// EnableBatching makes the Client coalesce its roles' per-request script
// calls (Ingest, Lookup, Poll; an order's Redeem, Placed, CountBought,
// Release) into pipelines run by RunBatches. Call it before the Client is
// used, and run RunBatches for as long as the Client is.
func (c *Client) EnableBatching() {
	c.calls = make(chan *scriptCall, 4*maxBatch)
}

// RunBatches sends the queued script calls in pipelines with workers
// concurrent pipelines, until ctx ends. Then it sends what is queued, and
// from then on every call goes straight to Redis: a service's requests
// still in flight while it shuts down (the gateway's drain, the order
// worker's last orders) are answered, not left waiting for a batcher that
// is gone.
func (c *Client) RunBatches(ctx context.Context, workers int) error {
	if c.calls == nil {
		return errors.New("waitqueue: RunBatches without EnableBatching")
	}
	// What is queued when the batches stop still goes, whatever ended ctx.
	defer c.stopBatches(context.WithoutCancel(ctx))
	c.preloadMu.Lock()
	preload := c.preload
	c.preloadMu.Unlock()
	for _, sc := range preload {
		if err := sc.Load(ctx, c.rdb); err != nil {
			if ctx.Err() != nil {
				return nil // stopped while starting: a shutdown, not a failure
			}
			return err
		}
	}
	done := make(chan struct{})
	for range workers {
		go func() {
			defer func() { done <- struct{}{} }()
			batch := make([]*scriptCall, 0, maxBatch)
			for {
				select {
				case <-ctx.Done():
					return
				case call := <-c.calls:
					batch = c.fill(append(batch[:0], call))
				}
				c.flush(ctx, batch)
			}
		}()
	}
	for range workers {
		<-done
	}
	return nil
}

// fill adds to batch what is queued, up to maxBatch, without waiting.
func (c *Client) fill(batch []*scriptCall) []*scriptCall {
	for len(batch) < maxBatch {
		select {
		case call := <-c.calls:
			batch = append(batch, call)
		default:
			return batch
		}
	}
	return batch
}

// stopBatches sends every later call straight to Redis, and what is
// queued, in batches on ctx. It sends while it waits for its write lock:
// a caller holding the read lock may be waiting for room in the queue.
func (c *Client) stopBatches(ctx context.Context) {
	stopped := make(chan struct{})
	go func() {
		c.stopMu.Lock()
		c.stopped = true
		c.stopMu.Unlock()
		close(stopped)
	}()
	for {
		select {
		case call := <-c.calls:
			c.flush(ctx, c.fill([]*scriptCall{call}))
		case <-stopped:
			for batch := c.fill(nil); len(batch) > 0; batch = c.fill(batch[:0]) {
				c.flush(ctx, batch)
			}
			return
		}
	}
}

func (c *Client) flush(ctx context.Context, batch []*scriptCall) {
	groups := groupCalls(batch)
	p := c.rdb.Pipeline()
	for _, g := range groups {
		if len(g) == 1 {
			g[0].cmd = g[0].script.EvalSha(ctx, p, g[0].keys, g[0].args...)
			continue
		}
		g[0].cmd = g[0].script.EvalShaMany(ctx, p, callsOf(g))
	}
	_, _ = p.Exec(ctx)
	for _, g := range groups {
		first := g[0]
		if redis.HasErrorPrefix(first.cmd.Err(), "NOSCRIPT") {
			// Redis lost its script cache (restart, failover): run this
			// one directly, which loads the script again (a group on the
			// batcher's context: it serves several callers, each of whom
			// stops waiting at its own deadline).
			if len(g) == 1 {
				first.cmd = first.script.Run(first.ctx, c.rdb, first.keys, first.args...)
			} else {
				first.cmd = first.script.RunMany(ctx, c.rdb, callsOf(g))
			}
		}
		if len(g) > 1 {
			for i, cmd := range script.Split(ctx, first.cmd, len(g)) {
				g[i].cmd = cmd
			}
		}
		for _, call := range g {
			close(call.done)
		}
	}
}

// groupCalls puts together, in order, the calls of one script on one hash
// tag with as many keys and arguments each: each group goes as one command.
// A call whose keys have no hash tag goes alone.
func groupCalls(batch []*scriptCall) [][]*scriptCall {
	var groups [][]*scriptCall
next:
	for _, c := range batch {
		if tag := tagOf(c); tag != "" {
			for i, g := range groups {
				f := g[0]
				if f.script == c.script && len(f.keys) == len(c.keys) && len(f.args) == len(c.args) && tagOf(f) == tag {
					groups[i] = append(g, c)
					continue next
				}
			}
		}
		groups = append(groups, []*scriptCall{c})
	}
	return groups
}

// tagOf is the hash tag of a call's keys ("" without keys).
func tagOf(c *scriptCall) string {
	if len(c.keys) == 0 {
		return ""
	}
	return script.Tag(c.keys[0])
}

func callsOf(g []*scriptCall) []script.Call {
	calls := make([]script.Call, len(g))
	for i, c := range g {
		calls[i] = script.Call{Keys: c.keys, Args: c.args}
	}
	return calls
}

// How long a script call waits out its slot's move (see WaitOutMove).
const (
	moveRetryFirst = 10 * time.Millisecond
	moveRetryMax   = 250 * time.Millisecond
	moveRetryFor   = 10 * time.Second
)

// run calls a script, through the batcher when batching is on, and waits
// out its queue's slot moving (see WaitOutMove).
func (c *Client) run(ctx context.Context, sc *script.Script, keys []string, args ...any) *redis.Cmd {
	return WaitOutMove(ctx, func() *redis.Cmd { return c.runOnce(ctx, sc, keys, args...) })
}

// WaitOutMove makes a script call, and makes it again while its queue's
// slot moves to another master (a reshard, see slotMoving), backing off,
// until it goes through, ctx ends or it has waited moveRetryFor: a
// slot's move takes a fraction of a second to seconds, and a shopper's
// join, poll or leave answered 503 for it would turn an operator's routine
// reshard into failed requests. Running a script again is safe: a move
// refuses it before it runs (TRYAGAIN, ASK, MOVED), or stops it at the
// first key that has left (the writes before it stay, Redis never rolls a
// script back), and every script resolves a second run to what the first
// did, as it must for a retry after a timeout.
func WaitOutMove(ctx context.Context, call func() *redis.Cmd) *redis.Cmd {
	wait, waited := moveRetryFirst, time.Duration(0)
	for {
		cmd := call()
		if !slotMoving(cmd.Err()) || waited+wait > moveRetryFor {
			return cmd
		}
		select {
		case <-ctx.Done():
			return cmd
		case <-time.After(wait):
		}
		waited += wait
		wait = min(2*wait, moveRetryMax)
	}
}

// runOnce calls a script once, through the batcher when batching is on.
func (c *Client) runOnce(ctx context.Context, sc *script.Script, keys []string, args ...any) *redis.Cmd {
	if c.calls == nil {
		return sc.Run(ctx, c.rdb, keys, args...)
	}
	call := &scriptCall{script: sc, keys: keys, args: args, ctx: ctx, done: make(chan struct{})}
	c.stopMu.RLock()
	if c.stopped {
		c.stopMu.RUnlock()
		return sc.Run(ctx, c.rdb, keys, args...)
	}
	select {
	case c.calls <- call:
		c.stopMu.RUnlock()
	case <-ctx.Done():
		c.stopMu.RUnlock()
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(ctx.Err())
		return cmd
	}
	select {
	case <-call.done:
		return call.cmd
	case <-ctx.Done():
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(ctx.Err())
		return cmd
	}
}

// RunScript runs a script through the Client's batcher (or directly when
// batching is off): the roles' per-request scripts, and others on the
// queue's slot — the gateway's rate limiter — share its pipelines. A
// script RunBatches did not load is loaded on its first call.
func (c *Client) RunScript(ctx context.Context, sc *script.Script, keys []string, args ...any) *redis.Cmd {
	return c.run(ctx, sc, keys, args...)
}
