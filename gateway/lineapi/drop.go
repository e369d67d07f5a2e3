package lineapi

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/gofiber/fiber/v2"

	"usher/gateway/httpapi"
	"usher/internal/catalog"
	"usher/internal/problem"
	"usher/internal/waitqueue"
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
	inv, ok, err := a.line.UseInvite(ctx, cfg.Name, code, now)
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
// a join into an empty line with a slot free (no crowd, no wait); never
// before a scheduled drop's draw (AwaitsDraw), as no tick admits then. The
// admission is the line's (waitqueue.Store.AdmitNow: FIFO, in one atomic
// step, by what the last tick recorded it obeyed — its limit, the adaptive
// controller's for an adaptive queue, what is left of its
// maxAdmitPerTick, nobody while it found admission paused by the payment
// breaker — and, for a stock-aware queue, by the units that could still
// be sold across every queue selling its SKUs, counted at that moment),
// taken once the admitter's follower has applied the join (a few
// milliseconds), so nobody who joined first is passed. Otherwise the entry
// is answered as it is.
//
// The answer's clock: an entry admitted by this call, or of a passthrough
// queue (whose ticks admit with no jitter), is ready at once — its readyAt
// is Redis's time of the admission, which has passed — so it is judged at
// readyAt when this host's clock, synced to Redis's within a round trip,
// is a moment behind it (else the join's own answer would say WAITING,
// first in line, for a millisecond).
func (a *API) admitAtOnce(ctx context.Context, cfg catalog.Config, epoch string, e waitqueue.Entry) (waitqueue.Entry, time.Time) {
	passthrough := cfg.QueueMode() == catalog.ModePassthrough
	alone := e.Status == waitqueue.Waiting && e.Position == 1 && e.Waiting == 1
	if passthrough && e.Status == waitqueue.Admitted {
		return e, a.readyClock(e) // a tick admitted it already
	}
	if cfg.State != catalog.StateOpen || AwaitsDraw(cfg) || e.Status != waitqueue.Waiting || !(passthrough || alone) {
		return e, a.now()
	}
	tick := time.Duration(cfg.TickMs) * time.Millisecond
	at := waitqueue.AtOnce{TokenTTL: time.Duration(cfg.TokenTTLSeconds) * time.Second, TickLength: tick,
		StockAware: cfg.StockAwareness()}
	if at.StockAware {
		at.Share = waitqueue.Share{SKUs: cfg.Products(), Peers: a.queues.StockPeers(cfg)}
	}
	deadline := time.Now().Add(admitAtOnceWait)
	if !passthrough {
		// FIFO: only once the follower has applied every join before this
		// one (milliseconds), so nobody who joined first is passed. A
		// passthrough entry goes in at once, whatever the follower applied:
		// nobody waits there.
		for {
			cur, err := a.line.Cursor(ctx, cfg.Name)
			if err != nil {
				a.log.Warn("admit at once: the cursor cannot be read; the next tick admits", "queue", cfg.Name, "seq", e.Seq, "err", err)
				return e, a.now()
			}
			if p := cur[waitqueue.StreamEntries]; p.StreamID == epoch && p.Seq >= e.Seq {
				break
			}
			if time.Now().After(deadline) {
				return e, a.now() // the follower is behind: the next tick admits
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	var admitted []uint64
	for {
		var err error
		if passthrough {
			admitted, err = a.line.AdmitEntry(ctx, cfg.Name, epoch, e.Seq, at)
		} else {
			admitted, err = a.line.AdmitNow(ctx, cfg.Name, epoch, at)
		}
		if errors.Is(err, waitqueue.ErrNotCurrent) && time.Now().Before(deadline) {
			// The last tick found the line behind the streams (usually the
			// admission it had just published), is late, or caught up
			// with readyAts that lie ahead, or used a later stock
			// reservation: the next one, a tick away, lifts it.
			time.Sleep(max(tick/4, 5*time.Millisecond))
			continue
		}
		if errors.Is(err, waitqueue.ErrNotCurrent) {
			return e, a.now() // still not current: the next tick admits
		}
		if err != nil {
			a.log.Warn("admit at once: the next tick admits", "queue", cfg.Name, "seq", e.Seq, "err", err)
			return e, a.now()
		}
		break
	}
	now, err := a.line.Poll(ctx, cfg.Name, e.Seq)
	if err != nil {
		a.log.Warn("admit at once: the admitted entry cannot be read; the shopper's next poll or push says READY", "queue", cfg.Name, "seq", e.Seq, "err", err)
		return e, a.now()
	}
	if passthrough || slices.Contains(admitted, e.Seq) {
		return now, a.readyClock(now)
	}
	return now, a.now()
}

// readyClock is this host's time, or an admitted entry's readyAt when the
// clock is a moment behind it (see admitAtOnce).
func (a *API) readyClock(e waitqueue.Entry) time.Time {
	at := a.now()
	if e.Status == waitqueue.Admitted && e.ReadyAt.After(at) && e.ReadyAt.Sub(at) < admitAtOnceWait {
		return e.ReadyAt
	}
	return at
}

// admitAtOnceWait bounds how long a join that could be admitted at once
// waits for the follower and for a tick that found the line current before
// it is answered WAITING (the next tick admits it; the shopper learns it by
// push or poll). A few ticks: the wait costs nobody a place.
const admitAtOnceWait = 500 * time.Millisecond

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
