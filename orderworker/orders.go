package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"usher/internal/catalog"
	"usher/internal/event"
	"usher/internal/orders"
	"usher/internal/waitqueue"
)

// orderStore is the part of the PostgreSQL store the worker uses.
type orderStore interface {
	Place(ctx context.Context, o orders.Order) (orders.Order, error)
	Reject(ctx context.Context, o orders.Order, reason string) (orders.Order, error)
	Get(ctx context.Context, id string) (orders.Order, bool, error)
	Pay(ctx context.Context, id, paymentID string) (orders.Order, error)
	Fail(ctx context.Context, id, reason string) (orders.Order, error)
}

// recordWriter rewrites the Redis order records from the store and counts
// finished orders per queue for the ops dashboard (PutFinal: the final
// record and the count in one round trip).
type recordWriter interface {
	Put(ctx context.Context, rec orders.Record) error
	PutFinal(ctx context.Context, rec orders.Record) (countErr, err error)
}

// slots redeems tokens and frees admission slots in the waiting line: a
// claims.Claims, the part of the line the order worker's Redis user
// changes.
type slots interface {
	RedeemRequest(ctx context.Context, q string, seq uint64, r waitqueue.Request, holdUntil time.Time) (waitqueue.Redemption, uint64, error)
	Release(ctx context.Context, q string, seq uint64, orderID string) (bool, error)
	Placed(ctx context.Context, q string, seq uint64, orderID string, l waitqueue.StockLevel) error
	SetStock(ctx context.Context, q string, only bool, levels ...waitqueue.StockLevel) error
	CountBought(ctx context.Context, q string, seq uint64, orderID, user string, quantity int) (bool, error)
}

// queueCatalog is the part of the catalog the worker reads.
type queueCatalog interface {
	Get(name string) (catalog.Config, bool)
}

// publisher is the part of JetStream the worker publishes with.
type publisher interface {
	Publish(ctx context.Context, subj string, data []byte, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error)
}

// payer charges an order, and asks the payment gateway what it holds
// under the order's idempotency key (Lookup) or gives that back (Void).
type payer interface {
	Charge(ctx context.Context, o orders.Order) (string, error)
	Lookup(ctx context.Context, orderID string) (gatewayPayment, error)
	Void(ctx context.Context, orderID string) (gatewayPayment, error)
}

// hooks let tests stop the worker at its crash points: a hook's error makes
// the worker's run return at once, leaving the message unacknowledged.
type hooks struct {
	afterRedeem func(orderID string) error // token redeemed, no order row yet
	afterPlace  func(orderID string) error // transaction 1 committed
	afterPay    func(orderID string) error // the gateway charged, transaction 2 not run
	beforeAck   func(orderID string) error // everything done but the ack
	// admissions, when set, answers in place of USHER_ADMISSIONS: the
	// benchmark's baseline, the order path without the stream's read.
	admissions admissionRecord
}

// hookError is a test hook's verdict: the worker stops as if it crashed.
type hookError struct{ err error }

func (h hookError) Error() string { return h.err.Error() }

func (h hooks) call(f func(string) error, id string) error {
	if f == nil {
		return nil
	}
	if err := f(id); err != nil {
		return hookError{err}
	}
	return nil
}

// retryLater asks for the message to come back after a delay: the order is
// waiting for the payment gateway, or for its admission to reach the line.
type retryLater struct {
	after time.Duration
	// moment: what the order waits for is normally a moment away — its
	// admission, which the follower applies to the line a few
	// milliseconds after the admitter announced it — not trouble on the
	// order path, so the adaptive admission is not told to cut for it.
	moment bool
}

func (r retryLater) Error() string {
	if r.moment {
		return fmt.Sprintf("the order's admission is not in the line yet; retry in %v", r.after)
	}
	return fmt.Sprintf("payment gateway unavailable; retry in %v", r.after)
}

// errPoison marks a message that can never be processed.
var errPoison = errors.New("malformed order request")

// worker turns order requests into finished orders.
type worker struct {
	log     *slog.Logger
	store   orderStore
	records recordWriter
	line    slots
	queues  queueCatalog
	events  publisher
	// admissions is the record an order's admission is confirmed against
	// before the order takes stock or money (see admitted).
	admissions admissionRecord
	pay        payer
	breaker    *breaker
	now        func() time.Time
	deadline   time.Duration // how long an order may wait for the payment gateway
	wait       time.Duration // how long a deferred order waits before its next try
	hooks      hooks
	metrics    *metrics

	// lookupGrace is how long past its deadline an order whose payment
	// outcome is unknown waits for the gateway to answer a lookup; its
	// admission slot is held through it too.
	lookupGrace time.Duration
}

// holdMargin keeps a redeemed token's slot past the order's deadline long
// enough for the last payment try (3 × timeout + backoff) to finish.
const holdMargin = 30 * time.Second

// process drives one order request as far as it can go. It returns nil
// when the order is final and everything after it is done (ack),
// retryLater when it waits for the payment gateway, errPoison for a
// message that can never succeed, a hookError to crash, any other error to
// be redelivered.
//
// stored is when the stream stored the request: a bound no publisher can
// forge on how long a request may wait for the line to confirm its token.
func (w *worker) process(ctx context.Context, req event.OrderRequested, redelivered bool, stored time.Time) error {
	q, _, seq, ok := waitqueue.ParseTokenID(req.TokenID)
	if !ok || q != req.Queue || req.OrderID != orders.ID(req.TokenID) || req.Quantity < 1 {
		return errPoison
	}
	// The deadline (how long the order may wait for the payment gateway)
	// counts from the first attempt, on the line's clock: a backlog in
	// front of the worker shorter than the order hold fails nobody (a
	// longer one: see RedeemLapsed). The token was judged at the request,
	// by the gateway's claim.
	o := orders.Order{ID: req.OrderID, TokenID: req.TokenID, Queue: req.Queue, User: req.User,
		SKU: req.SKU, Quantity: req.Quantity, Deadline: w.now().Add(w.deadline)}
	found := false
	if redelivered {
		// Pick up where the last attempt stopped: the store is the truth.
		cur, ok, err := w.store.Get(ctx, o.ID)
		if err != nil {
			return err
		}
		if ok {
			o, found = cur, true
		}
	}
	// charge: the order still holds its admission slot, so it may be
	// charged (see redeemScript's hold rule: an order goes through only on
	// a slot it holds).
	charge := true
	switch {
	case !found:
		var done bool
		var err error
		if o, charge, done, err = w.take(ctx, req, o, seq, stored); done {
			return err
		}
	case o.Status == orders.Pending && w.now().Before(o.Deadline):
		// A redelivery that would charge again: only while the slot is
		// still the order's.
		r, _, err := w.line.RedeemRequest(ctx, q, seq, request(req, o, stored), o.Deadline.Add(w.lookupGrace+holdMargin))
		if err != nil {
			return err
		}
		charge = r != waitqueue.RedeemLapsed
	}
	switch o.Status {
	case orders.Pending:
		var err error
		if o, err = w.settle(ctx, o, charge); err != nil {
			return err
		}
	case orders.Failed:
		// Found FAILED in the store (a redelivery, a second worker): a
		// crash may have fallen between finding its capture and voiding
		// it, so make sure no capture is left behind.
		if err := w.voidStray(ctx, o); err != nil {
			return err
		}
	}
	return w.finish(ctx, req, o, seq)
}

// request is the order request as the line judges it after a replay.
func request(req event.OrderRequested, o orders.Order, stored time.Time) waitqueue.Request {
	return waitqueue.Request{
		Order:       waitqueue.Order{ID: o.ID, TokenID: o.TokenID, User: o.User, SKU: o.SKU, Quantity: o.Quantity},
		RequestedAt: req.RequestedAt, Stored: stored}
}

// take redeems the request's token for its order in the line, confirms
// the token's admission on the record, and places the order (transaction
// 1). done: process has nothing more to do, and err is its answer — a wait
// for the admission, a refusal already finished and announced, another
// order's token. Otherwise o is the order as the store holds it; charge is
// false for one an earlier delivery placed before its slot lapsed.
func (w *worker) take(ctx context.Context, req event.OrderRequested, o orders.Order, seq uint64, stored time.Time) (_ orders.Order, charge, done bool, err error) {
	// A replay after a Redis loss may have applied the admission (expired
	// by now) or a later leave before this request: stored before either,
	// it stands as the gateway accepted it (see redeemScript).
	r, aseq, err := w.line.RedeemRequest(ctx, o.Queue, seq, request(req, o, stored), o.Deadline.Add(w.lookupGrace+holdMargin))
	if err != nil {
		return o, false, true, err
	}
	switch r {
	case waitqueue.Redeemed:
		// The line holds the admission; the record must too.
		ok, err := w.admitted(ctx, req, aseq)
		if err != nil {
			return o, false, true, err
		}
		if !ok {
			return o, false, true, w.unconfirmed(ctx, req, o, seq, stored)
		}
	case waitqueue.RedeemLapsed:
		// Its hold ran out before any worker took it (a backlog longer
		// than the order hold) and the line gave its slot to the next
		// shopper: it is never charged, and the shopper is told. An
		// earlier delivery may have placed it (or finished it) before the
		// slot went: then the store has it.
		if o, err = w.store.Reject(ctx, o, orders.ReasonHoldLapsed); err != nil {
			return o, false, true, err
		}
		if o.Reason == orders.ReasonHoldLapsed {
			w.log.Warn("the order's hold on its slot ran out before a worker took it; rejected", "order", o.ID, "token", o.TokenID)
		}
		if o.Status != orders.Pending {
			return o, false, true, w.finish(ctx, req, o, seq)
		}
		return o, false, false, nil
	case waitqueue.RedeemUnknown, waitqueue.RedeemEarly:
		// The line holds no admission for this token.
		return o, false, true, w.unconfirmed(ctx, req, o, seq, stored)
	case waitqueue.RedeemConflict:
		// Another order holds this token. Nothing of ours to record.
		w.log.Warn("token redeemed by another order", "order", o.ID, "token", o.TokenID)
		return o, false, true, nil
	default:
		reason := orders.ReasonTokenExpired
		if r == waitqueue.RedeemLeft {
			reason = orders.ReasonTokenLeft
		}
		if o, err = w.store.Reject(ctx, o, reason); err != nil {
			return o, false, true, err
		}
		return o, false, true, w.finish(ctx, req, o, seq)
	}
	if err := w.hooks.call(w.hooks.afterRedeem, o.ID); err != nil {
		return o, false, true, err
	}
	if o, err = w.place(ctx, o, seq); err != nil {
		return o, false, true, err
	}
	return o, true, false, nil
}

// place is transaction 1: the order and its stock, and what the line
// learns of it.
func (w *worker) place(ctx context.Context, o orders.Order, seq uint64) (orders.Order, error) {
	if cfg, ok := w.queues.Get(o.Queue); ok && len(cfg.Products()) > 0 {
		o.MaxPerUser = cfg.UserLimit()
	}
	o, err := w.store.Place(ctx, o)
	if err != nil {
		return o, err
	}
	// The store took the order's units (or said why not): the line holds
	// them no more, and learns the stock they left.
	if o.StockVersion > 0 {
		level := waitqueue.StockLevel{SKU: o.SKU, Available: o.Available, Version: o.StockVersion}
		if o.Status == orders.Pending {
			err = w.line.Placed(ctx, o.Queue, seq, o.ID, level)
		} else {
			err = w.line.SetStock(ctx, o.Queue, false, level)
		}
		if err != nil {
			return o, err
		}
	}
	if err := w.hooks.call(w.hooks.afterPlace, o.ID); err != nil {
		return o, err
	}
	if o.Status == orders.Pending {
		// Tell the shopper the order is in, before the slow part.
		w.putRecord(ctx, o)
	}
	return o, nil
}

// unconfirmed answers a request whose token's admission is not confirmed:
// the line holds none for it, or the record (USHER_ADMISSIONS) holds none
// where the line points. The gateway confirmed the token in the line when
// it took the order, so either Redis lost the admission and its followers
// are replaying it from the streams (seconds), or the admissions follower
// has not yet applied the event of an admission made a moment ago
// (milliseconds): until the order's deadline, counted from when the stream
// stored the request (a bound no publisher can forge), it waits. After
// that it is rejected: a token the record never confirms — minted outside
// the line, or on an admission written into Redis alone — orders nothing.
func (w *worker) unconfirmed(ctx context.Context, req event.OrderRequested, o orders.Order, seq uint64, stored time.Time) error {
	if since := w.now().Sub(stored); since < w.deadline {
		if since < confirmPatience {
			return retryLater{after: confirmPatience / 8, moment: true} // the follower's lag, most likely
		}
		w.log.Warn("the order's admission is not confirmed yet; waiting", "order", o.ID, "token", o.TokenID)
		return retryLater{after: time.Second}
	}
	w.log.Error("rejecting an order whose token's admission was never confirmed", "order", o.ID, "token", o.TokenID)
	o, err := w.store.Reject(ctx, o, orders.ReasonTokenUnconfirmed)
	if err != nil {
		return err
	}
	return w.finish(ctx, req, o, seq)
}

// confirmPatience is how long after its request an unconfirmed order is
// looked at again often and quietly: an admission announced after its
// tick, then applied by the follower, reaches the line within it.
const confirmPatience = 2 * time.Second

// voidStray voids a capture the gateway holds under a FAILED order's key.
// While the gateway cannot say (down), the order waits, up to its lookup
// grace; after that the failure to check is logged for ops to reconcile.
func (w *worker) voidStray(ctx context.Context, o orders.Order) error {
	p, err := w.pay.Lookup(ctx, o.ID)
	switch {
	case errors.Is(err, errPaymentNotFound), err == nil && p.Status != paymentCaptured:
		return nil
	case err != nil:
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if w.now().Before(o.Deadline.Add(w.lookupGrace)) {
			return retryLater{after: w.wait}
		}
		w.log.Error("a FAILED order's payment could not be checked at the gateway: reconcile it", "order", o.ID, "err", err)
		return nil
	}
	if _, err := w.paid(ctx, o, p.ID); err != nil { // the store says FAILED: paid voids
		return err
	}
	return nil
}

// reasonPaymentUnknown fails an order whose payment outcome the gateway
// could not tell within the lookup grace: the shopper may have been
// charged, and ops reconcile it against the gateway's ledger.
const reasonPaymentUnknown = "payment_unknown"

// settle pays a pending order and records the outcome (transaction 2). A
// charged shopper never ends with a FAILED order while the gateway can say
// that it charged them.
//
// Before its deadline the order is charged (behind the breaker; while the
// breaker is open it waits). A charge that gets no answer (a timeout, 5xx,
// the breaker) may have captured all the same, so the gateway is asked
// what it holds under the order's key (resolve): a capture makes the order
// PAID, nothing captured lets it wait and be charged again with the same
// key.
//
// From its deadline on no new charge starts, nor once the order no longer
// holds its admission slot (charge false: its hold ran out and the line
// gave the slot away): the order is decided by the lookup alone (see
// resolve).
func (w *worker) settle(ctx context.Context, o orders.Order, charge bool) (orders.Order, error) {
	if !charge || !w.now().Before(o.Deadline) {
		return w.resolve(ctx, o, !charge)
	}
	if w.breaker.Blocked(ctx) {
		return w.later(o)
	}
	pid, err := w.pay.Charge(ctx, o)
	switch {
	case err == nil:
		if err := w.hooks.call(w.hooks.afterPay, o.ID); err != nil {
			return o, err
		}
		return w.paid(ctx, o, pid)
	case errors.Is(err, errPaymentDeclined):
		w.log.Warn("payment declined", "order", o.ID, "err", err)
		return w.store.Fail(ctx, o.ID, orders.ReasonDeclined)
	case ctx.Err() != nil:
		return o, ctx.Err()
	}
	return w.resolve(ctx, o, false) // no answer: the money may have moved all the same
}

// resolve decides a pending order by what the payment gateway holds under
// its key. A capture makes it PAID (paid). Nothing captured: before the
// deadline it waits to be charged again, after it it fails (deadline) and
// its stock goes back; so does an order whose slot lapsed (hold_lapsed),
// which is charged no more. A voided payment fails it: the key can never
// capture again. When the gateway cannot answer, the order waits rather
// than fail a shopper who may have been charged — up to lookupGrace past
// its deadline; then it fails as payment_unknown, for ops to reconcile.
func (w *worker) resolve(ctx context.Context, o orders.Order, lapsed bool) (orders.Order, error) {
	late := lapsed || !w.now().Before(o.Deadline)
	p, err := w.pay.Lookup(ctx, o.ID)
	switch {
	case err == nil && p.Status == paymentCaptured:
		if err := w.hooks.call(w.hooks.afterPay, o.ID); err != nil {
			return o, err
		}
		return w.paid(ctx, o, p.ID)
	case err == nil:
		w.log.Warn("the order's payment was voided at the gateway", "order", o.ID, "payment", p.ID)
		return w.store.Fail(ctx, o.ID, orders.ReasonDeclined)
	case errors.Is(err, errPaymentNotFound):
		switch {
		case lapsed:
			return w.store.Fail(ctx, o.ID, orders.ReasonHoldLapsed)
		case late:
			return w.store.Fail(ctx, o.ID, orders.ReasonDeadline)
		}
		return w.later(o)
	case ctx.Err() != nil:
		return o, ctx.Err()
	case w.now().Before(o.Deadline.Add(w.lookupGrace)):
		return w.later(o)
	}
	w.log.Error("payment outcome unknown past the lookup grace; failing the order as payment_unknown: reconcile it with the gateway",
		"order", o.ID, "deadline", o.Deadline, "err", err)
	return w.store.Fail(ctx, o.ID, reasonPaymentUnknown)
}

// paid records a capture (transaction 2: PAID with its payment id). An
// order that is final already without it — another worker failed it and
// gave its stock back — cannot be honoured any more: the capture is voided,
// so no shopper pays for an order they do not get.
func (w *worker) paid(ctx context.Context, o orders.Order, paymentID string) (orders.Order, error) {
	got, err := w.store.Pay(ctx, o.ID, paymentID)
	if err != nil {
		return o, err
	}
	if got.Status == orders.Paid {
		if got.PaymentID != paymentID {
			w.log.Error("order paid with another payment id than the gateway holds under its key",
				"order", o.ID, "payment", got.PaymentID, "gatewayPayment", paymentID)
		}
		return got, nil
	}
	// Bounded like the lookups: an order's business should be over by then.
	vctx, cancel := context.WithTimeout(ctx, w.lookupGrace)
	defer cancel()
	log := w.log.With("order", o.ID, "payment", paymentID, "status", got.Status, "reason", got.Reason)
	switch _, err := w.pay.Void(vctx, o.ID); {
	case err == nil:
		log.Warn("capture voided: the order was final already")
	case errors.Is(err, errPaymentNotFound):
		log.Warn("capture to void is gone from the gateway")
	case ctx.Err() != nil:
		return got, ctx.Err() // shutting down: the order is final either way
	default:
		log.Error("capture of a final order not voided: reconcile it with the gateway", "err", err)
	}
	return got, nil
}

// later puts the order back to wait for the payment gateway.
func (w *worker) later(o orders.Order) (orders.Order, error) {
	w.metrics.deferred.Inc()
	return o, retryLater{after: w.wait}
}

// finish closes the loop on a final order: a paid order's units counted
// against the user's limit, the Redis record (and the dashboard's outcome
// count, in the same round trip), the stock a failure gave back, the
// event, and last the admission slot (the admitter
// sees what is left and closes a sold-out queue). Every step is
// idempotent, so a redelivery after a crash anywhere here repeats them
// harmlessly.
func (w *worker) finish(ctx context.Context, req event.OrderRequested, o orders.Order, seq uint64) error {
	noteFinal(ctx, o)
	if o.Status == orders.Paid {
		// Counted against maxPerUser before anyone can see PAID: a shopper
		// who joins again at once is refused, not let into line until the
		// admitter's follower applies the completed event.
		if _, err := w.line.CountBought(ctx, o.Queue, seq, o.ID, o.User, o.Quantity); err != nil {
			return err
		}
	}
	// The final record, and the order counted for the dashboard (once per
	// order however often it is finished: a redelivery counts nothing).
	countErr, err := w.records.PutFinal(ctx, orders.RecordOf(o))
	if err != nil {
		return err
	}
	if countErr != nil {
		// A dashboard figure: not worth redelivering a finished order for.
		w.log.Warn("order outcome not counted", "order", o.ID, "queue", o.Queue, "err", countErr)
	}
	typ, subj, id := event.TypeOrderCompleted, event.OrderCompletedSubject(o.Queue), "completed/"+o.ID
	if o.Status != orders.Paid {
		typ, subj, id = event.TypeOrderFailed, event.OrderFailedSubject(o.Queue), "failed/"+o.ID
	}
	body, err := event.Marshal(id, typ, o.User, w.now(), event.OrderFinished{
		OrderID: o.ID, TokenID: o.TokenID, Queue: o.Queue, User: o.User, SKU: o.SKU, Quantity: o.Quantity,
		Status: string(o.Status), Reason: o.Reason, PaymentID: o.PaymentID,
	})
	if err != nil {
		return err
	}
	if _, err := w.events.Publish(ctx, subj, body, jetstream.WithMsgID(id)); err != nil {
		return fmt.Errorf("publish %s: %w", typ, err)
	}
	if o.Status == orders.Failed && o.StockVersion > 0 {
		l := waitqueue.StockLevel{SKU: o.SKU, Available: o.Available, Version: o.StockVersion}
		if err := w.line.SetStock(ctx, o.Queue, false, l); err != nil {
			return err
		}
	}
	if _, err := w.line.Release(ctx, o.Queue, seq, o.ID); err != nil {
		return err
	}
	if err := w.hooks.call(w.hooks.beforeAck, o.ID); err != nil {
		return err
	}
	w.metrics.orders.WithLabelValues(string(o.Status)).Inc()
	w.metrics.observeFinal(req, o, w.now())
	return nil
}

func (w *worker) putRecord(ctx context.Context, o orders.Order) error {
	return w.records.Put(ctx, orders.RecordOf(o))
}
