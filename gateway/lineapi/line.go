// Package lineapi is the line's public API: a shopper joins a queue, polls
// their place and leaves it; anyone reads a queue's public figures. A join
// is published to JetStream — with the queue's other joins of the moment,
// as one message (group.go), or alone — and answered once the broker has
// stored it, with the exact place the line (Redis) gives it, admitted at
// once when nobody waits (drop.go).
package lineapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"usher/gateway/httpapi"
	"usher/internal/analytics"
	"usher/internal/catalog"
	"usher/internal/event"
	"usher/internal/pow"
	"usher/internal/problem"
	"usher/internal/ratelimit"
	"usher/internal/shopper"
	"usher/internal/ticket"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/admission"
)

// Line is the part of the line (Redis) the line API uses.
type Line interface {
	LookupLimited(ctx context.Context, q, user string, plan ratelimit.Plan) (waitqueue.Current, ratelimit.Decision, error)
	IngestJoined(ctx context.Context, q, epoch string, seq uint64, user string, prev uint64, kind waitqueue.JoinKind) (waitqueue.Entry, uint64, error)
	IngestJoins(ctx context.Context, q, epoch string, seq uint64, joins []waitqueue.ListedJoin) ([]waitqueue.Ingested, error)
	PollPresent(ctx context.Context, q string, seq uint64, every time.Duration) (waitqueue.Entry, error)
	Poll(ctx context.Context, q string, seq uint64) (waitqueue.Entry, error)
	Leave(ctx context.Context, q string, seq uint64, user string) (had waitqueue.Status, toRecord bool, err error)
	LeaveRecorded(ctx context.Context, q string, leaves ...waitqueue.UnrecordedLeave) error
	Stats(ctx context.Context, q string) (waitqueue.Stats, error)
}

// Invites are a drop's single-use invite codes (the drop role of the line).
type Invites interface {
	UseInvite(ctx context.Context, q, code string, now time.Time) (waitqueue.Invite, bool, error)
	ReturnInvite(ctx context.Context, q string, inv waitqueue.Invite, now time.Time) error
}

// Admission admits a join at once when nobody waits (the admission role of
// the line).
type Admission interface {
	AdmitAtOnce(ctx context.Context, line admission.Poller, j admission.Join) (admission.Outcome, error)
}

// Queues is the part of the catalog the line API reads.
type Queues interface {
	Get(name string) (catalog.Config, bool)
	StockPeers(cfg catalog.Config) []string
}

// Publisher is the part of JetStream the line API publishes on.
type Publisher interface {
	Publish(ctx context.Context, subj string, data []byte, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error)
}

// Tickets reads the tickets the gateway issues.
type Tickets interface {
	Issue(t ticket.Ticket) string
	Parse(str string) (ticket.Ticket, error)
}

// Door is the proof of work a join may have to show (package door).
type Door interface {
	// CheckProof lets a join through, spends its proof and returns it;
	// done says the door has answered the join itself.
	CheckProof(c *fiber.Ctx, cfg catalog.Config, user string) (spent pow.Proof, done bool, err error)
	// GiveBack unmarks a proof spent on a join that took no new place.
	GiveBack(ctx context.Context, q string, p pow.Proof)
}

// Users tells who the shopper is (package userauth).
type Users interface {
	Identify(c *fiber.Ctx) (string, error)
}

// Limits are the rate limits of a join (package throttle).
type Limits interface {
	JoinPlan(c *fiber.Ctx, cfg catalog.Config, user string) ratelimit.Plan
	Decided(c *fiber.Ctx, d ratelimit.Decision) error
}

// Deps are what the line API is built from.
type Deps struct {
	Line      Line
	Invites   Invites
	Admission Admission
	Queues    Queues
	Events    Publisher
	Tickets   Tickets
	Places    *Places
	Door      Door
	Users     Users
	Limits    Limits
	Now       func() time.Time
	// Earliest is the earliest Redis's time can be now
	// (clock.Synced.Earliest): READY is told once readyAt has passed by it.
	Earliest func() time.Time
	// Epoch is the entries stream's identity (see bus.Identities): tickets
	// and token ids carry it.
	Epoch   func() string
	Log     *slog.Logger
	Metrics *Metrics
	// Grouping gathers a queue's concurrent joins into one record (Off:
	// each join its own).
	Grouping Grouping
	// InFlight bounds the joins this gateway answers at once (nil: no
	// bound; see package inflight). Past it a join is refused at once,
	// 503 with Retry-After, before it costs a Redis call: under more joins
	// than the stack can answer, the ones it takes keep their latency and
	// the rest learn at once to come back, rather than every join waiting
	// until its client gives up.
	InFlight InFlight
	// ReadyWait bounds how long a join that can be admitted at once waits
	// for it in its own answer (zero: admission.AtOnceWait; see
	// admitAtOnce).
	ReadyWait time.Duration
}

// InFlight is a bound on the joins answered at once: Take takes a place
// or reports none is free, Done gives back the place taken at started,
// Bound says how many there are now.
type InFlight interface {
	Take() (started time.Time, ok bool)
	Done(started time.Time)
	Bound() int
}

// API serves the line's public API. It is safe for concurrent use.
type API struct {
	line      Line
	invites   Invites
	admission Admission
	queues    Queues
	events    Publisher
	tickets   Tickets
	places    *Places
	door      Door
	users     Users
	limits    Limits
	now       func() time.Time
	earliest  func() time.Time
	epoch     func() string
	log       *slog.Logger
	metrics   *Metrics
	groups    *groups // nil: every join its own record
	readyWait time.Duration

	inFlight InFlight
}

// New returns the line API of deps.
func New(deps Deps) *API {
	a := &API{line: deps.Line, invites: deps.Invites, admission: deps.Admission, queues: deps.Queues, events: deps.Events, tickets: deps.Tickets, places: deps.Places,
		door: deps.Door, users: deps.Users, limits: deps.Limits, now: deps.Now, earliest: deps.Earliest, epoch: deps.Epoch,
		log: deps.Log, metrics: deps.Metrics, inFlight: deps.InFlight, readyWait: deps.ReadyWait}
	if a.inFlight != nil && a.metrics != nil {
		a.metrics.bound.Store(&a.inFlight)
	}
	if !deps.Grouping.Off {
		a.groups = newGroups(deps.Grouping, a)
	}
	return a
}

// Metrics are the line API's metrics.
type Metrics struct {
	joins prometheus.Counter
	polls prometheus.Counter
	// groups counts the usher.joins.v2 messages stored, gathering the
	// joins gathered or being recorded (group.go).
	groups    prometheus.Counter
	gathering prometheus.Gauge
	// shed counts the joins refused past Deps.InFlight; bound is that
	// bound, which usher_joins_in_flight_bound reads.
	shed  prometheus.Counter
	bound atomic.Pointer[InFlight]
	// outcomes counts the admitted shoppers who left (package analytics):
	// the leave that freed their slot.
	outcomes *prometheus.CounterVec
}

// NewMetrics registers the line API's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		joins: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "usher_joins_total", Help: "Joins stored in JetStream.",
		}),
		polls: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "usher_polls_total", Help: "Polls answered.",
		}),
		groups: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "usher_join_groups_total", Help: "Groups of joins stored in JetStream, one usher.joins.v2 message each.",
		}),
		gathering: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "usher_joins_gathering", Help: "Join requests waiting for their group to be stored and put in line.",
		}),
		shed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "usher_joins_shed_total", Help: "Joins refused with 503 because the gateway was answering as many as its bound (usher_joins_in_flight_bound).",
		}),
		outcomes: analytics.NewOutcomes(),
	}
	reg.MustRegister(m.joins, m.polls, m.groups, m.gathering, m.shed, m.outcomes,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "usher_joins_in_flight_bound",
			Help: "The most joins the gateway answers at once now: USHER_JOINS_IN_FLIGHT, lowered while joins take longer than USHER_JOIN_LATENCY_TARGET.",
		}, func() float64 {
			if b := m.bound.Load(); b != nil {
				return float64((*b).Bound())
			}
			return 0
		}))
	return m
}

// Forget drops every series of queue q, once it is deleted.
func (m *Metrics) Forget(q string) {
	m.outcomes.DeletePartialMatch(prometheus.Labels{"queue": q})
}

// joining is a join that may be admitted: its shopper, queue, the
// shopper's current entry in its line, and when it came.
type joining struct {
	user string
	cfg  catalog.Config
	cur  waitqueue.Current
	now  time.Time
}

// Join puts the shopper in line: 202 with a new ticket, or 200 with the
// ticket they already hold while they are in line or admitted.
func (a *API) Join(c *fiber.Ctx) error {
	if a.inFlight != nil {
		started, ok := a.inFlight.Take()
		if !ok {
			a.metrics.shed.Inc()
			return errBusy
		}
		defer a.inFlight.Done(started)
	}
	j, err := a.admissible(c)
	if err != nil {
		return err
	}
	proof, done, err := a.door.CheckProof(c, j.cfg, j.user)
	if done || err != nil {
		return err
	}
	// The proof buys a new place in line: a join refused before its
	// publish, or answered with the place the shopper already holds,
	// bought none and gives it back. One the stream recorded bought one,
	// even when its place cannot be read after (a 503): the follower puts
	// it in line.
	bought, err := a.enter(c, j)
	if !bought {
		a.door.GiveBack(c.UserContext(), j.cfg.Name, proof)
	}
	return err
}

// errBusy is the 503 of a join past Deps.InFlight.
var errBusy = problem.Problem{Type: "https://usher.dev/problems/unavailable", Title: "Service Unavailable",
	Status: fiber.StatusServiceUnavailable, Detail: "the waiting room is taking as many joins as it can answer; retry in a moment", RetryAfter: 1}

// admissible reads who joins which queue and charges the join to its
// rate limits, and refuses it where the queue turns every join away.
func (a *API) admissible(c *fiber.Ctx) (joining, error) {
	user, err := a.users.Identify(c)
	if err != nil {
		return joining{}, err
	}
	cfg, err := httpapi.Queue(c, a.queues)
	if err != nil {
		return joining{}, err
	}
	// The rate limits and the user's current entry, in one round trip.
	cur, err := a.lookupJoin(c, cfg, user)
	if err != nil {
		return joining{}, err
	}
	// A closed queue or one in maintenance turns every join away, before
	// asking for a proof: a client is not made to solve a challenge for a
	// place it cannot have.
	now := a.now()
	if p := closedProblem(cfg, now); p != nil {
		return joining{}, p
	}
	if cfg.QueueMode() == catalog.ModeReject {
		return joining{}, maintenance(cfg)
	}
	return joining{user: user, cfg: cfg, cur: cur, now: now}, nil
}

// lookupJoin charges a join to its client IP and its user and looks the
// user up in the line, in one Redis round trip (waitqueue.LookupLimited):
// a 429 when a limit refuses.
func (a *API) lookupJoin(c *fiber.Ctx, cfg catalog.Config, user string) (waitqueue.Current, error) {
	cur, d, err := a.line.LookupLimited(c.UserContext(), cfg.Name, user, a.limits.JoinPlan(c, cfg, user))
	if err != nil {
		return cur, httpapi.LineDown(err)
	}
	return cur, a.limits.Decided(c, d)
}

// enter answers a join with the place the shopper holds, or records it
// and answers with its new place. bought reports whether it took a new
// place: the stream recorded it and it is not one the shopper held.
func (a *API) enter(c *fiber.Ctx, j joining) (bought bool, err error) {
	ctx, cfg := c.UserContext(), j.cfg
	epoch := a.epoch()
	prev := j.cur.Seq
	if j.cur.Found && j.cur.Status.Live() {
		e, err := a.line.PollPresent(ctx, cfg.Name, prev, cfg.PresenceEvery())
		if err != nil {
			return false, httpapi.LineDown(err)
		}
		return false, a.answer(c, fiber.StatusOK, cfg, ticket.Ticket{Queue: cfg.Name, User: j.user, Epoch: epoch, Seq: e.Seq}, e)
	}
	if limit := cfg.UserLimit(); len(cfg.Products()) > 0 && j.cur.Bought >= limit {
		return false, problem.New(fiber.StatusForbidden, "already-purchased",
			"this user bought "+strconv.Itoa(j.cur.Bought)+" unit(s) in this queue, the most one user may")
	}
	// Before a scheduled drop opens, a join enters the pre-queue (the
	// lottery places it); an allow-listed user or an invite code passes the
	// line.
	kind, invite, err := a.joinKind(c, cfg, j.user, j.now)
	if err != nil {
		return false, err
	}
	if a.groups != nil {
		return a.enterGroup(c, j, kind, invite)
	}
	ack, err := a.record(ctx, j, kind, invite)
	if err != nil {
		return false, err
	}
	a.metrics.joins.Inc()
	e, place, err := a.line.IngestJoined(ctx, cfg.Name, epoch, ack.Sequence, j.user, prev, kind)
	if e, err = a.settle(ctx, cfg, e, err); err != nil {
		return true, err
	}
	return a.answerJoin(c, cfg, epoch, j.user, e, place, ack.Duplicate)
}

// answerJoin answers a recorded join whose entry in line is e and whose
// own place is place: 202 with a new ticket when the join took its place
// (e is at it), else 200 with the place the user holds — a double click's
// second join (second) or one the line resolved to the user's live entry.
// bought reports a new place.
func (a *API) answerJoin(c *fiber.Ctx, cfg catalog.Config, epoch, user string, e waitqueue.Entry, place uint64, second bool) (bought bool, err error) {
	status := fiber.StatusAccepted
	if second || e.Seq != place {
		status, bought = fiber.StatusOK, false
	} else {
		bought = true
	}
	at := a.now()
	if e.Seq == place {
		e, at = a.admitAtOnce(c.UserContext(), cfg, epoch, e)
	}
	t := ticket.Ticket{Queue: cfg.Name, User: user, Epoch: epoch, Seq: e.Seq}
	return bought, a.places.AnswerAt(c, status, cfg, t, a.tickets.Issue(t), e, at)
}

// record publishes join j of kind to the entries stream. The id names this
// user's attempt after their previous entry, so two concurrent joins (a
// double click) dedupe to one place in line. A join the stream did not
// record gives back the invite code it took.
func (a *API) record(ctx context.Context, j joining, kind waitqueue.JoinKind, invite waitqueue.Invite) (*jetstream.PubAck, error) {
	cfg, prev := j.cfg, j.cur.Seq
	id := cfg.Name + "/" + j.user + "/" + strconv.FormatUint(prev, 10)
	body, err := event.Marshal(id, event.TypeJoined, j.user, j.now, event.Joined{Queue: cfg.Name, User: j.user,
		JoinedAt: j.now.UTC(), Prev: prev, PreQueue: kind == waitqueue.PreQueue, Priority: kind == waitqueue.Priority})
	if err != nil {
		return nil, err
	}
	ack, err := a.events.Publish(ctx, event.EnterSubject(cfg.Name), body, jetstream.WithMsgID(id))
	if err != nil {
		a.giveBack(cfg.Name, invite)
		return nil, httpapi.Unavailable(fmt.Errorf("publish join to %s: %w", cfg.Name, err), "the line could not record the join; retry")
	}
	return ack, nil
}

// settle reads the outcome of the line's ingest of a recorded join (e,
// its entry; err, the ingest's): the entry, or the 503 to answer. The gateway puts a join it recorded in line
// itself so its answer carries the exact place; the admitter's follower
// applies the record too, and is what guarantees it is in line.
func (a *API) settle(ctx context.Context, cfg catalog.Config, e waitqueue.Entry, err error) (waitqueue.Entry, error) {
	switch {
	case errors.Is(err, waitqueue.ErrStale), errors.Is(err, waitqueue.ErrConflict):
		// The entries stream was recreated and this gateway or the line
		// has not caught up yet: the join is recorded; the follower puts
		// it in line. Ask the shopper to come back in a moment.
		return e, httpapi.Unavailable(err, "the line is being reset; retry in a moment")
	case err != nil:
		// The join is recorded in the stream: the follower puts it in line.
		return e, httpapi.Unavailable(err, "the join is recorded but its place cannot be read now; join again to see it")
	}
	if e.Status == waitqueue.Admitted {
		// Admitted between the follower's copy and this one (a fast tick):
		// read the whole record, the token's included.
		if e, err = a.line.PollPresent(ctx, cfg.Name, e.Seq, cfg.PresenceEvery()); err != nil {
			return e, httpapi.LineDown(err)
		}
	}
	return e, nil
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
func (a *API) ticketOf(c *fiber.Ctx, cfg catalog.Config) (ticket.Ticket, error) {
	t, err := a.tickets.Parse(ticketParam(c)) // the path's, or a page form's (WithTicket)
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

// formTicketKey holds, in a request's locals, the ticket a page's form
// carries (WithTicket).
type formTicketKey struct{}

// WithTicket names tkt as the request's ticket, where a poll reads the
// path's: the page's forms carry the ticket in a field, never in a URL.
func WithTicket(c *fiber.Ctx, tkt string) { c.Locals(formTicketKey{}, tkt) }

// ticketParam is the ticket a request names: the form's, else the path's.
func ticketParam(c *fiber.Ctx) string {
	if t, ok := c.Locals(formTicketKey{}).(string); ok {
		return t
	}
	return httpapi.PathParam(c, "ticket")
}

// ofTicket checks that the entry Redis holds for the ticket's sequence is
// the ticket's user's (it always is, unless the line was reset under it).
func ofTicket(t ticket.Ticket, e waitqueue.Entry) error {
	if e.User != "" && e.User != t.User {
		return problem.New(fiber.StatusNotFound, "ticket-not-found", "no entry of this ticket's user at this place")
	}
	return nil
}

// Poll tells a shopper where they stand. It costs one signature check and
// one Redis round trip.
func (a *API) Poll(c *fiber.Ctx) error {
	cfg, err := httpapi.Queue(c, a.queues)
	if err != nil {
		return err
	}
	t, err := a.ticketOf(c, cfg)
	if err != nil {
		return err
	}
	e, err := a.line.PollPresent(c.UserContext(), cfg.Name, t.Seq, cfg.PresenceEvery())
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
	return a.places.AnswerAt(c, fiber.StatusOK, cfg, t, str, e, a.earliest())
}

// Leave takes the shopper out of line, or frees their slot.
func (a *API) Leave(c *fiber.Ctx) error {
	cfg, err := httpapi.Queue(c, a.queues)
	if err != nil {
		return err
	}
	t, err := a.ticketOf(c, cfg)
	if err != nil {
		return err
	}
	if _, err := a.LeaveEntry(c.UserContext(), cfg.Name, t.Seq, t.User); err != nil {
		return err
	}
	return c.SendStatus(fiber.StatusNoContent)
}

// LeaveEntry takes entry seq of user in q out of line, or frees its slot,
// then records the leave on the entries stream, and returns the status the
// entry had: a shopper's own leave, and what the proxy gate frees a pass's
// slot with (its completePath, its idle sweep). Leaving twice is harmless.
//
// The line goes first so that the stream holds a leave only if it took
// effect, and so before any order's claim of the token: a leave that
// finds the token claimed changes nothing and is not recorded, and a
// replay after a Redis loss, applying the stream's leaves before its order
// requests, never refuses an order the line accepted. An admitted entry's
// slot is freed once the leave is recorded (LeaveRecorded), so no slot is
// given again before the stream says it came back. A leave the line took
// whose record fails here is recorded, and its slot freed, by the
// admitter's next tick; the shopper's retry records it too.
func (a *API) LeaveEntry(ctx context.Context, q string, seq uint64, user string) (waitqueue.Status, error) {
	had, toRecord, err := a.line.Leave(ctx, q, seq, user)
	if err != nil {
		return "", httpapi.Unavailable(err, "the leave could not be taken; retry")
	}
	if had == waitqueue.Admitted { // this leave freed an admitted shopper's slot
		a.metrics.outcomes.WithLabelValues(q, analytics.Left).Inc()
	}
	if !toRecord {
		return had, nil
	}
	id, body, err := event.NewLeft(event.Left{Queue: q, User: user, Seq: seq}, "", a.now())
	if err != nil {
		return "", err
	}
	if _, err := a.events.Publish(ctx, event.LeaveSubject(q), body, jetstream.WithMsgID(id)); err != nil {
		return "", httpapi.Unavailable(fmt.Errorf("record leave of %s/%d: %w", q, seq, err), "the leave is taken but not recorded yet; retry")
	}
	if err := a.line.LeaveRecorded(ctx, q, waitqueue.UnrecordedLeave{Seq: seq, User: user}); err != nil {
		a.log.Warn("leave recorded, not forgotten: the admitter records it again", "queue", q, "seq", seq, "err", err)
	}
	return had, nil
}

// answer writes a shopper's place (see shopper.Of: the one view the
// gateway and the notifier share), READY only once readyAt has passed on
// Redis's clock whatever the sync's error (clock.Synced.Earliest).
func (a *API) answer(c *fiber.Ctx, status int, cfg catalog.Config, t ticket.Ticket, e waitqueue.Entry) error {
	return a.places.AnswerAt(c, status, cfg, t, a.tickets.Issue(t), e, a.earliest())
}
