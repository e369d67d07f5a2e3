package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// maxLatency caps a single drawn latency so a huge log-normal draw cannot
// stall a request for hours.
const maxLatency = time.Hour

// GatewayError is the type of the gateway's sentinel errors. They are
// constants so the package keeps no mutable globals; compare with errors.Is.
type GatewayError string

func (e GatewayError) Error() string { return string(e) }

// Errors returned by Gateway.Charge. The HTTP layer maps each to a status.
const (
	// ErrOutage means the gateway is in outage mode (HTTP 503).
	ErrOutage GatewayError = "payment gateway outage"
	// ErrConflict means the idempotency key was used with a different
	// request (HTTP 409).
	ErrConflict GatewayError = "idempotency key reused with a different request"
	// ErrDeclined is a simulated upstream failure; nothing was charged
	// (HTTP 502).
	ErrDeclined GatewayError = "simulated payment failure"
	// ErrCanceled means the caller's context ended before the gateway
	// answered; nothing was charged.
	ErrCanceled GatewayError = "payment canceled before the gateway answered"
	// ErrReset means Reset ran while the charge was in flight; nothing was
	// charged (HTTP 503).
	ErrReset GatewayError = "gateway reset while the payment was in flight"
	// ErrVoided means the key's capture was voided: the key never captures
	// again (HTTP 409).
	ErrVoided GatewayError = "the payment under this idempotency key was voided"
	// ErrNotFound means no capture is recorded under the key (HTTP 404).
	ErrNotFound GatewayError = "no payment under this idempotency key"
	// ErrRefused is a payment the issuer declined (decline mode): nothing
	// was charged, and the gateway says so for good (HTTP 402).
	ErrRefused GatewayError = "payment declined by the issuer"
	// ErrKeyInUse means a charge under the key is still in flight and the
	// gateway answers at once rather than wait for it (KeyInUseConflict,
	// HTTP 409): the charge in flight may still capture.
	ErrKeyInUse GatewayError = "a charge under this idempotency key is in flight"
)

// KeyInUse is what the gateway does with a charge whose key has a charge
// in flight, and with a charge whose client stops waiting.
type KeyInUse string

// The ways to treat a key in use.
const (
	// KeyInUseWait: the second charge waits for the first and shares its
	// payment; a charge whose client gives up during the latency is
	// dropped uncaptured (a retry may capture it later).
	KeyInUseWait KeyInUse = "wait"
	// KeyInUseConflict, as Stripe does: the second charge is answered 409
	// (idempotency-key-in-use) at once, and a charge once begun runs to
	// its end whether or not its client still waits — its capture lands
	// after the client, timed out, has moved on.
	KeyInUseConflict KeyInUse = "conflict"
)

// Valid reports whether k is one of the known ways.
func (k KeyInUse) Valid() bool { return k == KeyInUseWait || k == KeyInUseConflict }

// Mode is the gateway's behaviour: normal, outage, slow, capture-hang or
// decline.
type Mode string

// The gateway modes.
const (
	// ModeNormal draws latency from the log-normal model.
	ModeNormal Mode = "normal"
	// ModeOutage answers every payment, lookup and void with ErrOutage at
	// once: the whole gateway is down.
	ModeOutage Mode = "outage"
	// ModeSlow gives every payment the configured slow latency.
	ModeSlow Mode = "slow"
	// ModeCaptureHang captures and records every payment as normal mode
	// does (a replay too), but its answer is never delivered: the HTTP
	// handler holds the request until the client gives up. Lookups and
	// voids still answer. It models the worst failure of a real PG: the
	// money moved and nobody was told.
	ModeCaptureHang Mode = "capture-hang"
	// ModeDecline declines every new charge after its latency (ErrRefused,
	// nothing captured), as an issuer refusing every card would. A key
	// captured before still replays; lookups and voids answer.
	ModeDecline Mode = "decline"
)

// Modes lists every mode, in the order the metrics show them.
func Modes() []Mode { return []Mode{ModeNormal, ModeOutage, ModeSlow, ModeCaptureHang, ModeDecline} }

// Valid reports whether m is one of the known modes.
func (m Mode) Valid() bool {
	return m == ModeNormal || m == ModeOutage || m == ModeSlow || m == ModeCaptureHang || m == ModeDecline
}

// ModeState is the current mode and the latency slow mode uses.
type ModeState struct {
	Mode Mode
	Slow time.Duration
}

// Clock abstracts time so tests can control waiting.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// Sleep waits for d or until ctx ends, returning ctx's error in the
	// latter case.
	Sleep(ctx context.Context, d time.Duration) error
}

// realClock is the wall clock.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ChargeRequest is a validated payment request. Two requests with the same
// idempotency key must be equal (==) or the second is a conflict.
type ChargeRequest struct {
	OrderID  string
	Amount   int64
	Currency string
}

// PaymentStatus is where a captured payment stands: captured, or voided
// (the money given back; the key never captures again).
type PaymentStatus string

// The payment statuses.
const (
	StatusCaptured PaymentStatus = "captured"
	StatusVoided   PaymentStatus = "voided"
)

// Payment is a captured charge, voided or not.
type Payment struct {
	ID             string
	IdempotencyKey string
	Request        ChargeRequest
	Status         PaymentStatus
	CapturedAt     time.Time
	VoidedAt       time.Time // zero unless voided
}

// ChargeResult is the answer to a successful Charge.
type ChargeResult struct {
	Payment Payment
	// Replayed is true when the key had already been captured (or was
	// captured by a concurrent request this one joined): no new charge.
	Replayed bool
	// Unanswered is true in capture-hang mode: the charge is recorded, and
	// its answer must never reach the client.
	Unanswered bool
}

// Stats summarises captured charges across all keys.
type Stats struct {
	Total     int // captures ever made (voided ones included)
	Keys      int // keys with a capture
	MaxPerKey int // the most captures under one key: 1, or 0 with none
	Voided    int // captures since voided
}

// GatewayOptions configures a Gateway.
type GatewayOptions struct {
	LatencyMean time.Duration
	LatencyTail float64
	FailureRate float64
	SlowLatency time.Duration
	// KeyInUse is how a charge meets another in flight under its key
	// (default KeyInUseWait).
	KeyInUse KeyInUse
	Clock    Clock
	Rand     *rand.Rand
}

// entry is the state of one idempotency key. It is in flight until done is
// closed; it is then either captured (and stays in the map forever, voided
// or not) or was removed from the map (failure, cancellation), so a retry
// starts afresh.
type entry struct {
	req      ChargeRequest
	done     chan struct{}
	captured bool
	payment  Payment
}

// Gateway is the simulated payment gateway. It is safe for concurrent use.
//
// Idempotency: the first request for a key becomes its leader and waits out
// the simulated latency; concurrent requests with the same key and body
// wait for the leader and then share its payment, so a key is charged at
// most once. A captured key is replayed (same payment id) forever, until
// Reset.
//
// In normal and slow mode a charge is recorded only when the gateway
// actually answers: if the caller's context ends during the latency (the
// client gave up, as with a client read timeout in slow mode), the charge
// is dropped and a retry with the same key may capture it later. This
// models a PG that only captures what it confirms, and keeps the "never
// charged twice" invariant checkable from the outside. Capture-hang mode is
// the other case: it captures, then never answers.
//
// With KeyInUseConflict the gateway behaves as Stripe's does instead: a
// request whose key has a charge in flight is answered ErrKeyInUse at
// once, and a leader's charge runs to its end after its client left — so
// a client that timed out and retried is told 409 while the capture it
// started may still land.
//
// Lookup and Void read and change the ledger under a key. Neither answers
// for a key whose charge is still in flight: both wait for that charge to
// end (captured, or dropped so the key is unknown), as long as their own
// context lasts. So a lookup never answers "not found" for a charge that
// may still capture — the answer a caller deciding to fail an order needs.
type Gateway struct {
	clock       Clock
	mean        time.Duration
	tail        float64
	failureRate float64
	defaultSlow time.Duration
	keyInUse    KeyInUse
	inFlight    atomic.Int64

	mu       sync.Mutex // guards everything below, including rng
	rng      *rand.Rand
	mode     Mode
	slow     time.Duration
	payments map[string]*entry
	charges  map[string]int
	voided   int
	ids      map[string]struct{}
}

// NewGateway returns a gateway in normal mode with no charges.
func NewGateway(opts GatewayOptions) *Gateway {
	clock := opts.Clock
	if clock == nil {
		clock = realClock{}
	}
	rng := opts.Rand
	if rng == nil {
		rng = rand.New(rand.NewPCG(1, 1))
	}
	g := &Gateway{
		clock:       clock,
		mean:        opts.LatencyMean,
		tail:        opts.LatencyTail,
		failureRate: opts.FailureRate,
		defaultSlow: opts.SlowLatency,
		keyInUse:    opts.KeyInUse,
		rng:         rng,
	}
	if g.keyInUse == "" {
		g.keyInUse = KeyInUseWait
	}
	g.resetLocked()
	return g
}

func (g *Gateway) resetLocked() {
	g.mode = ModeNormal
	g.slow = g.defaultSlow
	g.payments = make(map[string]*entry)
	g.charges = make(map[string]int)
	g.voided = 0
	g.ids = make(map[string]struct{})
}

// Charge charges req once under the idempotency key. See Gateway for the
// semantics. Errors: ErrOutage, ErrConflict, ErrVoided, ErrDeclined,
// ErrRefused, ErrKeyInUse, ErrReset, or ErrCanceled (wrapping the context
// error).
func (g *Gateway) Charge(ctx context.Context, key string, req ChargeRequest) (ChargeResult, error) {
	g.inFlight.Add(1)
	defer g.inFlight.Add(-1)

	for {
		g.mu.Lock()
		if g.mode == ModeOutage {
			g.mu.Unlock()
			return ChargeResult{}, ErrOutage
		}
		e, ok := g.payments[key]
		switch {
		case ok && e.req != req:
			g.mu.Unlock()
			return ChargeResult{}, ErrConflict

		case ok && e.captured && e.payment.Status == StatusVoided:
			g.mu.Unlock()
			return ChargeResult{}, ErrVoided

		case ok && e.captured:
			// Replay: still pays the latency a real round trip would.
			wait := g.latencyLocked()
			p := e.payment
			g.mu.Unlock()
			if err := g.clock.Sleep(ctx, wait); err != nil {
				return ChargeResult{}, canceled(err)
			}
			return ChargeResult{Payment: p, Replayed: true, Unanswered: g.Mode().Mode == ModeCaptureHang}, nil

		case ok && g.keyInUse == KeyInUseConflict:
			g.mu.Unlock()
			return ChargeResult{}, ErrKeyInUse

		case ok:
			// In flight: join the leader.
			g.mu.Unlock()
			select {
			case <-e.done:
			case <-ctx.Done():
				return ChargeResult{}, canceled(ctx.Err())
			}
			g.mu.Lock()
			if g.payments[key] == e && e.captured {
				p, hang := e.payment, g.mode == ModeCaptureHang
				g.mu.Unlock()
				if p.Status == StatusVoided {
					return ChargeResult{}, ErrVoided
				}
				return ChargeResult{Payment: p, Replayed: true, Unanswered: hang}, nil
			}
			g.mu.Unlock()
			continue // the leader failed or gave up: start over

		default:
			e = &entry{req: req, done: make(chan struct{})}
			g.payments[key] = e
			wait := g.latencyLocked()
			fail := g.rng.Float64() < g.failureRate
			refuse := g.mode == ModeDecline
			g.mu.Unlock()
			if g.keyInUse == KeyInUseConflict {
				ctx = context.WithoutCancel(ctx) // begun, it ends whoever waits
			}
			return g.lead(ctx, key, e, wait, fail, refuse)
		}
	}
}

// lead waits out the latency for the key's first request and settles it:
// failed (fail), declined (refuse) or captured.
func (g *Gateway) lead(ctx context.Context, key string, e *entry, wait time.Duration, fail, refuse bool) (ChargeResult, error) {
	sleepErr := g.clock.Sleep(ctx, wait)

	g.mu.Lock()
	defer g.mu.Unlock()
	defer close(e.done)

	if g.payments[key] != e {
		return ChargeResult{}, ErrReset
	}
	if sleepErr == nil {
		sleepErr = ctx.Err()
	}
	if sleepErr != nil {
		delete(g.payments, key)
		return ChargeResult{}, canceled(sleepErr)
	}
	if fail {
		delete(g.payments, key)
		return ChargeResult{}, ErrDeclined
	}
	if refuse {
		delete(g.payments, key)
		return ChargeResult{}, ErrRefused
	}
	e.captured = true
	e.payment = Payment{ID: g.newPaymentIDLocked(), IdempotencyKey: key, Request: e.req,
		Status: StatusCaptured, CapturedAt: g.clock.Now()}
	g.charges[key]++
	return ChargeResult{Payment: e.payment, Unanswered: g.mode == ModeCaptureHang}, nil
}

// Lookup returns the payment captured under key, voided or not. A charge
// in flight under key is waited for (see Gateway). Errors: ErrOutage,
// ErrNotFound, or ErrCanceled when ctx ends first.
func (g *Gateway) Lookup(ctx context.Context, key string) (Payment, error) {
	return g.settled(ctx, key, func(e *entry) Payment { return e.payment })
}

// Void gives back the payment captured under key and returns it, voided.
// Voiding is idempotent: a voided payment is returned as it stands. Once
// voided, the key never captures again (Charge answers ErrVoided). A charge
// in flight under key is waited for first (see Gateway). Errors: ErrOutage,
// ErrNotFound, or ErrCanceled when ctx ends first.
func (g *Gateway) Void(ctx context.Context, key string) (Payment, error) {
	return g.settled(ctx, key, func(e *entry) Payment {
		if e.payment.Status != StatusVoided {
			e.payment.Status, e.payment.VoidedAt = StatusVoided, g.clock.Now()
			g.voided++
		}
		return e.payment
	})
}

// settled waits until no charge is in flight under key and then, with g.mu
// held, applies f to its captured entry.
func (g *Gateway) settled(ctx context.Context, key string, f func(*entry) Payment) (Payment, error) {
	for {
		g.mu.Lock()
		if g.mode == ModeOutage {
			g.mu.Unlock()
			return Payment{}, ErrOutage
		}
		e, ok := g.payments[key]
		switch {
		case !ok:
			g.mu.Unlock()
			return Payment{}, ErrNotFound
		case e.captured:
			p := f(e)
			g.mu.Unlock()
			return p, nil
		}
		g.mu.Unlock()
		select {
		case <-e.done: // captured, or dropped: look again
		case <-ctx.Done():
			return Payment{}, canceled(ctx.Err())
		}
	}
}

func canceled(err error) error {
	return fmt.Errorf("%w: %w", ErrCanceled, err)
}

// latencyLocked returns the latency of the next answer. g.mu must be held.
func (g *Gateway) latencyLocked() time.Duration {
	if g.mode == ModeSlow {
		return g.slow
	}
	return drawLatency(g.rng, g.mean, g.tail)
}

// newPaymentIDLocked returns a fresh, unique payment id. g.mu must be held.
func (g *Gateway) newPaymentIDLocked() string {
	for {
		id := fmt.Sprintf("pay_%016x%08x", g.rng.Uint64(), g.rng.Uint32())
		if _, dup := g.ids[id]; !dup {
			g.ids[id] = struct{}{}
			return id
		}
	}
}

// drawLatency draws one latency from a log-normal distribution whose mean
// is mean and whose shape (the sigma of the underlying normal) is sigma:
// exp(mu + sigma*Z) with mu = ln(mean) - sigma²/2, so E[latency] = mean and
// the distribution has a long right tail. sigma <= 0 gives exactly mean;
// mean <= 0 gives 0. Draws are capped at maxLatency.
func drawLatency(r *rand.Rand, mean time.Duration, sigma float64) time.Duration {
	if mean <= 0 {
		return 0
	}
	if sigma <= 0 {
		return mean
	}
	mu := math.Log(float64(mean)) - sigma*sigma/2
	x := math.Exp(mu + sigma*r.NormFloat64())
	if math.IsNaN(x) || x >= float64(maxLatency) {
		return maxLatency
	}
	return time.Duration(x)
}

// SetMode switches the mode; a non-nil slow also sets slow mode's latency.
func (g *Gateway) SetMode(m Mode, slow *time.Duration) ModeState {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.mode = m
	if slow != nil {
		g.slow = *slow
	}
	return ModeState{Mode: g.mode, Slow: g.slow}
}

// Mode returns the current mode.
func (g *Gateway) Mode() ModeState {
	g.mu.Lock()
	defer g.mu.Unlock()
	return ModeState{Mode: g.mode, Slow: g.slow}
}

// Charges returns how many charges were captured under key (0 or 1).
func (g *Gateway) Charges(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.charges[key]
}

// Recorded returns the payment captured under key, voided or not, as it
// stands now: it neither waits for a charge in flight nor minds the mode.
func (g *Gateway) Recorded(key string) (Payment, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if e, ok := g.payments[key]; ok && e.captured {
		return e.payment, true
	}
	return Payment{}, false
}

// Ledger returns every captured payment, voided or not, in key order.
func (g *Gateway) Ledger() []Payment {
	g.mu.Lock()
	out := make([]Payment, 0, len(g.charges))
	for _, e := range g.payments {
		if e.captured {
			out = append(out, e.payment)
		}
	}
	g.mu.Unlock()
	slices.SortFunc(out, func(a, b Payment) int { return strings.Compare(a.IdempotencyKey, b.IdempotencyKey) })
	return out
}

// Stats returns totals over all captured charges.
func (g *Gateway) Stats() Stats {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := Stats{Keys: len(g.charges), Voided: g.voided}
	for _, n := range g.charges {
		s.Total += n
		s.MaxPerKey = max(s.MaxPerKey, n)
	}
	return s
}

// InFlight returns how many Charge calls are currently running.
func (g *Gateway) InFlight() int {
	return int(g.inFlight.Load())
}

// Reset forgets every payment and charge and returns to normal mode with
// the configured slow latency. Charges in flight during Reset end with
// ErrReset and are not recorded.
func (g *Gateway) Reset() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.resetLocked()
}
