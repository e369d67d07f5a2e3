package admin

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"strings"
	"time"
	"usher/gateway/httpapi"
	"usher/internal/catalog"
	"usher/internal/event"
	"usher/internal/lottery"
	"usher/internal/problem"

	"github.com/gofiber/fiber/v2"
)

// withLottery gives a scheduled queue its lottery: the one it had (a seed,
// once committed to, never changes), or fresh (see newLottery) the first
// time opensAt is set. Whatever lottery a request carried is not the
// operator's to set. An undrawn drop keeps an opening; a drawn one cannot
// move it past the draw.
func withLottery(cfg, prev catalog.Config, fresh *catalog.Lottery) (catalog.Config, error) {
	cfg.Lottery = prev.Lottery
	if cfg.Lottery != nil && !cfg.Lottery.Drawn && cfg.OpensAt == nil {
		// Without an opening nothing would ever draw the pre-queue: its
		// shoppers would wait unplaced for good while later joins pass
		// them. Open it instead (an opensAt now draws at the next tick).
		p := problem.New(fiber.StatusBadRequest, "invalid-config", "1 invalid field(s)")
		p.InvalidParams = []problem.Param{{Name: "opensAt", Reason: "a scheduled drop keeps its opensAt until its pre-queue is drawn: " +
			"move it (to now to open at once), or close the queue"}}
		return cfg, p
	}
	if l := cfg.Lottery; l != nil && l.Drawn && l.DrawnAt != nil && cfg.OpensAt != nil && cfg.OpensAt.After(*l.DrawnAt) &&
		(prev.OpensAt == nil || !cfg.OpensAt.Equal(*prev.OpensAt)) {
		// The drop opened and was drawn: an opening after the draw would
		// show a countdown while every join is admitted as it comes (the
		// lottery is spent, so nothing pre-queues), and a lottery anew
		// would re-roll the line's places. A next drop has a queue of its
		// own.
		p := problem.New(fiber.StatusBadRequest, "invalid-config", "1 invalid field(s)")
		p.InvalidParams = []problem.Param{{Name: "opensAt", Reason: "this drop was drawn at " + l.DrawnAt.UTC().Format(time.RFC3339) +
			": its opening cannot move past the draw (keep it, move it back or leave it out); schedule the next drop on a new queue"}}
		return cfg, p
	}
	if cfg.Lottery != nil || cfg.OpensAt == nil {
		return cfg, nil
	}
	if fresh == nil {
		// This gateway's copy showed a lottery the stored configuration
		// lacks: the queue was deleted and created again meanwhile.
		return cfg, httpapi.Unavailable(errors.New("lottery: the stored queue has none, this gateway's copy had one"), "the queue changed meanwhile; retry")
	}
	cfg.Lottery = fresh
	return cfg, nil
}

// newLottery draws a secret seed for cfg's lottery when cfg schedules a
// drop that has none yet (else nil), stores it in the seeds bucket —
// which this gateway may write and not read — and returns the lottery the
// catalog keeps: its commitment alone. A seed stored for a lottery that
// another request committed first stays unused.
func (a *API) newLottery(ctx context.Context, cfg catalog.Config) (*catalog.Lottery, error) {
	if cfg.OpensAt == nil {
		return nil, nil
	}
	if cur, ok := a.queues.Get(cfg.Name); ok && cur.Lottery != nil {
		return nil, nil
	}
	seed, err := lottery.NewSeed()
	if err != nil {
		return nil, err
	}
	l := &catalog.Lottery{Commitment: lottery.Commitment(seed)}
	if _, err := a.events.Publish(ctx, event.SeedSubject(cfg.Name, l.Commitment), fmt.Appendf(nil, "%x", seed)); err != nil {
		return nil, httpapi.Unavailable(fmt.Errorf("store the lottery seed of %s: %w", cfg.Name, err), "the drop could not be scheduled; retry")
	}
	return l, nil
}

// maxInvites bounds one request for invite codes, maxInviteTTL their
// lifetime (a year: far beyond a drop, well within a time.Duration).
const (
	maxInvites    = 10_000
	maxInviteTTL  = 365 * 24 * time.Hour
	inviteBodyErr = `the body must be {"count": 1..%d, "ttlSeconds": 0..%d} (ttlSeconds 0 or absent: 7 days)`
)

// CreateInvites answers POST /v1/admin/queues/{q}/invites {"count": n,
// "ttlSeconds": s}: n single-use codes that let their holder pass the line
// into the next free slot. Audited (the count, never the codes).
func (a *API) CreateInvites(c *fiber.Ctx) error {
	cfg, err := httpapi.Queue(c, a.queues)
	if err != nil {
		return err
	}
	var body struct {
		Count      int `json:"count"`
		TTLSeconds int `json:"ttlSeconds"`
	}
	if err := httpapi.DecodeBody(c.Body(), &body); err != nil || body.Count < 1 || body.Count > maxInvites ||
		body.TTLSeconds < 0 || body.TTLSeconds > int(maxInviteTTL/time.Second) {
		return problem.New(fiber.StatusBadRequest, "invalid-body", fmt.Sprintf(inviteBodyErr, maxInvites, int(maxInviteTTL/time.Second)))
	}
	ttl := time.Duration(body.TTLSeconds) * time.Second
	if ttl == 0 {
		ttl = 7 * 24 * time.Hour
	}
	now := a.now()
	expiresAt := now.Add(ttl)
	codes := make([]string, body.Count)
	for i := range codes {
		var b [10]byte
		if _, err := rand.Read(b[:]); err != nil {
			return err
		}
		codes[i] = strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
	}
	if err := a.line.AddInvites(c.UserContext(), cfg.Name, codes, now, expiresAt); err != nil {
		return httpapi.LineDown(err)
	}
	by := c.Get("X-Admin-User", "admin") + fmt.Sprintf(" (%d invite codes, valid %s)", body.Count, ttl)
	a.audit(c.UserContext(), by, cfg, cfg)
	c.Set(fiber.HeaderCacheControl, "no-store")
	return c.Status(fiber.StatusCreated).JSON(fiber.Map{"queue": cfg.Name, "codes": codes,
		"expiresAt": expiresAt.UTC()})
}
