package orders

import (
	"context"
	"fmt"
	"strconv"
)

// outcomesKey is the hash of a queue's finished orders by final status,
// beside the queue's other keys (same hash tag).
func outcomesKey(queue string) string { return "usher:{" + queue + "}:orders" }

// CountOutcome adds one finished order of queue with the given final
// status to the queue's outcome counts (HINCRBY). The counts are for
// dashboards: the order worker counts after finishing an order and before
// acknowledging it, so an order finished again after a crash in between is
// counted twice. PostgreSQL remains the truth.
func (r *Records) CountOutcome(ctx context.Context, queue string, status Status) error {
	if err := r.rdb.HIncrBy(ctx, outcomesKey(queue), string(status), 1).Err(); err != nil {
		return fmt.Errorf("count order outcome %s: %w", queue, err)
	}
	return nil
}

// Outcomes returns queue's finished orders by final status (only the
// statuses seen so far).
func (r *Records) Outcomes(ctx context.Context, queue string) (map[Status]int64, error) {
	v, err := r.rdb.HGetAll(ctx, outcomesKey(queue)).Result()
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
