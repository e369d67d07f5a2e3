// Package paybreaker shares the payment circuit breaker's state through
// Redis, so that back-pressure from the payment gateway reaches the front
// of the line.
//
// Each order worker runs its own sony/gobreaker breaker around its payment
// calls. When one opens it marks the shared state open for the breaker's
// open period; while it is marked, every order worker defers its payments
// (the orders wait, redelivered with a delay) and the admitter admits
// nobody. The mark expires by itself, so a worker that dies while its
// breaker is open cannot stop admission for longer than one open period.
package paybreaker

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"usher/internal/keyspace"
)

// Key is the Redis key of the shared state: present while the payment
// breaker is open.
const Key = keyspace.Breaker

// Shared reads and writes the shared breaker state.
type Shared struct {
	rdb redis.UniversalClient
}

// New returns the shared state on rdb.
func New(rdb redis.UniversalClient) *Shared { return &Shared{rdb: rdb} }

// MarkOpen records that a breaker opened, for the given open period.
func (s *Shared) MarkOpen(ctx context.Context, period time.Duration) error {
	if err := s.rdb.Set(ctx, Key, "open", max(period, time.Millisecond)).Err(); err != nil {
		return fmt.Errorf("mark payment breaker open: %w", err)
	}
	return nil
}

// MarkClosed records that a breaker closed again: the gateway answers.
func (s *Shared) MarkClosed(ctx context.Context) error {
	if err := s.rdb.Del(ctx, Key).Err(); err != nil {
		return fmt.Errorf("mark payment breaker closed: %w", err)
	}
	return nil
}

// Open reports whether some worker's breaker is open.
func (s *Shared) Open(ctx context.Context) (bool, error) {
	n, err := s.rdb.Exists(ctx, Key).Result()
	if err != nil {
		return false, fmt.Errorf("read payment breaker: %w", err)
	}
	return n == 1, nil
}
