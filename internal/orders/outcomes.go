package orders

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"usher/internal/keyspace"
	"usher/internal/script"
)

// countScript (count_outcome.lua) counts a finished order once.
// See count_outcome.lua for its keys, arguments and reply.
var countScript = script.New(countLua)

//go:embed count_outcome.lua
var countLua string

// CountOutcome adds the finished order id of queue, with its final status,
// to the queue's outcome counts, once per order (see countScript). The
// counts are for dashboards; PostgreSQL remains the truth.
func (r *Records) CountOutcome(ctx context.Context, queue, id string, status Status) error {
	keys, args := r.countCall(queue, id, status)
	if err := countScript.Run(ctx, r.rdb, keys, args...).Err(); err != nil {
		return fmt.Errorf("count order outcome %s: %w", id, err)
	}
	return nil
}

// countCall is countScript's keys and arguments for order id of queue,
// finished with status.
func (r *Records) countCall(queue, id string, status Status) ([]string, []any) {
	k := keyspace.Of(queue)
	return []string{k.Outcomes(), k.Counted(id)}, []any{string(status), int(r.ttl.Seconds())}
}

// PutFinal writes the record of a final order as the store has it (Put)
// and counts its outcome (CountOutcome) in one round trip: the two come
// back to back at the end of every order, and pipelined they cost one
// write and one read on each end instead of two. (The record and the
// queue's counts live under different hash tags, so they cannot share a
// script; on a cluster the pipeline goes to each key's node.) It returns
// the record's error as err and the count's apart as countErr: the counts
// are for dashboards, a failed count is not a failed order.
func (r *Records) PutFinal(ctx context.Context, rec Record) (countErr, err error) {
	putKeys, putArgs := []string{recordKey(rec.ID)}, putArgsOf(rec, r.ttl)
	countKeys, countArgs := r.countCall(rec.Queue, rec.ID, rec.Status)
	var put, count *redis.Cmd
	// The pipeline's own error is one of its commands'; each is read below.
	_, _ = r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		put = putScript.EvalSha(ctx, p, putKeys, putArgs...)
		count = countScript.EvalSha(ctx, p, countKeys, countArgs...)
		return nil
	})
	// A Redis that does not hold a script yet (restarted, flushed) is sent
	// its text, as Script.Run does.
	if redis.HasErrorPrefix(put.Err(), "NOSCRIPT") {
		put = putScript.Eval(ctx, r.rdb, putKeys, putArgs...)
	}
	if redis.HasErrorPrefix(count.Err(), "NOSCRIPT") {
		count = countScript.Eval(ctx, r.rdb, countKeys, countArgs...)
	}
	if err := count.Err(); err != nil {
		countErr = fmt.Errorf("count order outcome %s: %w", rec.ID, err)
	}
	if err := put.Err(); err != nil {
		return countErr, fmt.Errorf("put order record %s: %w", rec.ID, err)
	}
	return countErr, nil
}

// Outcomes returns queue's finished orders by final status (only the
// statuses seen so far).
func (r *Records) Outcomes(ctx context.Context, queue string) (map[Status]int64, error) {
	v, err := r.rdb.HGetAll(ctx, keyspace.Of(queue).Outcomes()).Result()
	if err != nil {
		return nil, fmt.Errorf("order outcomes %s: %w", queue, err)
	}
	out := make(map[Status]int64, len(v))
	for k, s := range v {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("order outcomes %s: %s = %q", queue, k, s)
		}
		out[Status(k)] = n
	}
	return out, nil
}
