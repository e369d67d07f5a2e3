package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/nats-io/nats.go/jetstream"

	"usher/gateway/httpapi"
	"usher/internal/analytics"
	"usher/internal/catalog"
	"usher/internal/event"
	"usher/internal/problem"
	"usher/internal/shopper"
	"usher/internal/ticket"
	"usher/internal/waitqueue"
)

// place is the body of join and poll answers.
type place struct {
	Ticket      string     `json:"ticket"`
	Queue       string     `json:"queue"`
	Status      string     `json:"status"`
	Position    int64      `json:"position,omitempty"`
	Waiting     *int64     `json:"waiting,omitempty"` // nil for CLOSED: no line to tell of (see answerAt)
	ETASeconds  *int64     `json:"etaSeconds,omitempty"`
	PollAfterMs int64      `json:"pollAfterMs,omitempty"`
	Events      string     `json:"events"`
	Token       string     `json:"token,omitempty"`
	ReadyAt     *time.Time `json:"readyAt,omitempty"`
	ExpiresAt   *time.Time `json:"expiresAt,omitempty"`
	Reason      string     `json:"reason,omitempty"`
	// Stock is available, held or sold_out while waiting in a queue that
	// follows its stock; SKUs lists its SKUs with units left.
	Stock string   `json:"stock,omitempty"`
	SKUs  []string `json:"skusAvailable,omitempty"`
	// OpensAt is when a PRE_QUEUE shopper's drop opens.
	OpensAt *time.Time `json:"opensAt,omitempty"`
	// Notice is what the operators tell the line, if anything.
	Notice *catalog.Notice `json:"notice,omitempty"`
}

func (a *api) queue(c *fiber.Ctx) (catalog.Config, error) {
	return httpapi.Queue(c, a.queues)
}

// join puts the shopper in line: 202 with a new ticket, or 200 with the
// ticket they already hold while they are in line or admitted.
func (a *api) join(c *fiber.Ctx) (err error) {
	user, err := a.user(c)
	if err != nil {
		return err
	}
	cfg, err := a.queue(c)
	if err != nil {
		return err
	}
	// The rate limits and the user's current entry, in one round trip.
	cur, err := a.lookupJoin(c, cfg, user)
	if err != nil {
		return err
	}
	// A closed queue or one in maintenance turns every join away, before
	// asking for a proof: a client is not made to solve a challenge for a
	// place it cannot have.
	now := a.now()
	if p := closedProblem(cfg, now); p != nil {
		return p
	}
	if cfg.QueueMode() == catalog.ModeReject {
		return maintenance(cfg)
	}
	proof, done, err := a.door.CheckProof(c, cfg, user)
	if done || err != nil {
		return err
	}
	// The proof buys a new place in line: a join refused before its
	// publish, or answered with the place the shopper already holds,
	// bought none and gives it back. One the stream recorded bought one,
	// even when its place cannot be read after (a 503): the follower puts
	// it in line.
	held, recorded := false, false
	defer func() {
		if (err != nil && !recorded) || held {
			a.door.GiveBack(c.UserContext(), cfg.Name, proof)
		}
	}()
	ctx := c.UserContext()
	epoch := a.epoch()
	prev := cur.Seq
	if cur.Found && cur.Status.Live() {
		e, err := a.line.PollPresent(ctx, cfg.Name, prev)
		if err != nil {
			return httpapi.LineDown(err)
		}
		held = true
		return a.answer(c, fiber.StatusOK, cfg, ticket.Ticket{Queue: cfg.Name, User: user, Epoch: epoch, Seq: e.Seq}, e)
	}
	if limit := cfg.UserLimit(); len(cfg.Products()) > 0 && cur.Bought >= limit {
		return problem.New(fiber.StatusForbidden, "already-purchased",
			"this user bought "+strconv.Itoa(cur.Bought)+" unit(s) in this queue, the most one user may")
	}
	// Before a scheduled drop opens, a join enters the pre-queue (the
	// lottery places it); an allow-listed user or an invite code passes the
	// line.
	kind, invite, err := a.joinKind(c, cfg, user, now)
	if err != nil {
		return err
	}
	// The id names this user's attempt after their previous entry, so two
	// concurrent joins (a double click) dedupe to one place in line.
	id := cfg.Name + "/" + user + "/" + strconv.FormatUint(prev, 10)
	body, err := event.Marshal(id, event.TypeJoined, user, now, event.Joined{Queue: cfg.Name, User: user,
		JoinedAt: now.UTC(), Prev: prev, PreQueue: kind == waitqueue.PreQueue, Priority: kind == waitqueue.Priority})
	if err != nil {
		return err
	}
	ack, err := a.events.Publish(ctx, event.EnterSubject(cfg.Name), body, jetstream.WithMsgID(id))
	if err != nil {
		if invite.Code != "" {
			if err := a.line.ReturnInvite(context.WithoutCancel(ctx), cfg.Name, invite, a.now()); err != nil {
				a.log.Error("invite code lost with a join that was not recorded", "queue", cfg.Name, "err", err)
			}
		}
		return httpapi.Unavailable(fmt.Errorf("publish join to %s: %w", cfg.Name, err), "the line could not record the join; retry")
	}
	recorded = true
	a.metrics.joins.Inc()
	// The admitter's follower applies the event too (and is what
	// guarantees it); doing it here as well lets the answer carry the
	// exact place in line.
	e, err := a.line.IngestAs(ctx, cfg.Name, epoch, ack.Sequence, user, prev, kind)
	switch {
	case errors.Is(err, waitqueue.ErrStale), errors.Is(err, waitqueue.ErrConflict):
		// The entries stream was recreated and this gateway or the line
		// has not caught up yet: the join is recorded; the follower puts
		// it in line. Ask the shopper to come back in a moment.
		return httpapi.Unavailable(err, "the line is being reset; retry in a moment")
	case err != nil:
		// The join is recorded in the stream: the follower puts it in line.
		return httpapi.Unavailable(err, "the join is recorded but its place cannot be read now; join again to see it")
	}
	if e.Status == waitqueue.Admitted {
		// Admitted between the follower's copy and this one (a fast tick):
		// read the whole record, the token's included.
		if e, err = a.line.PollPresent(ctx, cfg.Name, e.Seq); err != nil {
			return httpapi.LineDown(err)
		}
	}
	status := fiber.StatusAccepted
	if ack.Duplicate || e.Seq != ack.Sequence {
		// A double click's second join, or one the line resolved to the
		// place the user holds: no new place.
		status, held = fiber.StatusOK, true
	}
	at := a.now()
	if e.Seq == ack.Sequence {
		e, at = a.admitAtOnce(ctx, cfg, epoch, e)
	}
	t := ticket.Ticket{Queue: cfg.Name, User: user, Epoch: epoch, Seq: e.Seq}
	return a.AnswerAt(c, status, cfg, t, a.tickets.Issue(t), e, at)
}

// lookupJoin charges a join to its client IP and its user and looks the
// user up in the line, in one Redis round trip (waitqueue.LookupLimited):
// a 429 when a limit refuses.
func (a *api) lookupJoin(c *fiber.Ctx, cfg catalog.Config, user string) (waitqueue.Current, error) {
	cur, d, err := a.line.LookupLimited(c.UserContext(), cfg.Name, user, a.limits.JoinPlan(c, cfg, user))
	if err != nil {
		return cur, httpapi.LineDown(err)
	}
	return cur, a.limits.Decided(c, d)
}

// maintenance is the 503 a join into a queue in mode reject gets.
func maintenance(cfg catalog.Config) error {
	return problem.Problem{Type: "https://usher.dev/problems/maintenance", Title: "Service Unavailable",
		Status: fiber.StatusServiceUnavailable, Detail: "queue " + cfg.Name + " is in maintenance; come back later", RetryAfter: 60}
}

// closedProblem is the 410 a join into a closed queue gets, nil while it is
// open (shopper.ClosedAt, what a shopper in line is told): queue-ended once
// closesAt passed, whether or not the admitter has closed it in the catalog
// yet, else queue-closed with its reason (sold_out when its stock ran out).
func closedProblem(cfg catalog.Config, now time.Time) error {
	closed, reason := shopper.ClosedAt(cfg, now)
	switch {
	case !closed:
		return nil
	case reason == catalog.ReasonEnded || cfg.Ended(now):
		p := problem.New(fiber.StatusGone, "queue-ended", "the sale in queue "+cfg.Name+" has ended")
		p.Extensions = map[string]any{"reason": catalog.ReasonEnded}
		return p
	}
	p := problem.New(fiber.StatusGone, "queue-closed", "queue "+cfg.Name+" is closed")
	p.Extensions = map[string]any{"reason": reason}
	return p
}

// ticketOf checks the ticket in the path: forged or garbled → 401, a
// ticket of another queue → 404, of a line that was reset since (the
// entries stream was recreated) → 410.
func (a *api) ticketOf(c *fiber.Ctx, cfg catalog.Config) (ticket.Ticket, error) {
	t, err := a.tickets.Parse(ticketParam(c)) // the path's, or a page form's (pageform.go)
	if err != nil {
		return t, problem.New(fiber.StatusUnauthorized, "invalid-ticket", "the ticket is not one this queue issued")
	}
	if t.Queue != cfg.Name {
		return t, problem.New(fiber.StatusNotFound, "ticket-not-found", "the ticket belongs to another queue")
	}
	if t.Epoch != a.epoch() {
		return t, problem.New(fiber.StatusGone, "ticket-stale", "the line this ticket was for has been reset; join again")
	}
	return t, nil
}

// ofTicket checks that the entry Redis holds for the ticket's sequence is
// the ticket's user's (it always is, unless the line was reset under it).
func ofTicket(t ticket.Ticket, e waitqueue.Entry) error {
	if e.User != "" && e.User != t.User {
		return problem.New(fiber.StatusNotFound, "ticket-not-found", "no entry of this ticket's user at this place")
	}
	return nil
}

// poll tells a shopper where they stand. It costs one signature check and
// one Redis round trip.
func (a *api) poll(c *fiber.Ctx) error {
	cfg, err := a.queue(c)
	if err != nil {
		return err
	}
	t, err := a.ticketOf(c, cfg)
	if err != nil {
		return err
	}
	e, err := a.line.PollPresent(c.UserContext(), cfg.Name, t.Seq)
	if err != nil {
		return httpapi.LineDown(err)
	}
	if err := ofTicket(t, e); err != nil {
		return err
	}
	a.metrics.polls.Inc()
	str := ticketParam(c) // Issue writes one spelling per ticket (Parse refuses any other): no need to sign it again
	if e.Seq != t.Seq {
		t.Seq = e.Seq
		str = a.tickets.Issue(t)
	}
	return a.AnswerAt(c, fiber.StatusOK, cfg, t, str, e, a.earliest())
}

// leave takes the shopper out of line, or frees their slot.
func (a *api) leave(c *fiber.Ctx) error {
	cfg, err := a.queue(c)
	if err != nil {
		return err
	}
	t, err := a.ticketOf(c, cfg)
	if err != nil {
		return err
	}
	ctx := c.UserContext()
	id := "leave/" + cfg.Name + "/" + strconv.FormatUint(t.Seq, 10)
	body, err := event.Marshal(id, event.TypeLeft, t.User, a.now(), event.Left{Queue: cfg.Name, User: t.User, Seq: t.Seq})
	if err != nil {
		return err
	}
	if _, err := a.events.Publish(ctx, event.LeaveSubject(cfg.Name), body, jetstream.WithMsgID(id)); err != nil {
		return httpapi.Unavailable(fmt.Errorf("publish leave to %s: %w", cfg.Name, err), "the leave could not be recorded; retry")
	}
	had, err := a.line.Leave(ctx, cfg.Name, t.Seq, t.User)
	if err != nil {
		// The leave is recorded in the stream: the follower applies it.
		return httpapi.Unavailable(err, "the leave is recorded; it takes effect in a moment")
	}
	if had == waitqueue.Admitted { // this leave freed an admitted shopper's slot
		a.metrics.outcomes.WithLabelValues(cfg.Name, analytics.Left).Inc()
	}
	return c.SendStatus(fiber.StatusNoContent)
}

// answer writes a shopper's place (see shopper.Of: the one view the
// gateway and the notifier share), READY only once readyAt has passed on
// Redis's clock whatever the sync's error (clock.Synced.Earliest).
func (a *api) answer(c *fiber.Ctx, status int, cfg catalog.Config, t ticket.Ticket, e waitqueue.Entry) error {
	return a.AnswerAt(c, status, cfg, t, a.tickets.Issue(t), e, a.earliest())
}

// AnswerAt is answer with t's string str and the view taken at now (see
// admitAtOnce).
func (a *api) AnswerAt(c *fiber.Ctx, status int, cfg catalog.Config, t ticket.Ticket, str string, e waitqueue.Entry, now time.Time) error {
	v, err := shopper.Of(e, cfg, t.User, now, a.keys)
	if err != nil {
		return err
	}
	p := place{Ticket: str, Queue: cfg.Name, Status: string(v.Status), Position: v.Position,
		Events: a.eventsURL(cfg.Name, str), Token: v.Token, Reason: v.Reason, Stock: v.Stock, SKUs: v.SKUs, OpensAt: v.OpensAt,
		Notice: cfg.Notice}
	if v.Status != shopper.Closed {
		// A closed queue has no line to tell of: nobody in it is admitted
		// and nobody can join it (as the stream's closed event, it says
		// only why). The count of those it held stays the public view's.
		p.Waiting = &v.Waiting
	}
	if v.ETAKnown {
		p.ETASeconds = &v.ETA
	}
	switch {
	case v.Admitted:
		p.PollAfterMs = max(v.ReadyAt.Sub(a.now()).Milliseconds(), 1)
	case v.Status == shopper.Waiting:
		p.PollAfterMs = pollAfter(v.Position, v.ETA, v.ETAKnown, a.jitter()).Milliseconds()
	case v.Status == shopper.Ready:
		p.ReadyAt, p.ExpiresAt = &v.ReadyAt, &v.ExpiresAt
	case v.Status == shopper.PreQueue && v.OpensAt != nil:
		// Come back around the opening (spread over two seconds), at most
		// every 30 s meanwhile. The wait is capped before the jitter is
		// added: an opening centuries ahead saturates Sub, and the sum
		// would wrap around to a negative wait.
		wait := min(v.OpensAt.Sub(a.now()), 30*time.Second) + time.Duration(a.jitter()*2000)*time.Millisecond
		p.PollAfterMs = min(max(wait, time.Second), 30*time.Second).Milliseconds()
	}
	c.Set(fiber.HeaderLocation, "/v1/queues/"+cfg.Name+"/tickets/"+str)
	c.Set(fiber.HeaderCacheControl, "no-store")
	return sendPlace(c, status, p)
}

// eventsURL is where the notifier streams this ticket's events.
func (a *api) eventsURL(q, t string) string {
	path := "/v1/queues/" + q + "/tickets/" + url.PathEscape(t) + "/events"
	return a.notifierURL + path
}
