package lineapi

import (
	"context"
	"time"

	"github.com/gofiber/fiber/v2"

	"usher/gateway/httpapi"
	"usher/internal/catalog"
	"usher/internal/problem"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/admission"
)

// HeaderInvite carries a single-use invite code on a join.
const HeaderInvite = "Usher-Invite"

// joinKind decides how a join enters the line: one with a valid invite
// code (taken here, once) past the line, in a scheduled drop's pre-queue
// as on an open queue (an unknown or used code is a 403 in both); an
// allow-listed user past the line too, once the drop is open (before, the
// lottery places them with everyone); anyone else, before the drop opens,
// the pre-queue, else at the back. It returns the invite code taken, so a
// join that cannot be recorded gives it back.
func (a *API) joinKind(c *fiber.Ctx, cfg catalog.Config, user string, now time.Time) (waitqueue.JoinKind, waitqueue.Invite, error) {
	pre := cfg.PreQueue(now) && !cfg.Drawn()
	if !pre && cfg.Allows(user) {
		return waitqueue.Priority, waitqueue.Invite{}, nil
	}
	if code := c.Get(HeaderInvite); code != "" {
		return a.spendInvite(c.UserContext(), cfg, code, now)
	}
	if pre {
		return waitqueue.PreQueue, waitqueue.Invite{}, nil
	}
	return waitqueue.InLine, waitqueue.Invite{}, nil
}

// spendInvite takes invite code of cfg's queue: a priority join, or a 403
// when the code is unknown, used or expired.
func (a *API) spendInvite(ctx context.Context, cfg catalog.Config, code string, now time.Time) (waitqueue.JoinKind, waitqueue.Invite, error) {
	inv, ok, err := a.invites.UseInvite(ctx, cfg.Name, code, now)
	if err != nil {
		return "", waitqueue.Invite{}, httpapi.LineDown(err)
	}
	if !ok {
		return "", waitqueue.Invite{}, problem.New(fiber.StatusForbidden, "invalid-invite", "the invite code is unknown, used or expired")
	}
	return waitqueue.Priority, inv, nil
}

// AwaitsDraw: cfg is a scheduled drop whose pre-queue is not drawn yet.
// Its ticks (waitqueue.Tick.AwaitDraw) admit nobody then; nor is a join
// admitted at once, which could admit one who joined after the opening
// ahead of the pre-queue still to be drawn.
func AwaitsDraw(cfg catalog.Config) bool {
	return cfg.OpensAt != nil && cfg.Lottery != nil && !cfg.Drawn()
}

// admitAtOnce answers a join with READY in the join's own answer when it
// can — no tick, no second request: every join of a passthrough queue, and
// a join into an empty line with a slot free (no crowd, no wait). The
// decision and its waits are the admission role's
// (admission.Admission.AdmitAtOnce); the gateway adds what only it knows:
// the queue's catalog entry (open, passthrough, a drop awaiting its draw —
// AwaitsDraw — the stock peers) and its clock.
//
// The answer's clock: an entry admitted by this call, or of a passthrough
// queue (whose ticks admit with no jitter), is ready at once — its readyAt
// is Redis's time of the admission, which has passed — so it is judged at
// readyAt when this host's clock, synced to Redis's within a round trip,
// is a moment behind it (else the join's own answer would say WAITING,
// first in line, for a millisecond).
func (a *API) admitAtOnce(ctx context.Context, cfg catalog.Config, epoch string, e waitqueue.Entry) (waitqueue.Entry, time.Time) {
	j := admission.Join{Queue: cfg.Name, Epoch: epoch, Entry: e,
		Passthrough: cfg.QueueMode() == catalog.ModePassthrough,
		Admits:      cfg.State == catalog.StateOpen && !AwaitsDraw(cfg),
		Limits: waitqueue.AtOnce{TokenTTL: time.Duration(cfg.TokenTTLSeconds) * time.Second,
			TickLength: time.Duration(cfg.TickMs) * time.Millisecond, StockAware: cfg.StockAwareness()},
		Wait: a.readyWait,
	}
	if j.Limits.StockAware {
		j.Limits.Share = waitqueue.Share{SKUs: cfg.Products(), Peers: a.queues.StockPeers(cfg)}
	}
	out, err := a.admission.AdmitAtOnce(ctx, a.line, j)
	if err != nil {
		a.log.Warn("admit at once: the next tick admits; the shopper's next poll or push says READY", "queue", cfg.Name, "seq", e.Seq, "err", err)
	}
	if out.ReadyNow {
		return out.Entry, a.readyClock(out.Entry)
	}
	return out.Entry, a.now()
}

// readyClock is this host's time, or an admitted entry's readyAt when the
// clock is a moment behind it (see admitAtOnce).
func (a *API) readyClock(e waitqueue.Entry) time.Time {
	at := a.now()
	if e.Status == waitqueue.Admitted && e.ReadyAt.After(at) && e.ReadyAt.Sub(at) < admission.AtOnceWait {
		return e.ReadyAt
	}
	return at
}

// PublicView is what anyone may read of a queue: GET /v1/queues/{q}.
type PublicView struct {
	Name     string         `json:"name"`
	State    string         `json:"state"`
	Mode     string         `json:"mode"`
	OpensAt  *time.Time     `json:"opensAt,omitempty"`
	ClosesAt *time.Time     `json:"closesAt,omitempty"`
	Lottery  *publicLottery `json:"lottery,omitempty"`
	Waiting  int64          `json:"waiting"`
	PreQueue int64          `json:"preQueue"`
}

// publicLottery is the lottery as anyone may see it: the commitment from
// the start; once drawn the seed, how many were drawn and the digest of
// their order — all a shopper needs to check a published pre-queue list
// against the draw, and their own place in it (docs/events.md, "Verifying a draw").
// Entries is there once drawn, 0 included: a verifier compares it with the
// length of the list it checked, and an empty draw's list is empty.
type publicLottery struct {
	Commitment  string     `json:"commitment"`
	Seed        string     `json:"seed,omitempty"`
	DrawnAt     *time.Time `json:"drawnAt,omitempty"`
	Entries     *int       `json:"entries,omitempty"`
	OrderDigest string     `json:"orderDigest,omitempty"`
}

// PublicQueue answers GET /v1/queues/{q}: no auth, no secret.
func (a *API) PublicQueue(c *fiber.Ctx) error {
	cfg, err := httpapi.Queue(c, a.queues)
	if err != nil {
		return err
	}
	st, err := a.line.Stats(c.UserContext(), cfg.Name)
	if err != nil {
		return httpapi.LineDown(err)
	}
	v := PublicView{Name: cfg.Name, State: cfg.State, Mode: cfg.QueueMode(), OpensAt: cfg.OpensAt, ClosesAt: cfg.ClosesAt,
		Waiting: st.Waiting, PreQueue: st.PreQueue, Lottery: publicLotteryOf(cfg.Lottery)}
	c.Set(fiber.HeaderCacheControl, "no-store")
	return c.JSON(v)
}

func publicLotteryOf(l *catalog.Lottery) *publicLottery {
	if l == nil {
		return nil
	}
	p := &publicLottery{Commitment: l.Commitment}
	if l.Drawn {
		n := l.Entries
		p.Seed, p.DrawnAt, p.Entries, p.OrderDigest = l.Seed, l.DrawnAt, &n, l.OrderDigest
	}
	return p
}
