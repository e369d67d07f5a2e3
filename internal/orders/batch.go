package orders

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
)

// A stmt is one writing statement: the statement, a function reading its
// one row, and the stock row it locks ("" for none).
type stmt struct {
	ctx  context.Context
	sql  string
	args []any
	scan func(pgx.Row) error
	lock string
	// first, when set, runs just before sql in its transaction, with the
	// lock as its one argument (lockStockSQL: sql's snapshot is taken once
	// the stock row is locked).
	first string
	done  chan error
}

// queue adds w's statements to b.
func (w *stmt) queue(b *pgx.Batch) {
	if w.first != "" {
		b.Queue(w.first, w.lock)
	}
	b.Queue(w.sql, w.args...)
}

// read reads w's results from res, in the order queue queued them.
func (w *stmt) read(res pgx.BatchResults) error {
	if w.first != "" {
		if _, err := res.Exec(); err != nil {
			return err
		}
	}
	return w.scan(res.QueryRow())
}

// batcher sends the writing statements that queue up while one round
// trip is in flight together in the next: one round trip and one
// transaction for many orders. Orders of one hot SKU all lock its stock
// row: run side by side they wait for each other's lock and for the
// CPU while holding their connections (BENCHMARKS.md, "Orders"), run in
// turn on one connection they do not. At most one batch is in flight; a lone
// statement goes alone at once.
type batcher struct {
	max int // statements in one batch

	mu      sync.Mutex
	queue   []*stmt
	running bool
}

// batched queues w and returns its outcome. The first caller to find nobody
// sending sends batches until the queue is empty.
func (s *Store) batched(w *stmt) error {
	b := s.batch
	w.done = make(chan error, 1)
	b.mu.Lock()
	b.queue = append(b.queue, w)
	lead := !b.running
	b.running = true
	b.mu.Unlock()
	if lead {
		go s.sendAll()
	}
	select {
	case err := <-w.done:
		return err
	case <-w.ctx.Done():
		// The statement may still run and commit with its batch: the
		// caller treats this as it treats any statement cut short.
		return w.ctx.Err()
	}
}

// sendAll sends batches of what is queued until nothing is.
func (s *Store) sendAll() {
	b := s.batch
	for {
		b.mu.Lock()
		n := min(len(b.queue), b.max)
		if n == 0 {
			b.running = false
			b.mu.Unlock()
			return
		}
		ws := slices.Clone(b.queue[:n])
		b.queue = slices.Delete(b.queue, 0, n)
		b.mu.Unlock()
		s.send(ws)
	}
}

// send runs ws in one round trip, as one transaction (the extended
// protocol's implicit transaction up to its Sync). A statement that fails
// rolls the whole batch back; then each runs again on its own, so the
// one that failed gets its own error and the others their rows.
func (s *Store) send(ws []*stmt) {
	live := ws[:0]
	for _, w := range ws {
		if err := w.ctx.Err(); err != nil {
			w.done <- err // gone before its turn: not run
			continue
		}
		live = append(live, w)
	}
	switch len(live) {
	case 0:
		return
	case 1: // alone: no batch to build
		live[0].done <- s.alone(live[0])
		return
	}
	// Stock rows locked in one order by every batch (and every worker
	// process): two batches never wait for each other's rows.
	slices.SortStableFunc(live, func(a, b *stmt) int { return strings.Compare(a.lock, b.lock) })
	ctx, cancel := batchContext(live)
	defer cancel()
	errs := make([]error, len(live))
	err := func() error {
		c, err := s.pool.Acquire(ctx)
		if err != nil {
			return err
		}
		defer c.Release()
		var batch pgx.Batch
		for _, w := range live {
			w.queue(&batch)
		}
		res := c.SendBatch(ctx, &batch)
		for i, w := range live {
			errs[i] = w.read(res)
		}
		return res.Close()
	}()
	if err != nil || slices.ContainsFunc(errs, failed) {
		// Nothing of the batch committed: each again, alone.
		for i, w := range live {
			errs[i] = s.alone(w)
		}
	}
	for i, w := range live {
		w.done <- errs[i]
	}
}

// failed tells a statement's error from a statement that found no row
// (pgx.ErrNoRows: it ran, the batch commits).
func failed(err error) bool { return err != nil && !errors.Is(err, pgx.ErrNoRows) }

// alone runs w on a connection of its own: one statement, or with its
// first statement in one round trip and one transaction.
func (s *Store) alone(w *stmt) error {
	if err := w.ctx.Err(); err != nil {
		return err
	}
	if w.first == "" {
		return w.scan(s.pool.QueryRow(w.ctx, w.sql, w.args...))
	}
	var b pgx.Batch
	w.queue(&b)
	res := s.pool.SendBatch(w.ctx, &b)
	err := w.read(res)
	if cerr := res.Close(); err == nil {
		err = cerr
	}
	return err
}

type holdersKey struct{}

// batchContext lasts while anyone waits for the batch: it ends when the
// last caller's context does. It carries the callers' contexts, so each
// is told the connection hold of the batch its statement ran in
// (Options.HoldOf).
func batchContext(ws []*stmt) (context.Context, context.CancelFunc) {
	ctxs := make([]context.Context, len(ws))
	for i, w := range ws {
		ctxs[i] = w.ctx
	}
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), holdersKey{}, ctxs))
	var mu sync.Mutex
	left := len(ws)
	stops := make([]func() bool, len(ws))
	for i, w := range ws {
		stops[i] = context.AfterFunc(w.ctx, func() {
			mu.Lock()
			defer mu.Unlock()
			if left--; left == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// holders are the contexts a connection acquired with ctx holds for: a
// batch's callers, or ctx itself.
func holders(ctx context.Context) []context.Context {
	if ctxs, ok := ctx.Value(holdersKey{}).([]context.Context); ok {
		return ctxs
	}
	return []context.Context{ctx}
}
