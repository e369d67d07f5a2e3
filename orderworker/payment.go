package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"usher/shared/orders"
)

// Payment errors the order flow branches on.
var (
	// errPaymentUnavailable: the gateway did not answer usefully (timeout,
	// 5xx, outage, breaker open). Nothing is known to be charged; the
	// order waits and is tried again with the same idempotency key.
	errPaymentUnavailable = errors.New("payment gateway unavailable")
	// errPaymentDeclined: the gateway answered no for good. The order fails.
	errPaymentDeclined = errors.New("payment declined")
)

// backoff is the wait before the second and third try (the seeds' 0.5 s
// then 1 s).
var backoff = []time.Duration{500 * time.Millisecond, time.Second}

// payments charges orders at the payment gateway over HTTP.
type payments struct {
	base    string
	http    *http.Client
	breaker *breaker
	sleep   func(ctx context.Context, d time.Duration) error
	counted func(outcome string)
	// timed observes each HTTP call to the gateway: its outcome
	// (ok, unavailable, declined) and how long it took.
	timed func(outcome string, d time.Duration)
}

func newPayments(base string, timeout time.Duration, b *breaker, counted func(string)) *payments {
	return &payments{
		base:    base,
		http:    &http.Client{Timeout: timeout},
		breaker: b,
		sleep:   sleepCtx,
		counted: counted,
		timed:   func(string, time.Duration) {},
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Charge charges the order once, whatever happens: up to three tries, each
// through the breaker, all with the order id as the Idempotency-Key, so a
// retry after a lost answer is the same charge. It returns the payment id,
// or an error wrapping errPaymentUnavailable or errPaymentDeclined.
func (p *payments) Charge(ctx context.Context, o orders.Order) (string, error) {
	var last error
	for try := 0; try <= len(backoff); try++ {
		if try > 0 {
			if err := p.sleep(ctx, backoff[try-1]); err != nil {
				return "", err
			}
		}
		id, err := p.breaker.Execute(func() (string, error) {
			start := time.Now()
			id, err := p.try(ctx, o)
			p.timed(callOutcome(err), time.Since(start))
			return id, err
		})
		switch {
		case err == nil:
			p.counted("captured")
			return id, nil
		case errors.Is(err, errBreakerOpen):
			p.counted("breaker_open")
			return "", err // no point in trying again now
		case errors.Is(err, errPaymentDeclined):
			p.counted("declined")
			return "", err
		case ctx.Err() != nil:
			return "", ctx.Err()
		}
		p.counted("unavailable")
		last = err
	}
	return "", last
}

// callOutcome names the result of one HTTP call, as a metric label.
func callOutcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, errPaymentDeclined):
		return "declined"
	}
	return "unavailable"
}

// try is one HTTP call.
func (p *payments) try(ctx context.Context, o orders.Order) (string, error) {
	body, _ := json.Marshal(map[string]any{"orderId": o.ID, "amount": o.Amount, "currency": "KRW"})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.base+"/v1/payments", bytes.NewReader(body))
	if err != nil {
		return "", fmt.Errorf("%w: %v", errPaymentDeclined, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", o.ID)
	res, err := p.http.Do(req)
	if err != nil {
		return "", fmt.Errorf("%w: %v", errPaymentUnavailable, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	if err != nil {
		return "", fmt.Errorf("%w: read answer: %v", errPaymentUnavailable, err)
	}
	switch {
	case res.StatusCode == http.StatusOK || res.StatusCode == http.StatusCreated:
		var ans struct {
			PaymentID string `json:"paymentId"`
		}
		if err := json.Unmarshal(raw, &ans); err != nil || ans.PaymentID == "" {
			return "", fmt.Errorf("%w: answer without a payment id", errPaymentUnavailable)
		}
		return ans.PaymentID, nil
	case res.StatusCode == http.StatusTooManyRequests || res.StatusCode >= 500:
		return "", fmt.Errorf("%w: status %d", errPaymentUnavailable, res.StatusCode)
	default:
		// 4xx: the gateway understood and refused (a conflicting key, a
		// request it cannot take). Retrying would get the same answer.
		return "", fmt.Errorf("%w: status %d: %s", errPaymentDeclined, res.StatusCode, bytes.TrimSpace(raw))
	}
}
