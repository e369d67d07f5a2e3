package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"usher/internal/bus"
	"usher/internal/catalog"
	"usher/internal/event"
	"usher/internal/keyspace"
	"usher/internal/lottery"
	"usher/internal/orders"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/admission"
	"usher/internal/waitqueue/claims"
	"usher/internal/waitqueue/drop"
	"usher/internal/waitqueue/projection"
)

// queueLister is the part of the catalog the admitter reads, and the one
// write it makes: closing a sold-out queue.
type queueLister interface {
	List() []catalog.Config
	Get(name string) (catalog.Config, bool)
	StockPeers(cfg catalog.Config) []string
	Retired(name string) (time.Time, bool)
	RetiredNames() []string
	Update(ctx context.Context, name string, change func(*catalog.Config) bool) (before, after catalog.Config, err error)
}

// asyncPublisher is the part of JetStream the admitter publishes with.
type asyncPublisher interface {
	PublishAsync(subj string, data []byte, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error)
}

// breakerState says whether the payment breaker is open: while it is, the
// order path cannot take more shoppers and admission pauses.
type breakerState interface {
	Open(ctx context.Context) (bool, error)
}

// heads tells how far the streams hold a queue's events.
type heads interface {
	// Heads returns the last admission and the last order event of q the
	// streams hold.
	Heads(ctx context.Context, q string) (admissions, orders waitqueue.Head, err error)
	// Epoch is the identity of the entries stream: the sequence space of
	// places in line, carried by every token id.
	Epoch() string
	// StreamID is the identity of a stream (see bus.StreamID).
	StreamID(stream string) string
	// Head returns the last event of q that stream (entries, admissions
	// or orders) holds.
	Head(ctx context.Context, stream, q string) (waitqueue.Head, error)
}

// stockReader reads the SKUs' stock from the store (PostgreSQL).
type stockReader interface {
	Stocks(ctx context.Context, skus []string) ([]orders.Stock, error)
}

// hooks let tests stop the admitter at its crash points.
type hooks struct {
	afterAdmit   func(q string) error // after the script, before publishing
	afterPublish func(q string) error // after the acks, before trimming the outbox
}

// admitter runs, for every configured queue, the followers that keep its
// line in Redis up to date with the streams and the loop that admits.
type admitter struct {
	log    *slog.Logger
	queues queueLister
	// The roles of the Redis line the admitter takes: what its Redis user
	// may do (package redisacl: the line's scripts and reads, SCAN and
	// UNLINK for a line it removes).
	admission  *admission.Admission   // the tick, the outboxes, a closed queue's end
	projection *projection.Projection // the followers' streams, a line removed
	drop       *drop.Drop             // a drop's draw
	claims     *claims.Claims         // the store's stock, refreshed into the line
	js         jetstream.JetStream
	events     asyncPublisher
	streams    heads
	breaker    breakerState // nil: never paused by the payment breaker
	stock      stockReader  // nil: the line's stock comes from the order path alone
	now        func() time.Time
	rand       *rand.Rand
	randMu     sync.Mutex
	orderHold  time.Duration // how long a requested order holds its slot (the gateway's claim)
	hooks      hooks
	metrics    *metrics
	// adaptive gives adaptive queues their targetActive (nil: every
	// queue's is as configured).
	adaptive *adaptiveLimits
	// waits measures the time in line of the admissions this admitter
	// stored (nil: not measured).
	waits *waits
}

// epoch is the entries stream's identity as the followers decode with it.
func (a *admitter) epoch() string { return a.streams.Epoch() }

// Run works on every queue as queues appear, until ctx ends or a queue's
// work fails. A queue's work ends when the queue leaves the catalog; a
// queue of that name put back later is worked on again. A deleted queue's
// line is removed from Redis once this admitter has stopped working on it
// (its metrics from this admitter's at once), and at start (by every
// admitter: what one removes before another's last tick, the other
// removes after it).
func (a *admitter) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	running := map[string]bool{}
	gone := make(chan string)
	scan := time.NewTicker(100 * time.Millisecond)
	defer scan.Stop()
	for _, name := range a.queues.RetiredNames() {
		g.Go(func() error { a.forget(ctx, name); return nil })
	}
	for {
		for _, cfg := range a.queues.List() {
			if running[cfg.Name] {
				continue
			}
			running[cfg.Name] = true
			name := cfg.Name
			g.Go(func() error {
				if err := a.work(ctx, name); err != nil {
					return err
				}
				select {
				case gone <- name:
				case <-ctx.Done():
				}
				return nil
			})
		}
		select {
		case <-ctx.Done():
			return g.Wait()
		case name := <-gone:
			delete(running, name)
			if _, deleted := a.queues.Retired(name); deleted {
				a.metrics.forget(name)
				if a.adaptive != nil {
					a.adaptive.retire(name)
				}
				g.Go(func() error { a.forget(ctx, name); return nil })
			}
		case <-scan.C:
		}
	}
}

// work runs a queue's three followers and its admission loop until the
// queue is deleted or ctx ends.
func (a *admitter) work(ctx context.Context, q string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	adm, ord := admissionsFollower(a, q), ordersFollower(a, q)
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return entriesFollower(a, q).Run(ctx) })
	g.Go(func() error { return adm.Run(ctx) })
	g.Go(func() error { return ord.Run(ctx) })
	g.Go(func() error {
		defer cancel() // the queue is gone: so are its followers
		return a.loop(ctx, q, func() { adm.Kick(); ord.Kick() })
	})
	return g.Wait()
}

// forget removes a deleted queue's line from Redis, if any is left. A
// failure is said and left: the next start of an admitter tries again.
func (a *admitter) forget(ctx context.Context, q string) {
	left, err := a.projection.Holds(ctx, q)
	if err == nil && left {
		var n int
		if n, err = a.projection.Forget(ctx, q); err == nil {
			a.log.Info("deleted queue's line removed from Redis", "queue", q, "keys", n)
		}
	}
	if err != nil && ctx.Err() == nil {
		a.log.Warn("deleted queue's line not removed; an admitter's next start tries again", "queue", q, "err", err)
	}
}

// loop runs the queue's admission tick whenever it is due. The schedule
// lives in Redis (see waitqueue.Tick), shared by every admitter: each asks
// when the next tick is due and comes back then, so N admitters run one
// tick per tickMs between them.
func (a *admitter) loop(ctx context.Context, q string, kick func()) error {
	log := a.log.With("queue", q)
	timer := time.NewTimer(0)
	defer timer.Stop()
	var closedCheck time.Time
	unstocked := "" // the SKUs last said to have no stock row
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		cfg, ok := a.queues.Get(q)
		if !ok {
			return nil
		}
		// Before the tick: a stock-aware queue's first tick then knows its
		// stock. One that did not admitted nobody, and turned away every
		// admission at once (a passthrough join, a join into an empty
		// line) until the next tick.
		if time.Since(closedCheck) > time.Second {
			closedCheck = time.Now()
			if err := a.dropIfClosedLong(ctx, cfg); err != nil && ctx.Err() == nil {
				log.Warn("closed queue cleanup", "err", err)
			}
			missing, err := a.refreshStock(ctx, cfg)
			if err != nil && ctx.Err() == nil {
				log.Warn("read the stock", "err", err)
			}
			if m := strings.Join(missing, ","); err == nil && m != unstocked {
				// Said once per change: a queue whose SKUs have no stock
				// row waits without a word otherwise.
				unstocked = m
				if m != "" {
					log.Warn("SKUs without stock in the store: the line counts no unit of theirs, and a queue whose SKUs all lack it admits nobody (PUT /v1/admin/stock/{sku})",
						"skus", missing)
				}
			}
		}
		tickLen := time.Duration(cfg.TickMs) * time.Millisecond
		next, err := a.tick(ctx, cfg, kick)
		if err != nil {
			if h, isHook := err.(hookError); isHook {
				return h.err
			}
			if ctx.Err() != nil {
				return nil
			}
			log.Error("admission tick", "err", err)
			next = tickLen
		}
		timer.Reset(next)
	}
}

// hookError is a test hook's verdict: the loop stops as if it crashed.
type hookError struct{ err error }

func (h hookError) Error() string { return h.err.Error() }

// tick is one admission step for a queue: admit if the tick is due, then
// announce the outbox — this tick's admissions and whatever an earlier one
// (a crashed admitter, the gateway's admit-now) left there. It returns how
// long to wait before the next try.
//
// Only the admitter that ran the due tick announces: the others, coming
// early, leave the outbox alone, so two admitters do not publish the same
// admissions at once (each would only be refused as a duplicate still in
// process). Whatever is left is announced by the next due tick, whoever
// runs it.
func (a *admitter) tick(ctx context.Context, cfg catalog.Config, kick func()) (time.Duration, error) {
	start := time.Now()
	tickLen := time.Duration(cfg.TickMs) * time.Millisecond
	if err := a.recordLeaves(ctx, cfg.Name); err != nil {
		return tickLen, err
	}
	if err := a.drawIfDue(ctx, cfg); err != nil {
		return tickLen, err
	}
	t, ended, jitter, err := a.prepareTick(ctx, cfg)
	if err != nil {
		return tickLen, err
	}
	res, err := a.admission.Admit(ctx, cfg.Name, t)
	if err != nil {
		return tickLen, err
	}
	a.settleState(ctx, cfg, res, ended)
	if res.Early {
		// Another admitter ran this tick; come back when the next is due.
		return min(res.Next, tickLen) + jitter, nil
	}
	a.metrics.observeTick(cfg, res, time.Since(start))
	behind, err := a.announceTick(ctx, cfg.Name, res, kick)
	switch {
	case err != nil:
		return tickLen, err
	case behind:
		return 20 * time.Millisecond, nil
	}
	return min(max(res.Next, time.Millisecond), tickLen) + jitter, nil
}

// prepareTick gathers what the admission script weighs this tick: how far
// the streams hold the queue's admissions and orders, whether admission
// pauses, how many shoppers may be active. The tick's random offset and
// its jitter are drawn together under one lock from the admitter's seeded
// source; ended says the queue is past its closesAt.
func (a *admitter) prepareTick(ctx context.Context, cfg catalog.Config) (t waitqueue.Tick, ended bool, jitter time.Duration, err error) {
	admissions, ordersHead, err := a.streams.Heads(ctx, cfg.Name)
	if err != nil {
		return t, false, 0, err
	}
	a.randMu.Lock()
	offset := a.rand.IntN(1000)
	jitter = time.Duration(a.rand.IntN(2000)) * time.Microsecond
	a.randMu.Unlock()
	// Once closesAt passed nobody more is admitted: shoppers still in line
	// are told CLOSED (ended) from then on, and the queue is closed in the
	// catalog after the tick (joins get 410 already).
	ended = cfg.Ended(a.now())
	paused, err := a.paused(ctx, cfg, ended)
	if err != nil {
		return t, false, 0, err
	}
	target := a.targetActive(ctx, cfg)
	if cfg.QueueMode() == catalog.ModePassthrough {
		target = passthroughTarget // a dry run: nobody waits, everything is counted
	}
	var share waitqueue.Share
	if cfg.StockAwareness() {
		share = waitqueue.Share{SKUs: cfg.Products(), Peers: a.queues.StockPeers(cfg)}
	}
	return waitqueue.Tick{
		Epoch:           a.epoch(),
		TargetActive:    target,
		MaxAdmitPerTick: cfg.MaxAdmitPerTick,
		TickLength:      time.Duration(cfg.TickMs) * time.Millisecond,
		TokenTTL:        time.Duration(cfg.TokenTTLSeconds) * time.Second,
		Paused:          paused,
		Offset:          offset,
		Admissions:      admissions,
		Orders:          ordersHead,
		StockAware:      cfg.StockAwareness(),
		Share:           share,
		AwaitDraw:       cfg.Lottery != nil && cfg.OpensAt != nil,
		AbandonAfter:    cfg.AbandonAfter(),
		NoJitter:        cfg.QueueMode() == catalog.ModePassthrough,
	}, ended, jitter, nil
}

// paused says whether this tick admits nobody: a queue that is not open or
// has ended, or — back-pressure — a payment breaker that is open, since
// while payments cannot go through, admitting more shoppers would only pile
// orders up behind the breaker. The breaker is read even for a paused
// queue, so its gauge stays current.
func (a *admitter) paused(ctx context.Context, cfg catalog.Config, ended bool) (bool, error) {
	paused := cfg.State != catalog.StateOpen || ended
	if a.breaker == nil {
		return paused, nil
	}
	open, err := a.breaker.Open(ctx)
	if err != nil {
		return false, err
	}
	a.metrics.observeBreaker(open)
	return paused || open, nil
}

// settleState brings the queue's state in the catalog in line with what the
// tick found: an ended or sold-out queue is closed, and one closed because
// it sold out reopens when units are back.
func (a *admitter) settleState(ctx context.Context, cfg catalog.Config, res waitqueue.TickResult, ended bool) {
	switch {
	case ended:
		if cfg.State != catalog.StateClosed {
			a.closeEnded(ctx, cfg.Name)
		}
	case res.Stock == waitqueue.StockSoldOut && cfg.State != catalog.StateClosed:
		a.closeSoldOut(ctx, cfg.Name)
	case res.Stock == waitqueue.StockAvailable && cfg.State == catalog.StateClosed && cfg.ClosedReason == catalog.ReasonSoldOut:
		// Units are back (a restock whose own reopening lost the race
		// with this close, stock set in the store directly): a queue
		// closed because it sold out reopens, as a restock's would.
		a.reopenRestocked(ctx, cfg.Name)
	}
}

// announceTick puts a due tick's outcome on the record in the order the
// audit needs: the leaves the line took before it admitted, then the
// outbox. behind says the line has not caught up with the streams, and the
// queue should try again in a moment rather than a tick.
func (a *admitter) announceTick(ctx context.Context, q string, res waitqueue.TickResult, kick func()) (behind bool, err error) {
	if res.Abandoned > 0 || res.Admitted > 0 {
		// The script admitted behind the shoppers it found gone, and behind
		// those who left before it ran, whose gateways may not have stored
		// their leaves yet (the line takes a leave first): every such leave
		// goes on the record before those admissions are announced, so the
		// streams (and the audit, which judges from them alone) never show
		// a shopper passed while still waiting. A gateway storing the same
		// leave meanwhile is a repeat the stream drops. A crash in between
		// leaves both outboxes, and the next tick records the leaves first
		// too.
		if err := a.recordLeaves(ctx, q); err != nil {
			return false, err
		}
	}
	if res.Behind {
		// The line has not applied every admission or order the streams
		// hold (Redis lost writes, or the followers are a moment behind):
		// nobody is admitted until it has. Ask the followers to look now.
		kick()
		return true, a.announce(ctx, q)
	}
	if a.hooks.afterAdmit != nil {
		if err := a.hooks.afterAdmit(q); err != nil {
			return false, hookError{err}
		}
	}
	return false, a.announce(ctx, q)
}

// publishWait bounds the wait for the stream's acknowledgements of one
// batch of admissions or leaves, as headWait bounds a read of a stream's
// head. A publish sent while the stream has no leader (a NATS node killed;
// the election takes 4–7 s) is never answered, and the queue's loop would
// wait out the client's default of 5 s before it ticked again, seconds
// past the moment the new leader could answer. Bounded at a second, the
// loop asks again within a second of the election. What is not
// acknowledged stays in the outbox and goes again at the next tick (a
// repeat the stream drops by its id) — after a later tick's admissions,
// perhaps: the stream's order of admissions is the relay's, and their
// readyAt is the order they were decided in (usherctl audit judges that).
const publishWait = time.Second

// announce publishes the outbox with each token id as Nats-Msg-Id and trims
// what the stream acknowledged. A repeat (after a crash, or by a second
// admitter) is dropped by the stream's duplicate window; one the stream
// refuses because the same id is being stored right now (another
// admitter's publish of the same admission, still in flight) is left in
// the outbox for whoever stored it to trim — no error, nothing to log.
func (a *admitter) announce(ctx context.Context, q string) error {
	for {
		pending, err := a.admission.Outbox(ctx, q, 512)
		if err != nil || len(pending) == 0 {
			return err
		}
		futures := make([]jetstream.PubAckFuture, 0, len(pending))
		for _, ad := range pending {
			body, err := event.Marshal(ad.TokenID, event.TypeAdmitted, ad.User, a.now(), event.Admitted{
				Queue: ad.Queue, User: ad.User, Seq: ad.Seq, TokenID: ad.TokenID,
				ReadyAt: ad.ReadyAt.UTC(), ExpiresAt: ad.ExpiresAt.UTC(),
			})
			if err != nil {
				return err
			}
			f, err := a.events.PublishAsync(event.AdmittedSubject(q), body, jetstream.WithMsgID(ad.TokenID))
			if err != nil {
				return fmt.Errorf("publish admission: %w", err)
			}
			futures = append(futures, f)
		}
		var done []uint64
		var stored []waitqueue.Admission // by this publish, not a repeat the stream dropped
		var firstErr error
		wctx, cancel := context.WithTimeout(ctx, publishWait)
	wait:
		for i, f := range futures {
			select {
			case ack := <-f.Ok():
				done = append(done, pending[i].Seq)
				if ack != nil && !ack.Duplicate {
					stored = append(stored, pending[i])
				}
			case err := <-f.Err():
				if bus.Storing(err) {
					continue
				}
				if firstErr == nil {
					firstErr = fmt.Errorf("admission %s not stored: %w", pending[i].TokenID, err)
				}
			case <-wctx.Done():
				firstErr = fmt.Errorf("admissions not acknowledged: %w", wctx.Err())
				break wait
			}
		}
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if cfg, ok := a.queues.Get(q); ok {
			a.waits.stored(q, cfg.OpensAt, stored)
		}
		if a.hooks.afterPublish != nil {
			if err := a.hooks.afterPublish(q); err != nil {
				return hookError{err}
			}
		}
		if err := a.admission.Announced(ctx, q, done); err != nil {
			return err
		}
		a.metrics.announced.Add(float64(len(done)))
		if firstErr != nil {
			return firstErr
		}
		if len(pending) < 512 {
			return nil
		}
	}
}

// dropIfClosedLong removes the line of a queue closed for longer than
// keyspace.ClosedGrace, once no slot is taken any more: Redis holds only
// what is live. A shopper admitted before the closing orders until their
// token expires, however long its lifetime (up to a day); the active set's
// scores are the expiries the tokens were issued with, so an operator who
// shortens tokenTtlSeconds after the closing does not cut them short.
func (a *admitter) dropIfClosedLong(ctx context.Context, cfg catalog.Config) error {
	since, err := a.admission.ClosedSince(ctx, cfg.Name, cfg.State == catalog.StateClosed)
	if err != nil || since.IsZero() || a.now().Sub(since) < keyspace.ClosedGrace {
		return err
	}
	free, err := a.admission.SlotsFreeAt(ctx, cfg.Name)
	if err != nil || a.now().Before(free) {
		return err
	}
	n, err := a.projection.Remove(ctx, cfg.Name, true)
	if err == nil && n > 0 {
		a.log.Info("closed queue's line removed from Redis", "queue", cfg.Name, "keys", n, "closedSince", since)
	}
	return err
}

// refreshStock copies the stock of the queue's SKUs from the store into
// the line every second. The order path reports every change as it makes
// it; this covers what it cannot (a Redis that lost its copy, an operator's
// change in the database) — versions keep an older figure from winning.
//
// It returns the queue's SKUs the store has no stock row for: the line
// counts no unit of theirs, and a queue whose SKUs all lack one admits
// nobody (its stock is unknown) until the operators set it.
func (a *admitter) refreshStock(ctx context.Context, cfg catalog.Config) (missing []string, err error) {
	skus := cfg.Products()
	if a.stock == nil || !cfg.StockAwareness() || len(skus) == 0 {
		return nil, nil
	}
	st, err := a.stock.Stocks(ctx, skus)
	if err != nil {
		return nil, err
	}
	levels := make([]waitqueue.StockLevel, len(st))
	known := make(map[string]bool, len(st))
	for i, s := range st {
		levels[i] = waitqueue.StockLevel{SKU: s.SKU, Available: s.Available, Version: s.Version}
		known[s.SKU] = true
	}
	for _, sku := range skus {
		if !known[sku] {
			missing = append(missing, sku)
		}
	}
	return missing, a.claims.SetStock(ctx, cfg.Name, true, levels...)
}

// closeSoldOut closes a queue whose stock is gone — nothing left, held by
// a shopper or pending — so waiting shoppers hear sold_out at once and new
// joins get 410. The close is a compare-and-set on the stored
// configuration: an operator's concurrent change is never overwritten, and
// a queue an operator closed or reopened meanwhile is left as they left it.
func (a *admitter) closeSoldOut(ctx context.Context, q string) {
	a.changeState(ctx, q, "admitter (sold out)", "queue sold out and closed", func(c *catalog.Config) bool {
		if c.State == catalog.StateClosed {
			return false
		}
		c.State, c.ClosedReason = catalog.StateClosed, catalog.ReasonSoldOut
		return true
	})
}

// closeEnded closes a queue whose closesAt passed, with reason ended, so
// that the catalog says what the line does (nobody admitted, shoppers in
// line told CLOSED) and every service follows, as for a sold-out queue.
// Moving closesAt later does not reopen it: an operator resumes it.
func (a *admitter) closeEnded(ctx context.Context, q string) {
	a.changeState(ctx, q, "admitter (closesAt passed)", "queue ended and closed", func(c *catalog.Config) bool {
		if c.State == catalog.StateClosed || !c.Ended(a.now()) {
			return false
		}
		c.State, c.ClosedReason = catalog.StateClosed, catalog.ReasonEnded
		return true
	})
}

// reopenRestocked reopens a queue closed because it sold out, now that the
// line sees units available again; a queue an operator changed meanwhile
// (another state, another reason) is theirs and stays as it is.
func (a *admitter) reopenRestocked(ctx context.Context, q string) {
	a.changeState(ctx, q, "admitter (back in stock)", "queue reopened: units are available again", func(c *catalog.Config) bool {
		if c.State != catalog.StateClosed || c.ClosedReason != catalog.ReasonSoldOut {
			return false
		}
		c.State, c.ClosedReason = catalog.StateOpen, ""
		return true
	})
}

// changeState applies change to q's stored configuration (a
// compare-and-set: see catalog.Update) and records what changed, by whom,
// on the ops stream; a change that changes nothing records nothing.
func (a *admitter) changeState(ctx context.Context, q, by, done string, change func(*catalog.Config) bool) {
	prev, now, err := a.queues.Update(ctx, q, change)
	switch {
	case errors.Is(err, catalog.ErrUnchanged):
		return
	case err != nil:
		a.log.Error("change a queue's state", "queue", q, "by", by, "err", err)
		return
	}
	a.log.Info(done, "queue", q, "skus", now.Products())
	prev, now = prev.Redacted(), now.Redacted() // a drop not drawn yet keeps its seed secret
	id, body, err := event.NewConfigChanged(q, by, now, &prev, a.now())
	if err == nil {
		_, err = a.js.Publish(ctx, event.ConfigChangedSubject, body, jetstream.WithMsgID(id))
	}
	if err != nil {
		a.log.Error("state change not recorded on the ops stream", "queue", q, "by", by, "err", err)
	}
}

// passthroughTarget is a passthrough queue's targetActive: no cap.
const passthroughTarget = 1 << 30

// drawGrace is how long after opensAt the draw waits, so that every join
// the gateways took into the pre-queue before the opening is in the stream.
const drawGrace = time.Second

// recordLeaves records on the entries stream the leaves the line took
// that no event holds yet: shoppers the line found gone (see waitqueue's
// admitScript), and shoppers' own leaves their gateway did not store (its
// publish failed, or it stopped between the line and the stream; see
// line.Leave). Each has the message id its first publisher used, so a
// repeat is dropped, and what the stream stored is trimmed. The line took
// them out already; the record is what a replay of the stream (after Redis
// lost its data) and the audit go by.
func (a *admitter) recordLeaves(ctx context.Context, q string) error {
	gone, err := a.admission.LeavesToRecord(ctx, q, 512)
	if err != nil || len(gone) == 0 {
		return err
	}
	epoch := a.epoch()
	leaves := make([]leaveRecord, len(gone))
	for i, g := range gone {
		id, body, err := event.NewLeft(event.Left{Queue: q, User: g.User, Seq: g.Seq, Reason: g.Reason}, epoch, a.now())
		if err != nil {
			return err
		}
		leaves[i] = leaveRecord{g, id, body}
	}
	wctx, cancel := context.WithTimeout(ctx, publishWait)
	defer cancel()
	done, storing, err := a.publishLeaves(wctx, q, leaves)
	// A leave its gateway is storing at this moment (bus.Storing) is
	// published again, alone, through the JetStream bus.Open returns,
	// which publishes again until the stream says it holds it: the caller
	// announces admissions next, and none may be stored before a leave the
	// line took ahead of them.
	for _, l := range storing {
		if err != nil {
			break
		}
		if _, perr := a.js.Publish(wctx, event.LeaveSubject(q), l.body, jetstream.WithMsgID(l.id)); perr != nil {
			err = fmt.Errorf("leave %s/%d not recorded: %w", q, l.Seq, perr)
			break
		}
		done = append(done, l.UnrecordedLeave)
	}
	if rerr := a.admission.LeavesRecorded(ctx, q, done); rerr != nil {
		return rerr
	}
	return err
}

// leaveRecord is a leave to record and its event.
type leaveRecord struct {
	waitqueue.UnrecordedLeave
	id   string
	body []byte
}

// publishLeaves publishes leaves and waits for the stream's answers: the
// leaves it holds now (stored, or a repeat of one stored), those another
// publisher is storing at this moment, and the first failure.
func (a *admitter) publishLeaves(ctx context.Context, q string, leaves []leaveRecord) (stored []waitqueue.UnrecordedLeave, storing []leaveRecord, err error) {
	futures := make([]jetstream.PubAckFuture, 0, len(leaves))
	for _, l := range leaves {
		f, err := a.events.PublishAsync(event.LeaveSubject(q), l.body, jetstream.WithMsgID(l.id))
		if err != nil {
			return stored, storing, fmt.Errorf("record leaves: %w", err)
		}
		futures = append(futures, f)
	}
	for i, f := range futures {
		select {
		case <-f.Ok():
			stored = append(stored, leaves[i].UnrecordedLeave)
		case ferr := <-f.Err():
			if bus.Storing(ferr) {
				storing = append(storing, leaves[i])
			} else if err == nil {
				err = fmt.Errorf("leave %s/%d not recorded: %w", q, leaves[i].Seq, ferr)
			}
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("leaves not acknowledged: %w", ctx.Err())
			}
			return stored, storing, err
		}
	}
	return stored, storing, err
}

// drawIfDue draws a scheduled drop's pre-queue once it has opened: the
// lottery order (package lottery) from the committed seed, placed in one
// atomic step, then the seed revealed in the catalog and on USHER_OPS. It
// waits until the line has applied every join the stream holds for the
// queue, so nobody pre-queued is left out. A second admitter finds it
// drawn; a draw the catalog does not show yet (a crash between the two) is
// revealed at the next tick; a line rebuilt after a loss draws the same
// order again.
func (a *admitter) drawIfDue(ctx context.Context, cfg catalog.Config) error {
	if cfg.Lottery == nil || cfg.OpensAt == nil || a.now().Before(cfg.OpensAt.Add(drawGrace)) {
		return nil
	}
	d, err := a.drop.Drawing(ctx, cfg.Name)
	if err != nil {
		return err
	}
	if d.Drawn {
		if _, err := a.drop.SettleDraw(ctx, cfg.Name); err != nil {
			return err
		}
		if !cfg.Lottery.Drawn {
			seed, err := a.seed(ctx, cfg)
			if err != nil {
				return err
			}
			a.revealDraw(ctx, cfg.Name, d, seed)
		}
		return nil
	}
	head, err := a.streams.Head(ctx, event.StreamEntries, cfg.Name)
	if err != nil {
		return err
	}
	cur, err := a.projection.Cursor(ctx, cfg.Name)
	if err != nil {
		return err
	}
	// A queue the stream holds no join of has nothing to apply: it is drawn
	// (nobody placed) at once, not when its first join sets the cursor.
	if at := cur[waitqueue.StreamEntries]; head.Seq > 0 && (at.StreamID != head.StreamID || at.Seq < head.Seq) {
		return nil // the follower is still applying joins: next tick
	}
	entries, _, version, err := a.drop.PreQueue(ctx, cfg.Name)
	if err != nil {
		return err
	}
	seed, err := a.seed(ctx, cfg)
	if err != nil {
		return err
	}
	// A queue the catalog says was drawn, but the line not, lost its draw
	// with Redis: the same pre-queue (up to the first draw's cursor) is
	// drawn again, which gives the same order.
	var upTo, bound uint64
	if cfg.Lottery.Drawn {
		upTo = cfg.Lottery.EntriesCursor
		// The pre-queue holds entry ids, the cursor is a stream sequence:
		// compare with its place bound (the line knows where the queue's
		// places count in groups once it applied the stream that far, which
		// the draw script checks).
		bound = waitqueue.Position{Seq: upTo, GroupsSince: cur[waitqueue.StreamEntries].GroupsSince}.Bound()
	}
	order, digest := drawOrder(seed, entries, upTo, bound)
	start := time.Now()
	n, err := a.drop.Redraw(ctx, cfg.Name, a.epoch(), version, order, digest, upTo)
	switch {
	case errors.Is(err, waitqueue.ErrDrawn), errors.Is(err, waitqueue.ErrDrawChanged):
		return nil // another admitter drew, or someone joined or left: next tick
	case err != nil:
		return err
	}
	a.log.Info("pre-queue drawn", "queue", cfg.Name, "entries", n, "took", time.Since(start).String())
	if d, err = a.drop.Drawing(ctx, cfg.Name); err != nil {
		return err
	}
	a.revealDraw(ctx, cfg.Name, d, seed)
	return nil
}

// drawOrder is the lottery's order of the pre-queued entries (all of them,
// or those up to bound when a lost draw is drawn again up to its first
// cursor upTo) and its digest.
func drawOrder(seed []byte, entries []waitqueue.PreEntry, upTo, bound uint64) ([]uint64, string) {
	list := make([]lottery.Entry, 0, len(entries))
	for _, e := range entries {
		if upTo == 0 || e.Seq <= bound {
			list = append(list, lottery.Entry{Seq: e.Seq, User: e.User})
		}
	}
	sorted := lottery.Sorted(seed, list)
	order := make([]uint64, len(sorted))
	for i, e := range sorted {
		order[i] = e.Seq
	}
	return order, lottery.Digest(sorted)
}

// seed is the seed cfg's lottery committed to, checked against the
// commitment: from the seeds bucket, which only admitters may read (see
// catalog.SeedOf).
func (a *admitter) seed(ctx context.Context, cfg catalog.Config) ([]byte, error) {
	hexSeed, err := catalog.SeedOf(ctx, a.js, cfg.Name, *cfg.Lottery)
	if err != nil {
		return nil, fmt.Errorf("draw %s: %w", cfg.Name, err)
	}
	seed, err := lottery.Reveal(hexSeed, cfg.Lottery.Commitment)
	if err != nil {
		return nil, fmt.Errorf("draw %s: %w", cfg.Name, err)
	}
	return seed, nil
}

// revealDraw marks the catalog's lottery drawn with its seed (which
// reveals it in the public view) and records the draw on USHER_OPS.
func (a *admitter) revealDraw(ctx context.Context, q string, d waitqueue.Drawing, seed []byte) {
	at := a.now().UTC()
	prev, now, err := a.queues.Update(ctx, q, func(c *catalog.Config) bool {
		if c.Lottery == nil || c.Lottery.Drawn {
			return false
		}
		l := *c.Lottery
		l.Drawn, l.DrawnAt, l.Entries, l.EntriesCursor, l.OrderDigest = true, &at, d.Entries, d.Cursor, d.Digest
		l.Seed = hex.EncodeToString(seed)
		c.Lottery = &l
		return true
	})
	if err != nil {
		if !errors.Is(err, catalog.ErrUnchanged) {
			a.log.Error("reveal the draw in the catalog", "queue", q, "err", err)
		}
		return
	}
	msgID := "lottery/" + q + "/" + now.Lottery.Commitment
	body, err := event.Marshal(msgID, event.TypeLotteryDrawn, q, at, event.LotteryDrawn{
		Queue: q, Seed: now.Lottery.Seed, Commitment: now.Lottery.Commitment, OpensAt: now.OpensAt.UTC(),
		Entries: d.Entries, EntriesCursor: d.Cursor, OrderDigest: d.Digest,
	})
	if err == nil {
		_, err = a.js.Publish(ctx, event.LotteryDrawnSubject, body, jetstream.WithMsgID(msgID))
	}
	if err != nil {
		a.log.Error("draw not recorded on the ops stream", "queue", q, "err", err)
	}
	prev = prev.Redacted()
	id, cbody, err := event.NewConfigChanged(q, "admitter (lottery drawn)", now, &prev, at)
	if err == nil {
		_, err = a.js.Publish(ctx, event.ConfigChangedSubject, cbody, jetstream.WithMsgID(id))
	}
	if err != nil {
		a.log.Error("reveal not recorded on the ops stream", "queue", q, "err", err)
	}
}
