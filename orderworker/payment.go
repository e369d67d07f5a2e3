package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"usher/internal/orders"
)

// Payment errors the order flow branches on.
var (
	// errPaymentUnavailable: the gateway did not answer usefully (timeout,
	// 5xx, outage, breaker open). Nothing is known either way: the charge
	// may have been captured all the same, so the order is not failed on
	// it before a lookup says what the gateway holds.
	errPaymentUnavailable = errors.New("payment gateway unavailable")
	// errPaymentDeclined: the gateway itself answered no for good (its
	// payment-declined problem). The order fails. No other refusal means
	// this: see try.
	errPaymentDeclined = errors.New("payment declined")
	// errPaymentNotFound: the gateway answered that it holds no payment
	// under the order's key: no money moved.
	errPaymentNotFound = errors.New("no payment under the order's key")
)

// The statuses of a payment the gateway holds.
const (
	paymentCaptured = "captured"
	paymentVoided   = "voided" // given back; the key never captures again
)

// gatewayPayment is what the gateway holds under an order's key.
type gatewayPayment struct {
	ID     string
	Status string // paymentCaptured or paymentVoided
}

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

// newPayments returns payments on the gateway at base. conns is how many
// calls may be in flight at once (one per order in hand): the client keeps
// that many idle connections to the gateway. net/http's default keeps two,
// so with hundreds of orders in flight nearly every charge dialed a new
// connection and closed it after the answer — a TCP handshake, a teardown
// and a TIME_WAIT socket per order on both ends.
func newPayments(base string, timeout time.Duration, conns int, b *breaker, counted func(string)) *payments {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = max(conns, tr.MaxIdleConns)
	tr.MaxIdleConnsPerHost = max(conns, http.DefaultMaxIdleConnsPerHost)
	return &payments{
		base:    base,
		http:    &http.Client{Timeout: timeout, Transport: tr},
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
			notePaymentCall(ctx, callOutcome(err))
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

// Lookup asks the gateway what it holds under the order's idempotency key:
// the payment (captured or voided), errPaymentNotFound when nothing was
// captured, or an error wrapping errPaymentUnavailable when the gateway
// cannot say. The gateway waits for a charge of the key still in flight
// before it answers, so "not found" means no money moved.
//
// One call, not through the breaker. The breaker exists to stop charges
// piling onto a failing gateway; a lookup is one cheap read per undecided
// order per wait, and it is the only way to learn whether a shopper was
// charged. Behind the breaker it would be refused for as long as charges
// fail, which is exactly when orders wait to be decided; counted by the
// breaker, a 404 would say nothing about whether charges work. So lookups
// neither ask the breaker nor count toward it.
func (p *payments) Lookup(ctx context.Context, orderID string) (gatewayPayment, error) {
	pay, err := p.ledger(ctx, http.MethodGet, "/v1/payments/"+url.PathEscape(orderID), orderID)
	switch {
	case err == nil:
		p.counted("lookup_found")
	case errors.Is(err, errPaymentNotFound):
		p.counted("lookup_not_found")
	default:
		p.counted("lookup_unavailable")
	}
	return pay, err
}

// voidBackoff is the wait between unanswered voids: 0.5 s, 1 s, then 2 s.
var voidBackoff = []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second}

// Void gives back the payment captured under the order's key and returns
// it, voided; errPaymentNotFound when nothing was captured. The gateway's
// void is idempotent, so an unanswered void is tried again (after 0.5 s,
// 1 s, then every 2 s) until the gateway answers or ctx ends: the caller
// bounds how long. Like Lookup it bypasses the breaker: giving money back
// is not a load to shed.
func (p *payments) Void(ctx context.Context, orderID string) (gatewayPayment, error) {
	for try := 0; ; try++ {
		if try > 0 {
			if err := p.sleep(ctx, voidBackoff[min(try-1, len(voidBackoff)-1)]); err != nil {
				return gatewayPayment{}, fmt.Errorf("void %s: %w: %w", orderID, errPaymentUnavailable, err)
			}
		}
		pay, err := p.ledger(ctx, http.MethodPost, "/v1/payments/"+url.PathEscape(orderID)+"/void", orderID)
		switch {
		case err == nil && pay.Status != paymentVoided:
			err = fmt.Errorf("%w: void answered status %q", errPaymentUnavailable, pay.Status)
		case err == nil:
			p.counted("voided")
			return pay, nil
		case errors.Is(err, errPaymentNotFound):
			return pay, err
		}
		p.counted("void_unavailable")
		if ctx.Err() != nil {
			return gatewayPayment{}, err
		}
	}
}

// ledger is one call to the gateway's ledger of the order's key (lookup or
// void). Only the gateway's own "payment-not-found" problem means nothing
// was captured: any other 404 (a proxy, a wrong route) says nothing.
func (p *payments) ledger(ctx context.Context, method, path, orderID string) (gatewayPayment, error) {
	req, err := http.NewRequestWithContext(ctx, method, p.base+path, nil)
	if err != nil {
		return gatewayPayment{}, fmt.Errorf("%w: %v", errPaymentUnavailable, err)
	}
	res, err := p.http.Do(req)
	if err != nil {
		return gatewayPayment{}, fmt.Errorf("%w: %v", errPaymentUnavailable, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	if err != nil {
		return gatewayPayment{}, fmt.Errorf("%w: read answer: %v", errPaymentUnavailable, err)
	}
	switch res.StatusCode {
	case http.StatusOK:
		var ans struct {
			PaymentID      string `json:"paymentId"`
			IdempotencyKey string `json:"idempotencyKey"`
			Status         string `json:"status"`
		}
		if err := json.Unmarshal(raw, &ans); err != nil || ans.PaymentID == "" || ans.IdempotencyKey != orderID ||
			(ans.Status != paymentCaptured && ans.Status != paymentVoided) {
			return gatewayPayment{}, fmt.Errorf("%w: not an answer about %s: %s", errPaymentUnavailable, orderID, bytes.TrimSpace(raw))
		}
		return gatewayPayment{ID: ans.PaymentID, Status: ans.Status}, nil
	case http.StatusNotFound:
		if gatewayProblem(raw, "payment-not-found") {
			return gatewayPayment{}, errPaymentNotFound
		}
	}
	return gatewayPayment{}, fmt.Errorf("%w: status %d: %s", errPaymentUnavailable, res.StatusCode, bytes.TrimSpace(raw))
}

// gatewayProblem reports whether an answer's body is the payment gateway's
// own problem document of the given type (its last path segment). A proxy,
// a load balancer or a WAF in front of the gateway answers 4xx too, in its
// own words; only the gateway's problem says what the gateway holds.
func gatewayProblem(raw []byte, slug string) bool {
	var pr struct {
		Type string `json:"type"`
	}
	return json.Unmarshal(raw, &pr) == nil && strings.HasSuffix(pr.Type, "/"+slug)
}

// try is one HTTP call.
func (p *payments) try(ctx context.Context, o orders.Order) (string, error) {
	body, _ := json.Marshal(map[string]any{"orderId": o.ID, "amount": o.Amount, "currency": "KRW"})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.base+"/v1/payments", bytes.NewReader(body))
	if err != nil {
		return "", fmt.Errorf("%w: %v", errPaymentUnavailable, err)
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
	case res.StatusCode == http.StatusPaymentRequired && gatewayProblem(raw, "payment-declined"):
		return "", fmt.Errorf("%w: %s", errPaymentDeclined, bytes.TrimSpace(raw))
	default:
		// Anything else says nothing about the money: a 409 because the
		// charge this try repeats is still in flight (it may yet capture),
		// a voided key, a 401, 403 or 404 from a proxy in front of the
		// gateway, 429, 5xx. The order is decided by what the gateway
		// holds under its key (settle's resolve), never failed on it.
		return "", fmt.Errorf("%w: status %d: %s", errPaymentUnavailable, res.StatusCode, bytes.TrimSpace(raw))
	}
}
