package main

import (
	"context"
	"log/slog"
	"time"

	"usher/internal/keyspace"
	"usher/internal/orders"
)

// The order records in Redis are PostgreSQL's copies, written by the
// workers as orders change; unlike the line, the streams do not rebuild
// them. A Redis that lost them (a FLUSHALL, a node replaced empty) answered
// a PAID order's GET 404 for the record's day, and a resubmit of its token
// PENDING until the stream's duplicate window let the request through
// again. The keeper puts them back.

// changedOrders reads the orders changed since a time (PostgreSQL).
type changedOrders interface {
	ChangedSince(ctx context.Context, t time.Time, fn func(orders.Order) error) error
}

// keptRecords is what the keeper asks of and writes to the records.
type keptRecords interface {
	Kept(ctx context.Context) (bool, error)
	BeginPutBack(ctx context.Context) (mark string, err error)
	MarkKept(ctx context.Context, mark string) (bool, error)
	PutAll(ctx context.Context, recs []orders.Record) error
}

// recordKeeper checks every so often that Redis still holds the order
// records (keyspace.OrderRecordsKept); when it does not, it puts back every
// order changed within their lifetime, as the store has it, then marks them
// kept — unless Redis lost them again meanwhile (the mark the put-back
// began with is gone), when the next check puts them back again. A record a
// worker or gateway wrote meanwhile is safe: a final status is never
// overwritten by PENDING, and a PENDING record a resubmit made after the
// loss becomes the order's final one. Every worker checks; two putting back
// at once write the same records.
type recordKeeper struct {
	log     *slog.Logger
	store   changedOrders
	records keptRecords
	now     func() time.Time
	every   time.Duration
}

// recordsCheckEvery is how often a worker checks: one EXISTS.
const recordsCheckEvery = time.Second

// putBackBatch is how many records go to Redis in one round trip.
const putBackBatch = 500

// Run checks until ctx ends. A failed check is logged and tried again.
func (k *recordKeeper) Run(ctx context.Context) error {
	t := time.NewTicker(k.every)
	defer t.Stop()
	for {
		if err := k.check(ctx); err != nil && ctx.Err() == nil {
			k.log.Warn("order records: could not check or put them back; trying again", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// check puts the records back if Redis lost them.
func (k *recordKeeper) check(ctx context.Context) error {
	kept, err := k.records.Kept(ctx)
	if err != nil || kept {
		return err
	}
	mark, err := k.records.BeginPutBack(ctx)
	if err != nil {
		return err
	}
	start, n := time.Now(), 0
	batch := make([]orders.Record, 0, putBackBatch)
	flush := func() error {
		err := k.records.PutAll(ctx, batch)
		n, batch = n+len(batch), batch[:0]
		return err
	}
	err = k.store.ChangedSince(ctx, k.now().Add(-keyspace.RecordTTL), func(o orders.Order) error {
		if batch = append(batch, orders.RecordOf(o)); len(batch) == putBackBatch {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err == nil {
		kept, err = k.records.MarkKept(ctx, mark)
	}
	if err != nil {
		return err
	}
	if !kept {
		k.log.Warn("order records: Redis lost them again while they were put back (or another worker began); checking again",
			"records", n)
		return nil
	}
	k.log.Info("order records put back from PostgreSQL (Redis held none)", "records", n,
		"took", time.Since(start).Round(time.Millisecond))
	return nil
}
