package lineapi

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/nats-io/nats.go/jetstream"

	"usher/gateway/httpapi"
	"usher/internal/event"
	"usher/internal/problem"
	"usher/internal/waitqueue"
)

// Group commit: the joins of one queue that reach the gateway together are
// recorded by one publish of a usher.joins.v2 message and put in line by one
// ingest call. The stream leader and the queue's Redis shard are the single
// writers every join of a queue passes: each stored message and each script
// call costs them far more than one more join listed in it, so a crowd in
// one queue costs them per group, not per join.
//
// A gateway records one group of a queue at a time, in the order they
// closed, so its groups reach the line in stream order (a double click
// split over two of them resolves to the first one's place, as a rebuild
// from the stream does). A group closes when it is full, or when no group
// of its queue is being recorded: a lone shopper's join goes at once, and
// the joins that arrive while a group is being recorded gather into the
// next, so groups grow with the load and no join waits for a timer. A
// linger adds a bounded wait for more.

// Grouping is how the line API gathers a queue's concurrent joins.
type Grouping struct {
	// Off records every join as its own usher.joined.v1 message, as a
	// gateway that does not group does: for a queue whose gateways cannot
	// all switch together (docs/events.md, "Places").
	Off bool
	// Linger is how long the first join of a group waits for others
	// before it is recorded; 0: no wait — recorded as soon as no group of
	// the queue is being recorded.
	Linger time.Duration
	// Size is the most joins one message lists (at most event.MaxJoins):
	// a group that reaches it is recorded at once.
	Size int
	// Backlog is the most joins of one queue gathered or being recorded at
	// once: past it, while the publishes are slow, a join is refused with
	// 503 and Retry-After rather than held in a growing heap.
	Backlog int
	// After runs f once d has passed and returns a stop that keeps it from
	// running (time.AfterFunc's contract); nil: time.AfterFunc.
	After func(d time.Duration, f func()) (stop func() bool)
	// Instance names this gateway in its messages' Nats-Msg-Id
	// ("joins/<q>/<instance>/<n>"): unique per group across gateways and
	// restarts, so the stream never drops one group as another's repeat,
	// and the same across a retry of one publish.
	Instance string
}

// NewInstance is a fresh Grouping.Instance: "gw-" and ten random base-36
// digits, drawn at each start so a restarted gateway's groups never take
// the ids of its last run's within the stream's duplicate window.
func NewInstance() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	// Below 36¹⁰: at most ten digits.
	n := binary.BigEndian.Uint64(b[:]) % 3656158440062976
	s := strconv.FormatUint(n, 36)
	return "gw-" + strings.Repeat("0", 10-len(s)) + s
}

// DefaultBacklog is Grouping.Backlog for a Size: as many joins as sixteen
// full groups.
func DefaultBacklog(size int) int { return 16 * size }

// publishTimeout bounds one group's publish and ingest: no request's
// context rules them, since they serve every join of the group.
const publishTimeout = 5 * time.Second

// groups gathers the joins of each queue (a gathering per queue).
type groups struct {
	Grouping
	api     *API
	mu      sync.Mutex
	queues  map[string]*gathering
	counter atomic.Uint64
}

// gathering is one queue's joins: the group still open, the closed ones
// waiting their turn, whether one is being recorded, and how many of the
// queue's joins are gathered or being recorded.
type gathering struct {
	open      *group
	closed    []*group
	recording bool
	pending   int
}

// group is the joins one message lists, in their order, and what became of
// them.
type group struct {
	queue string
	joins []*grouped
	// waiting counts the requests that wait for the group: its joins and
	// the double clicks that wait with one of them.
	waiting int
	stop    func() bool // the linger's timer (nil: none)
	// Set once recorded, before done closes.
	epoch string
	seq   uint64 // the message's stream sequence; 0: not recorded
	err   error  // why not
	done  chan struct{}
}

// grouped is one join of a group and, once the group is recorded, the
// line's answer for it.
type grouped struct {
	joining
	kind   waitqueue.JoinKind
	invite waitqueue.Invite
	in     waitqueue.Ingested
}

func newGroups(g Grouping, a *API) *groups {
	if g.After == nil {
		g.After = func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }
	}
	if g.Size <= 0 || g.Size > event.MaxJoins {
		g.Size = event.MaxJoins
	}
	if g.Backlog <= 0 {
		g.Backlog = DefaultBacklog(g.Size)
	}
	if g.Instance == "" {
		g.Instance = NewInstance()
	}
	return &groups{Grouping: g, api: a, queues: map[string]*gathering{}}
}

// errBacklog is the 503 of a join past a queue's backlog.
var errBacklog = problem.Problem{Type: "https://usher.dev/problems/unavailable", Title: "Service Unavailable",
	Status: fiber.StatusServiceUnavailable, Detail: "too many joins of this queue are being recorded; retry in a moment", RetryAfter: 1}

// add puts join j in its queue's open group, or opens one, and returns the
// group and j's place in it. A join of a user whose join with the same
// previous entry is in the open group already (a double click) is not
// listed again: it gets that join (second true) and gives back the invite
// code it took. A join past the backlog is refused.
func (gs *groups) add(j *grouped) (g *group, at *grouped, second bool, err error) {
	q := j.cfg.Name
	gs.mu.Lock()
	qg := gs.queues[q]
	if qg == nil {
		qg = &gathering{}
		gs.queues[q] = qg
	}
	if qg.open != nil {
		for _, o := range qg.open.joins {
			if o.user == j.user && o.cur.Seq == j.cur.Seq {
				g = qg.open
				g.waiting++
				gs.api.metrics.gathering.Inc()
				gs.mu.Unlock()
				gs.api.giveBack(q, j.invite)
				return g, o, true, nil
			}
		}
	}
	if qg.pending >= gs.Backlog {
		gs.mu.Unlock()
		gs.api.giveBack(q, j.invite)
		return nil, nil, false, errBacklog
	}
	qg.pending++
	gs.api.metrics.gathering.Inc()
	g = qg.open
	if g == nil {
		g = &group{queue: q, done: make(chan struct{})}
		qg.open = g
		if gs.Linger > 0 {
			g.stop = gs.After(gs.Linger, func() { gs.due(qg, g) })
		}
	}
	g.joins = append(g.joins, j)
	g.waiting++
	if len(g.joins) >= gs.Size {
		gs.closeLocked(qg, g)
	}
	next := gs.nextLocked(qg)
	gs.mu.Unlock()
	if next != nil {
		go gs.record(qg, next)
	}
	return g, j, false, nil
}

// closeLocked closes g, qg's open group: no join is added to it any more,
// and it waits its turn to be recorded. gs.mu is held.
func (gs *groups) closeLocked(qg *gathering, g *group) {
	if qg.open != g {
		return
	}
	qg.open = nil
	if g.stop != nil {
		g.stop()
	}
	qg.closed = append(qg.closed, g)
}

// nextLocked is the group of qg to record now (nil: none, or one is being
// recorded), marked as being recorded. Without a linger the open group
// closes once nothing is recorded before it. gs.mu is held.
func (gs *groups) nextLocked(qg *gathering) *group {
	if qg.recording {
		return nil
	}
	if len(qg.closed) == 0 && qg.open != nil && gs.Linger == 0 {
		gs.closeLocked(qg, qg.open)
	}
	if len(qg.closed) == 0 {
		return nil
	}
	g := qg.closed[0]
	qg.closed = qg.closed[1:]
	qg.recording = true
	return g
}

// due closes g once its linger has passed, unless it closed before (full),
// and records it when its turn has come.
func (gs *groups) due(qg *gathering, g *group) {
	gs.mu.Lock()
	gs.closeLocked(qg, g)
	next := gs.nextLocked(qg)
	gs.mu.Unlock()
	if next != nil {
		gs.record(qg, next)
	}
}

// record publishes g as one usher.joins.v2 message and puts its joins in
// line with one ingest call, then tells every join of g. A group the
// stream did not record gives back its invite codes: none of its joins
// took a place.
func (gs *groups) record(qg *gathering, g *group) {
	a := gs.api
	defer func() {
		gs.mu.Lock()
		qg.pending -= len(g.joins)
		qg.recording = false
		waiting := g.waiting // no request joins a group once it is closed
		next := gs.nextLocked(qg)
		if qg.pending == 0 && gs.queues[g.queue] == qg {
			delete(gs.queues, g.queue) // a queue that went quiet, or was deleted, holds nothing
		}
		gs.mu.Unlock()
		a.metrics.gathering.Sub(float64(waiting))
		close(g.done)
		if next != nil {
			go gs.record(qg, next)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
	defer cancel()
	g.epoch = a.epoch()
	now := a.now()
	data := event.Joins{Queue: g.queue, Joins: make([]event.Join, len(g.joins))}
	listed := make([]waitqueue.ListedJoin, len(g.joins))
	for i, j := range g.joins {
		data.Joins[i] = event.Join{User: j.user, JoinedAt: j.now.UTC(), Prev: j.cur.Seq,
			PreQueue: j.kind == waitqueue.PreQueue, Priority: j.kind == waitqueue.Priority}
		listed[i] = waitqueue.ListedJoin{User: j.user, Prev: j.cur.Seq, Kind: j.kind}
	}
	id := "joins/" + g.queue + "/" + gs.Instance + "/" + strconv.FormatUint(gs.counter.Add(1), 10)
	body, err := event.Marshal(id, event.TypeJoins, g.queue, now, data)
	if err != nil {
		g.err = err
		gs.giveBackAll(g)
		return
	}
	ack, err := a.events.Publish(ctx, event.EnterSubject(g.queue), body, jetstream.WithMsgID(id))
	if err != nil {
		g.err = httpapi.Unavailable(fmt.Errorf("publish joins to %s: %w", g.queue, err), "the line could not record the join; retry")
		gs.giveBackAll(g)
		return
	}
	g.seq = ack.Sequence
	a.metrics.joins.Add(float64(len(g.joins)))
	a.metrics.groups.Inc()
	ins, err := a.line.IngestJoins(ctx, g.queue, g.epoch, g.seq, listed)
	for i, j := range g.joins {
		if err != nil {
			j.in = waitqueue.Ingested{Err: err}
			continue
		}
		j.in = ins[i]
	}
}

// giveBackAll gives back the invite codes g's joins took.
func (gs *groups) giveBackAll(g *group) {
	for _, j := range g.joins {
		gs.api.giveBack(g.queue, j.invite)
	}
}

// giveBack returns invite code inv of queue q, taken by a join that took
// no place.
func (a *API) giveBack(q string, inv waitqueue.Invite) {
	if inv.Code == "" {
		return
	}
	if err := a.invites.ReturnInvite(context.Background(), q, inv, a.now()); err != nil {
		a.log.Error("invite code lost with a join that was not recorded", "queue", q, "err", err)
	}
}

// enterGroup records join j of kind in its queue's group and answers it
// with its place once the group is recorded: 202 for a new place, 200 for
// the place the user already held or a double click's second join, as
// enter answers a join on its own.
func (a *API) enterGroup(c *fiber.Ctx, j joining, kind waitqueue.JoinKind, invite waitqueue.Invite) (bought bool, err error) {
	ctx, cfg := c.UserContext(), j.cfg
	g, at, second, err := a.groups.add(&grouped{joining: j, kind: kind, invite: invite})
	if err != nil {
		return false, err
	}
	select {
	case <-g.done:
	case <-ctx.Done():
		// The group may yet be recorded: the shopper's retry finds the
		// place it took (the line knows them by user).
		return false, httpapi.Unavailable(ctx.Err(), "the join may be recorded; join again to see its place")
	}
	if g.err != nil {
		return false, g.err
	}
	e, err := a.settle(ctx, cfg, at.in.Entry, at.in.Err)
	if err != nil {
		return !second, err
	}
	return a.answerJoin(c, cfg, g.epoch, j.user, e, at.in.Place, second)
}
