package main

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"
)

// errBreakerOpen: the breaker refused the call without making it.
var errBreakerOpen = errors.New("payment breaker open")

// sharedBreaker is where breakers of all workers meet (internal/paybreaker).
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
	now    func() time.Time

	mu         sync.Mutex
	sharedAt   time.Time // when sharedOpen was read (zero: never)
	sharedOpen bool
}

// sharedEvery is how long Blocked trusts its last read of the shared state.
// Every order asks Blocked before its charge: read each time, it was one
// Redis round trip an order, for a key that changes when some breaker
// opens or closes, and then stays for an open period (seconds). So another
// worker's open breaker is seen at most this late; this worker's own
// changes are seen at once (they update the copy).
const sharedEvery = 100 * time.Millisecond

// newBreaker trips after 5 consecutive failed calls, stays open for the
// open period, then lets one call through to probe. A declined payment is
// an answer, not a failure of the gateway: it does not count.
func newBreaker(log *slog.Logger, shared sharedBreaker, open time.Duration, gauge func(float64)) *breaker {
	b := &breaker{shared: shared, open: open, log: log, now: time.Now}
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
				b.remember(true)
			case gobreaker.StateClosed:
				gauge(0)
				err = shared.MarkClosed(ctx)
				b.remember(false)
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
	return b.sharedIsOpen(ctx) && b.cb.State() != gobreaker.StateHalfOpen
}

// sharedIsOpen reads the shared state, or the copy of it read less than
// sharedEvery ago. A failed read counts as closed and is not kept.
func (b *breaker) sharedIsOpen(ctx context.Context) bool {
	b.mu.Lock()
	at, open := b.sharedAt, b.sharedOpen
	b.mu.Unlock()
	if !at.IsZero() && b.now().Sub(at) < sharedEvery {
		return open
	}
	open, err := b.shared.Open(ctx)
	if err != nil {
		b.log.Warn("read shared payment breaker", "err", err)
		return false
	}
	b.remember(open)
	return open
}

// remember keeps what the shared state is now.
func (b *breaker) remember(open bool) {
	b.mu.Lock()
	b.sharedAt, b.sharedOpen = b.now(), open
	b.mu.Unlock()
}
