package door

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"math/rand/v2"

	"github.com/gofiber/fiber/v2"

	"usher/gateway/httpapi"
	"usher/gateway/lineapi"
	"usher/internal/catalog"
	"usher/internal/problem"
	"usher/internal/ticket"
	"usher/internal/waitqueue"
)

// The shadow line. In a queue with challenge suspects "shadow", a client
// whose address keeps failing the proof of work (ShadowAfter refused joins
// within about a sketch half-life) is not told so: its join answers 202
// WAITING like any other, with a ticket in a line that never moves. The
// shadow line stores nothing — no Redis key, no stream event, no place:
//
//   - A shadow ticket has the real ticket's format, queue, user and epoch,
//     signed with a key derived from the challenge secret instead of the
//     ticket secret, so the real handlers refuse it and the gateway knows
//     it from a real one by its signature alone.
//   - Its sequence is the position it was given (the back of the real line
//     at that moment) plus an offset derived from the secret, the queue
//     and the stream's epoch: a plausible sequence number that tells the
//     gateway the position again on every poll.
//   - A poll answers that position, frozen, with the real line's length
//     and admission rate (so waiting and the ETA look alive), through the
//     same view real polls use (shopper.Of); a leave answers 204.
//   - Before a scheduled drop opens every join is pre-queued, a suspect's
//     too: its sequence lies just below the offset (a random distance, so
//     no two look alike), and its polls answer PRE_QUEUE until the draw,
//     then a place among the drawn picked by that distance, frozen. After
//     the opening a suspect's join is placed behind the pre-queue still to
//     be drawn, as a real one is.
//
// What a careful bot could still notice: its position never changes, its
// ticket's events URL is refused by the notifier (which knows no shadow
// key: clients then poll, as the page does), and a shadow poll answers
// faster than a real one, which reads Redis (shadow polls read the line's
// figures at most once a second per queue).

// shadowJoin answers a suspect's join: 202 and a shadow ticket at the back
// of the line as it stands now. A join into a closed queue or one in
// maintenance never gets here (join refuses it before the proof check), so
// a suspect there is turned away like any other.
func (d *Door) shadowJoin(c *fiber.Ctx, cfg catalog.Config, user string) error {
	now := d.now()
	st, _, err := d.sample(c.UserContext(), cfg.Name, now)
	if err != nil {
		return httpapi.LineDown(err)
	}
	epoch := d.epoch()
	off := d.shadowOffset(cfg.Name, epoch)
	d.metrics.Shadowed.WithLabelValues(cfg.Name).Inc()
	if cfg.PreQueue(now) && !cfg.Drawn() {
		t := ticket.Ticket{Queue: cfg.Name, User: user, Epoch: epoch, Seq: off - 1 - rand.Uint64N(shadowPreSpan)}
		return d.shadowAnswer(c, fiber.StatusAccepted, cfg, t, 0, st)
	}
	pos := st.Waiting + st.PreQueue + 1 // the pre-queue still to be drawn goes ahead
	t := ticket.Ticket{Queue: cfg.Name, User: user, Epoch: epoch, Seq: off + uint64(pos)}
	return d.shadowAnswer(c, fiber.StatusAccepted, cfg, t, pos, st)
}

// shadowPreSpan is how far below the offset a pre-queued shadow ticket's
// sequence lies, at most.
const shadowPreSpan = 1 << 19

// shadowDrawnPlace is the place of a pre-queued shadow ticket whose
// sequence lies below off by 1 + r: none (0: PRE_QUEUE) while the drop
// awaits its draw, then one among the drawn, fixed by r.
func shadowDrawnPlace(cfg catalog.Config, off, seq uint64) int64 {
	if lineapi.AwaitsDraw(cfg) {
		return 0
	}
	drawn := uint64(1)
	if cfg.Lottery != nil && cfg.Lottery.Entries > 0 {
		drawn = uint64(cfg.Lottery.Entries)
	}
	return int64(1 + (off-1-seq)%drawn)
}

// ShadowTicket stands in front of poll and leave: a shadow ticket of a
// queue with suspects "shadow" gets its shadow answer; anything else goes
// on to the real handler.
func (d *Door) ShadowTicket(c *fiber.Ctx) error {
	cfg, ok := d.queues.Get(httpapi.PathParam(c, "queue"))
	if !ok || cfg.Challenge.Suspects != catalog.SuspectsShadow {
		return c.Next()
	}
	t, err := d.shadow.Parse(httpapi.PathParam(c, "ticket"))
	if err != nil {
		return c.Next()
	}
	// As the real handlers answer a ticket of another queue or epoch.
	if t.Queue != cfg.Name {
		return problem.New(fiber.StatusNotFound, "ticket-not-found", "the ticket belongs to another queue")
	}
	if t.Epoch != d.epoch() {
		return problem.New(fiber.StatusGone, "ticket-stale", "the line this ticket was for has been reset; join again")
	}
	off := d.shadowOffset(cfg.Name, t.Epoch)
	var pos int64
	switch {
	case t.Seq > off:
		pos = int64(t.Seq - off)
	case t.Seq < off && t.Seq >= off-shadowPreSpan:
		pos = shadowDrawnPlace(cfg, off, t.Seq)
	default:
		return problem.New(fiber.StatusUnauthorized, "invalid-ticket", "the ticket is not one this queue issued")
	}
	if c.Method() == fiber.MethodDelete {
		return c.SendStatus(fiber.StatusNoContent)
	}
	st, _, err := d.sample(c.UserContext(), cfg.Name, d.now())
	if err != nil {
		return httpapi.LineDown(err)
	}
	return d.shadowAnswer(c, fiber.StatusOK, cfg, t, pos, st)
}

// shadowAnswer writes a shadow ticket's place as answer writes a real one
// (the same function: no field a real answer has can be missing from it):
// position pos (0: pre-queued, no place yet), the line's real length (the
// pre-queue still to be drawn counted in, as a real poll counts it), pace
// and stock.
func (d *Door) shadowAnswer(c *fiber.Ctx, status int, cfg catalog.Config, t ticket.Ticket, pos int64, st waitqueue.Stats) error {
	e := waitqueue.Entry{Status: waitqueue.Waiting, Position: pos, Waiting: max(st.Waiting+st.PreQueue, pos),
		Rate: st.AdmitRatePerSec, Stock: st.Stock, SKUs: st.SKUsAvailable}
	if pos == 0 {
		e.Status, e.Position, e.Waiting = waitqueue.PreQueued, 0, st.Waiting
	}
	return d.places.AnswerAt(c, status, cfg, t, d.shadow.Issue(t), e, d.now())
}

// shadowOffset is what a shadow ticket's sequence adds to its position:
// 2^20 to 2^23+2^20, fixed per queue and epoch, unknowable without the
// secret.
func (d *Door) shadowOffset(q, epoch string) uint64 {
	m := hmac.New(sha256.New, d.seqKey)
	m.Write([]byte(q))
	m.Write([]byte{0})
	m.Write([]byte(epoch))
	return 1<<20 + binary.BigEndian.Uint64(m.Sum(nil))%(1<<23)
}
