package waitqueue

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Smart batching: a busy gateway has many joins and polls in flight at once,
// each one a single script call. Sending each as its own request costs a
// write and a read system call per call on both ends; sending whatever has
// queued up as one pipeline costs them once per batch. A batch goes out as
// soon as a worker is free — there is no timer — so an idle gateway pays
// no extra latency and a busy one pays far fewer system calls.

// maxBatch bounds one pipeline.
const maxBatch = 512

type scriptCall struct {
	script *redis.Script
	keys   []string
	args   []any
	ctx    context.Context
	cmd    *redis.Cmd
	done   chan struct{}
}

// EnableBatching makes the Store coalesce its per-request script calls
// (Ingest, Lookup, Poll) into pipelines run by RunBatches. Call it before
// the Store is used, and run RunBatches for as long as the Store is.
func (s *Store) EnableBatching() {
	s.calls = make(chan *scriptCall, 4*maxBatch)
}

// RunBatches sends the queued script calls in pipelines with workers
// concurrent pipelines, until ctx ends.
func (s *Store) RunBatches(ctx context.Context, workers int) error {
	if s.calls == nil {
		return errors.New("waitqueue: RunBatches without EnableBatching")
	}
	for _, sc := range []*redis.Script{ingestScript, lookupScript, pollScript} {
		if err := sc.Load(ctx, s.rdb).Err(); err != nil {
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
				case c := <-s.calls:
					batch = append(batch[:0], c)
				}
			fill:
				for len(batch) < maxBatch {
					select {
					case c := <-s.calls:
						batch = append(batch, c)
					default:
						break fill
					}
				}
				s.flush(ctx, batch)
			}
		}()
	}
	for range workers {
		<-done
	}
	return nil
}

func (s *Store) flush(ctx context.Context, batch []*scriptCall) {
	p := s.rdb.Pipeline()
	for _, c := range batch {
		c.cmd = c.script.EvalSha(ctx, p, c.keys, c.args...)
	}
	_, _ = p.Exec(ctx)
	for _, c := range batch {
		if err := c.cmd.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			// Redis lost its script cache (restart, failover): run this
			// one directly, which loads the script again.
			c.cmd = c.script.Run(c.ctx, s.rdb, c.keys, c.args...)
		}
		close(c.done)
	}
}

// run calls a script, through the batcher when batching is on.
func (s *Store) run(ctx context.Context, sc *redis.Script, keys []string, args ...any) *redis.Cmd {
	if s.calls == nil {
		return sc.Run(ctx, s.rdb, keys, args...)
	}
	c := &scriptCall{script: sc, keys: keys, args: args, ctx: ctx, done: make(chan struct{})}
	select {
	case s.calls <- c:
	case <-ctx.Done():
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(ctx.Err())
		return cmd
	}
	select {
	case <-c.done:
		return c.cmd
	case <-ctx.Done():
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(ctx.Err())
		return cmd
	}
}

// RunScript runs any script through the Store's batcher (or directly when
// batching is off), so other per-request scripts on the queue's slot — the
// gateway's rate limiter — share its pipelines. A script RunBatches did not
// load is loaded on its first call.
func (s *Store) RunScript(ctx context.Context, sc *redis.Script, keys []string, args ...any) *redis.Cmd {
	return s.run(ctx, sc, keys, args...)
}
