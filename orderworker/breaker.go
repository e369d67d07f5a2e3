package main

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/sony/gobreaker/v2"
)

// errBreakerOpen: the breaker refused the call without making it.
var errBreakerOpen = errors.New("payment breaker open")

// sharedBreaker is where breakers of all workers meet (shared/paybreaker).
type sharedBreaker interface {
	MarkOpen(ctx context.Context, period time.Duration) error
	MarkClosed(ctx context.Context) error
	Open(ctx context.Context) (bool, error)
}

// breaker is this worker's circuit breaker around charges, with its open
// state shared: when it opens, every worker defers payments and the
// admitter pauses admission for the open period. Lookups and voids do not
// go through it, neither asking it nor counting toward it: they are how an
// undecided order learns whether its shopper was charged (payments.Lookup).
type breaker struct {
	cb     *gobreaker.CircuitBreaker[string]
	shared sharedBreaker
	open   time.Duration
	log    *slog.Logger
}

// newBreaker trips after 5 consecutive failed calls, stays open for the
// open period, then lets one call through to probe. A declined payment is
// an answer, not a failure of the gateway: it does not count.
func newBreaker(log *slog.Logger, shared sharedBreaker, open time.Duration, gauge func(float64)) *breaker {
	b := &breaker{shared: shared, open: open, log: log}
	b.cb = gobreaker.NewCircuitBreaker[string](gobreaker.Settings{
		Name:        "payment",
		MaxRequests: 1,
		Timeout:     open,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= 5 },
		IsExcluded: func(err error) bool {
			return errors.Is(err, errPaymentDeclined) || errors.Is(err, context.Canceled)
		},
		OnStateChange: func(_ string, from, to gobreaker.State) {
			log.Warn("payment breaker", "from", from.String(), "to", to.String())
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			var err error
			switch to {
			case gobreaker.StateOpen:
				gauge(1)
				err = shared.MarkOpen(ctx, open)
			case gobreaker.StateClosed:
				gauge(0)
				err = shared.MarkClosed(ctx)
			}
			if err != nil {
				log.Error("share payment breaker state", "err", err)
			}
		},
	})
	return b
}

// Execute runs call unless the breaker is open (errBreakerOpen).
func (b *breaker) Execute(call func() (string, error)) (string, error) {
	id, err := b.cb.Execute(call)
	if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
		return "", errBreakerOpen
	}
	return id, err
}

// Blocked reports whether payments should wait: this worker's breaker is
// open, or another worker's is (the shared state).
func (b *breaker) Blocked(ctx context.Context) bool {
	if b.cb.State() == gobreaker.StateOpen {
		return true
	}
	open, err := b.shared.Open(ctx)
	if err != nil {
		b.log.Warn("read shared payment breaker", "err", err)
		return false
	}
	return open && b.cb.State() != gobreaker.StateHalfOpen
}
