package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

const (
	// maxBodyBytes limits every request body (payments and admin).
	maxBodyBytes = 64 << 10
	// maxKeyLen and maxOrderIDLen bound the idempotency key and order id.
	maxKeyLen     = 200
	maxOrderIDLen = 200

	problemContentType = "application/problem+json"
	problemBase        = "https://pgsim.usher.invalid/problems/"
)

// problem is an RFC 9457 problem details object.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// Problem types: slug, title, status.
func problemBadRequest(detail string) problem {
	return problem{problemBase + "bad-request", "Bad request", http.StatusBadRequest, detail}
}

func problemTooLarge() problem {
	return problem{problemBase + "body-too-large", "Request body too large", http.StatusRequestEntityTooLarge,
		fmt.Sprintf("the request body exceeds %d bytes", maxBodyBytes)}
}

func problemUnauthorized() problem {
	return problem{problemBase + "unauthorized", "Unauthorized", http.StatusUnauthorized,
		"admin endpoints need an Authorization: Bearer <admin token> header"}
}

// server holds the HTTP handlers' dependencies.
type server struct {
	gw        *Gateway
	metrics   *Metrics
	clock     Clock
	logger    *slog.Logger
	tokenHash [sha256.Size]byte
	stop      <-chan struct{}
}

// newHandler returns pgsim's HTTP API. Closing stop ends the requests that
// capture-hang mode holds (at shutdown); nil holds them until their client
// gives up.
func newHandler(gw *Gateway, metrics *Metrics, clock Clock, adminToken string, logger *slog.Logger, stop <-chan struct{}) http.Handler {
	s := &server{
		gw:        gw,
		metrics:   metrics,
		clock:     clock,
		logger:    logger,
		tokenHash: sha256.Sum256([]byte(adminToken)),
		stop:      stop,
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/payments", methods{http.MethodPost: s.handlePayment})
	mux.HandleFunc("/v1/payments/{rest...}", s.routePayment)
	mux.Handle("/v1/admin/mode", s.requireAdmin(methods{
		http.MethodGet: s.handleGetMode,
		http.MethodPut: s.handlePutMode,
	}))
	mux.Handle("/v1/admin/charges", s.requireAdmin(methods{http.MethodGet: s.handleCharges}))
	mux.Handle("/v1/admin/reset", s.requireAdmin(methods{http.MethodPost: s.handleReset}))
	mux.Handle("/healthz", methods{http.MethodGet: handleHealthz})
	mux.Handle("/readyz", methods{http.MethodGet: handleHealthz}) // nothing to wait for: ready once it runs
	mux.Handle("/metrics", methods{http.MethodGet: s.handleMetrics})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, problem{problemBase + "not-found", "Not found", http.StatusNotFound,
			fmt.Sprintf("no route for %s", r.URL.Path)})
	})
	return mux
}

// methods dispatches on the request method and answers others with a 405
// problem. GET handlers also serve HEAD.
type methods map[string]http.HandlerFunc

func (m methods) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h, ok := m[r.Method]
	if !ok && r.Method == http.MethodHead {
		h, ok = m[http.MethodGet]
	}
	if !ok {
		allow := make([]string, 0, len(m))
		for k := range m {
			allow = append(allow, k)
		}
		slices.Sort(allow)
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeProblem(w, problem{problemBase + "method-not-allowed", "Method not allowed", http.StatusMethodNotAllowed,
			fmt.Sprintf("%s does not support %s", r.URL.Path, r.Method)})
		return
	}
	h(w, r)
}

// writeJSON writes v as JSON with the given status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil { // unreachable: only plain structs are written
		status, body = http.StatusInternalServerError, []byte(`{"error":"encoding failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// writeProblem writes an RFC 9457 problem details response.
func writeProblem(w http.ResponseWriter, p problem) {
	body, _ := json.Marshal(p) // cannot fail: strings and an int
	w.Header().Set("Content-Type", problemContentType)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(body, '\n'))
}

// readBody reads a request body of at most maxBodyBytes. On failure it
// returns the problem to answer (413 when too large, 400 otherwise).
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, *problem) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			p := problemTooLarge()
			return nil, &p
		}
		p := problemBadRequest("could not read the request body")
		return nil, &p
	}
	return body, nil
}

// decodeStrict decodes exactly one JSON value from body into v, rejecting
// unknown fields and trailing data.
func decodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return errors.New("the request body is empty")
		}
		return fmt.Errorf("invalid JSON body: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("invalid JSON body: unexpected data after the JSON object")
	}
	return nil
}

// paymentRequest is the JSON body of POST /v1/payments.
type paymentRequest struct {
	OrderID  string `json:"orderId"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

// paymentResponse is the JSON body of a successful payment.
type paymentResponse struct {
	PaymentID      string `json:"paymentId"`
	Status         string `json:"status"`
	IdempotencyKey string `json:"idempotencyKey"`
	Amount         int64  `json:"amount"`
}

// parsePaymentRequest decodes and validates a payment body. Every error it
// returns is a client error (400), with a message fit for the problem's
// detail.
func parsePaymentRequest(body []byte) (ChargeRequest, error) {
	var pr paymentRequest
	if err := decodeStrict(body, &pr); err != nil {
		return ChargeRequest{}, err
	}
	var errs []string
	switch {
	case pr.OrderID == "":
		errs = append(errs, "orderId is required")
	case len(pr.OrderID) > maxOrderIDLen:
		errs = append(errs, fmt.Sprintf("orderId must be at most %d bytes", maxOrderIDLen))
	case !printable(pr.OrderID):
		errs = append(errs, "orderId must be printable UTF-8")
	}
	if pr.Amount <= 0 {
		errs = append(errs, "amount must be a positive integer (minor units)")
	}
	if !validCurrency(pr.Currency) {
		errs = append(errs, "currency must be a three-letter upper-case ISO 4217 code such as KRW")
	}
	if len(errs) > 0 {
		return ChargeRequest{}, errors.New(strings.Join(errs, "; "))
	}
	return ChargeRequest(pr), nil
}

func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

func validCurrency(s string) bool {
	if len(s) != 3 {
		return false
	}
	for i := range len(s) {
		if s[i] < 'A' || s[i] > 'Z' {
			return false
		}
	}
	return true
}

// validKey reports whether k is a valid idempotency key: 1 to maxKeyLen
// printable ASCII characters.
func validKey(k string) bool {
	if k == "" || len(k) > maxKeyLen {
		return false
	}
	for i := range len(k) {
		if k[i] < 0x20 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// idempotencyKey returns the request's single, valid Idempotency-Key.
func idempotencyKey(h http.Header) (string, error) {
	vals := h.Values("Idempotency-Key")
	switch {
	case len(vals) == 0:
		return "", errors.New("the Idempotency-Key header is required")
	case len(vals) > 1:
		return "", errors.New("send exactly one Idempotency-Key header")
	case !validKey(vals[0]):
		return "", fmt.Errorf("the Idempotency-Key header must be 1 to %d printable ASCII characters", maxKeyLen)
	}
	return vals[0], nil
}

// handlePayment serves POST /v1/payments and records its metrics. In
// capture-hang mode the charge is recorded and then the request is held
// until its client gives up (or the server stops); the connection is then
// aborted, so no answer is ever delivered.
func (s *server) handlePayment(w http.ResponseWriter, r *http.Request) {
	start := s.clock.Now()
	o := s.payment(w, r)
	s.metrics.observe(o, s.clock.Now().Sub(start).Seconds())
	if o == outcomeUnanswered {
		select {
		case <-r.Context().Done():
		case <-s.stop:
		}
		// Abort: net/http would otherwise send an empty 200 as the handler
		// returns. ErrAbortHandler drops the connection without a stack trace.
		panic(http.ErrAbortHandler)
	}
}

func (s *server) payment(w http.ResponseWriter, r *http.Request) outcome {
	key, err := idempotencyKey(r.Header)
	if err != nil {
		writeProblem(w, problemBadRequest(err.Error()))
		return outcomeBadRequest
	}
	body, p := readBody(w, r)
	if p != nil {
		writeProblem(w, *p)
		return outcomeBadRequest
	}
	req, err := parsePaymentRequest(body)
	if err != nil {
		writeProblem(w, problemBadRequest(err.Error()))
		return outcomeBadRequest
	}

	res, err := s.gw.Charge(r.Context(), key, req)
	switch {
	case err == nil:
	case errors.Is(err, ErrOutage):
		w.Header().Set("Retry-After", "1")
		writeProblem(w, problem{problemBase + "outage", "Payment gateway unavailable", http.StatusServiceUnavailable,
			"the simulated payment gateway is in outage mode; nothing was charged"})
		return outcomeOutage
	case errors.Is(err, ErrConflict):
		writeProblem(w, problem{problemBase + "idempotency-conflict", "Idempotency key conflict", http.StatusConflict,
			"this Idempotency-Key was already used with a different request body"})
		return outcomeConflict
	case errors.Is(err, ErrVoided):
		writeProblem(w, problemVoided())
		return outcomeConflict
	case errors.Is(err, ErrKeyInUse):
		writeProblem(w, problem{problemBase + "idempotency-key-in-use", "Idempotency key in use", http.StatusConflict,
			"a charge under this Idempotency-Key is still in flight; it may yet capture"})
		return outcomeConflict
	case errors.Is(err, ErrRefused):
		writeProblem(w, problem{problemBase + "payment-declined", "Payment declined", http.StatusPaymentRequired,
			"the simulated issuer declined the payment; nothing was charged"})
		return outcomeDeclined
	case errors.Is(err, ErrCanceled):
		// The client is most likely gone; the answer is for completeness.
		writeProblem(w, problem{problemBase + "canceled", "Request canceled", http.StatusGatewayTimeout,
			"the request ended before the gateway answered; nothing was charged"})
		return outcomeTimeout
	case errors.Is(err, ErrReset):
		writeProblem(w, problem{problemBase + "reset", "Gateway reset", http.StatusServiceUnavailable,
			"the simulator was reset while this payment was in flight; nothing was charged"})
		return outcomeFailed
	default: // ErrDeclined
		writeProblem(w, problem{problemBase + "payment-failed", "Payment failed", http.StatusBadGateway,
			"simulated upstream failure; nothing was charged and the request may be retried with the same Idempotency-Key"})
		return outcomeFailed
	}

	if res.Unanswered {
		return outcomeUnanswered // handlePayment holds it: no answer
	}
	resp := paymentResponse{
		PaymentID:      res.Payment.ID,
		Status:         string(StatusCaptured),
		IdempotencyKey: key,
		Amount:         res.Payment.Request.Amount,
	}
	if res.Replayed {
		w.Header().Set("Idempotency-Replayed", "true")
		writeJSON(w, http.StatusOK, resp)
		return outcomeReplayed
	}
	writeJSON(w, http.StatusCreated, resp)
	return outcomeCaptured
}

// paymentRecord is the JSON of a payment in the ledger: the answer to
// GET /v1/payments/{key} and POST /v1/payments/{key}/void.
type paymentRecord struct {
	PaymentID      string `json:"paymentId"`
	IdempotencyKey string `json:"idempotencyKey"`
	OrderID        string `json:"orderId"`
	Amount         int64  `json:"amount"`
	Currency       string `json:"currency"`
	Status         string `json:"status"`
}

func recordOf(p Payment) paymentRecord {
	return paymentRecord{PaymentID: p.ID, IdempotencyKey: p.IdempotencyKey, OrderID: p.Request.OrderID,
		Amount: p.Request.Amount, Currency: p.Request.Currency, Status: string(p.Status)}
}

func problemVoided() problem {
	return problem{problemBase + "payment-voided", "Payment voided", http.StatusConflict,
		"the payment under this Idempotency-Key was voided; the key cannot be charged again"}
}

// handleLookup serves GET /v1/payments/{key}: the payment captured under
// the idempotency key (captured or voided), 404 when there is none. A
// charge in flight under the key is waited for, never answered 404 while
// it may still capture (see Gateway).
func (s *server) handleLookup(w http.ResponseWriter, r *http.Request) {
	s.metrics.observeLedger(opLookup, s.ledger(w, r, s.gw.Lookup))
}

// routePayment serves /v1/payments/{key} (GET: the lookup) and
// /v1/payments/{key}/void (POST: the void), reading the key from the
// escaped path segment by segment: any key a charge accepted, a "/" in it
// included (sent as %2F), can be looked up and voided. ServeMux's own
// {key} does not match a key that ends in a slash.
func (s *server) routePayment(w http.ResponseWriter, r *http.Request) {
	seg := strings.Split(strings.TrimPrefix(r.URL.EscapedPath(), "/v1/payments/"), "/")
	var h http.Handler
	switch {
	case len(seg) == 1:
		h = methods{http.MethodGet: s.handleLookup}
	case len(seg) == 2 && seg[1] == "void":
		h = methods{http.MethodPost: s.handleVoid}
	default:
		writeProblem(w, problem{problemBase + "not-found", "Not found", http.StatusNotFound,
			fmt.Sprintf("no route for %s", r.URL.Path)})
		return
	}
	key, err := url.PathUnescape(seg[0])
	if err != nil {
		writeProblem(w, problemBadRequest("the idempotency key in the path is not a valid escape"))
		return
	}
	r.SetPathValue("key", key)
	h.ServeHTTP(w, r)
}

// handleVoid serves POST /v1/payments/{key}/void: the payment, voided
// (idempotent); 404 when nothing was captured under the key.
func (s *server) handleVoid(w http.ResponseWriter, r *http.Request) {
	s.metrics.observeLedger(opVoid, s.ledger(w, r, s.gw.Void))
}

// ledger answers a lookup or a void of the key in the request's path.
func (s *server) ledger(w http.ResponseWriter, r *http.Request, op func(context.Context, string) (Payment, error)) ledgerOutcome {
	key := r.PathValue("key")
	if !validKey(key) {
		writeProblem(w, problemBadRequest(fmt.Sprintf("the idempotency key must be 1 to %d printable ASCII characters", maxKeyLen)))
		return ledgerBadRequest
	}
	p, err := op(r.Context(), key)
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, recordOf(p))
		return ledgerOK
	case errors.Is(err, ErrNotFound):
		writeProblem(w, problem{problemBase + "payment-not-found", "Payment not found", http.StatusNotFound,
			"nothing was captured under this Idempotency-Key"})
		return ledgerNotFound
	case errors.Is(err, ErrOutage):
		w.Header().Set("Retry-After", "1")
		writeProblem(w, problem{problemBase + "outage", "Payment gateway unavailable", http.StatusServiceUnavailable,
			"the simulated payment gateway is in outage mode; try again later"})
		return ledgerOutage
	default: // ErrCanceled: the client left while a charge under the key was in flight
		writeProblem(w, problem{problemBase + "canceled", "Request canceled", http.StatusGatewayTimeout,
			"the request ended while a charge under this Idempotency-Key was still in flight"})
		return ledgerCanceled
	}
}

// requireAdmin answers 401 unless the request carries the admin bearer
// token. Tokens are compared as SHA-256 digests in constant time, so
// neither their content nor their length leaks through timing.
func (s *server) requireAdmin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
		got := sha256.Sum256([]byte(token))
		match := subtle.ConstantTimeCompare(got[:], s.tokenHash[:]) == 1
		if !ok || !strings.EqualFold(scheme, "Bearer") || !match {
			w.Header().Set("WWW-Authenticate", `Bearer realm="pgsim-admin"`)
			writeProblem(w, problemUnauthorized())
			return
		}
		next.ServeHTTP(w, r)
	})
}

// modeBody is the JSON of PUT and GET /v1/admin/mode.
type modeBody struct {
	Mode   Mode   `json:"mode"`
	SlowMS *int64 `json:"slowMs,omitempty"`
}

func modeResponse(st ModeState) modeBody {
	ms := st.Slow.Milliseconds()
	return modeBody{Mode: st.Mode, SlowMS: &ms}
}

func (s *server) handleGetMode(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, modeResponse(s.gw.Mode()))
}

func (s *server) handlePutMode(w http.ResponseWriter, r *http.Request) {
	body, p := readBody(w, r)
	if p != nil {
		writeProblem(w, *p)
		return
	}
	var mb modeBody
	if err := decodeStrict(body, &mb); err != nil {
		writeProblem(w, problemBadRequest(err.Error()))
		return
	}
	var errs []string
	if !mb.Mode.Valid() {
		errs = append(errs, `mode must be "normal", "outage", "slow", "capture-hang" or "decline"`)
	}
	var slow *time.Duration
	if mb.SlowMS != nil {
		if *mb.SlowMS < 0 || *mb.SlowMS > maxConfigMS {
			errs = append(errs, fmt.Sprintf("slowMs must be between 0 and %d", maxConfigMS))
		} else {
			d := time.Duration(*mb.SlowMS) * time.Millisecond
			slow = &d
		}
	}
	if len(errs) > 0 {
		writeProblem(w, problemBadRequest(strings.Join(errs, "; ")))
		return
	}
	st := s.gw.SetMode(mb.Mode, slow)
	s.logger.Info("mode changed", "mode", string(st.Mode), "slowMs", st.Slow.Milliseconds())
	writeJSON(w, http.StatusOK, modeResponse(st))
}

// keyCharges and chargeStats are the JSON of GET /v1/admin/charges: with
// ?key=, one key's captures (0 or 1) and, when it has one, the payment's
// id and status; without, the totals and every payment in key order, so
// an auditor can match captures to PAID orders one to one (a voided
// capture is money given back and must match no PAID order).
type keyCharges struct {
	Key       string `json:"key"`
	Charges   int    `json:"charges"`
	PaymentID string `json:"paymentId,omitempty"`
	Status    string `json:"status,omitempty"`
}

type chargeStats struct {
	Total     int `json:"total"`
	Keys      int `json:"keys"`
	MaxPerKey int `json:"maxPerKey"`
	// Voided counts the captures since voided; Total - Voided is what is
	// still charged.
	Voided int `json:"voided"`
}

type chargeReport struct {
	chargeStats
	Payments []ledgerEntry `json:"payments"`
}

// ledgerEntry is one payment in GET /v1/admin/charges.
type ledgerEntry struct {
	paymentRecord
	CapturedAt time.Time  `json:"capturedAt"`
	VoidedAt   *time.Time `json:"voidedAt,omitempty"`
}

func (s *server) handleCharges(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if !q.Has("key") {
		st := s.gw.Stats()
		cs := chargeReport{chargeStats{Total: st.Total, Keys: st.Keys, MaxPerKey: st.MaxPerKey, Voided: st.Voided}, []ledgerEntry{}}
		for _, p := range s.gw.Ledger() {
			e := ledgerEntry{paymentRecord: recordOf(p), CapturedAt: p.CapturedAt}
			if p.Status == StatusVoided {
				e.VoidedAt = &p.VoidedAt
			}
			cs.Payments = append(cs.Payments, e)
		}
		writeJSON(w, http.StatusOK, cs)
		return
	}
	key := q.Get("key")
	if !validKey(key) {
		writeProblem(w, problemBadRequest(fmt.Sprintf("key must be 1 to %d printable ASCII characters", maxKeyLen)))
		return
	}
	kc := keyCharges{Key: key, Charges: s.gw.Charges(key)}
	if p, ok := s.gw.Recorded(key); ok {
		kc.PaymentID, kc.Status = p.ID, string(p.Status)
	}
	writeJSON(w, http.StatusOK, kc)
}

func (s *server) handleReset(w http.ResponseWriter, _ *http.Request) {
	s.gw.Reset()
	s.logger.Info("reset")
	w.WriteHeader(http.StatusNoContent)
}

func handleHealthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "ok")
}

func (s *server) handleMetrics(w http.ResponseWriter, _ *http.Request) {
	mode := s.gw.Mode()
	st := s.gw.Stats()
	snap := gaugeSnapshot{mode: mode.Mode, inFlight: s.gw.InFlight(), charges: st.Total, voided: st.Voided}
	w.Header().Set("Content-Type", metricsContentType)
	_ = s.metrics.write(w, snap)
}
