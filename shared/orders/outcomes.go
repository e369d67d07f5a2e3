package orders

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"usher/shared/keyspace"
)

// countScript counts a finished order once.
//
// KEYS: the queue's outcome hash, the order's counted marker (both under
// the queue's hash tag). ARGV: status, marker TTL in seconds.
// Invariant: an order is counted at most once while its marker lives (a
// day), however often it is finished again: a redelivery, a duplicate
// request past the stream's dedup window.
var countScript = redis.NewScript(`
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'EX', tonumber(ARGV[2])) then
  redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
  return 1
end
return 0
`)

// CountOutcome adds the finished order id of queue, with its final status,
// to the queue's outcome counts, once per order (see countScript). The
// counts are for dashboards; PostgreSQL remains the truth.
func (r *Records) CountOutcome(ctx context.Context, queue, id string, status Status) error {
	k := keyspace.Of(queue)
	keys := []string{k.Outcomes(), k.Counted(id)}
	if err := countScript.Run(ctx, r.rdb, keys, string(status), int(r.ttl.Seconds())).Err(); err != nil {
		return fmt.Errorf("count order outcome %s: %w", id, err)
	}
	return nil
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
