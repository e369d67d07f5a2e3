package lineapi

import (
	"net/url"
	"time"

	"github.com/gofiber/fiber/v2"

	"usher/internal/catalog"
	"usher/internal/shopper"
	"usher/internal/ticket"
	"usher/internal/waitqueue"
)

// Place is the body of join and poll answers.
type Place struct {
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

// Places writes shoppers' places as the line API answers them: joins,
// polls, and the door's shadow tickets, which must read as real ones.
type Places struct {
	keys        shopper.Signer // mints a READY shopper's entry token
	notifierURL string         // the notifier's public base URL, where each place's events stream
	now         func() time.Time
	jitter      func() float64 // uniform in [0,1): spreads the polls
}

// NewPlaces writes places whose entry tokens keys sign and whose events
// the notifier at notifierURL streams; jitter spreads the polls (uniform
// in [0,1), safe for concurrent use).
func NewPlaces(keys shopper.Signer, notifierURL string, now func() time.Time, jitter func() float64) *Places {
	return &Places{keys: keys, notifierURL: notifierURL, now: now, jitter: jitter}
}

// AnswerAt writes a shopper's place (see shopper.Of: the one view the
// gateway and the notifier share): t, written str, whose entry the line
// holds as e, viewed at now (see admitAtOnce).
func (p *Places) AnswerAt(c *fiber.Ctx, status int, cfg catalog.Config, t ticket.Ticket, str string, e waitqueue.Entry, now time.Time) error {
	v, err := shopper.Of(e, cfg, t.User, now, p.keys)
	if err != nil {
		return err
	}
	pl := Place{Ticket: str, Queue: cfg.Name, Status: string(v.Status), Position: v.Position,
		Events: p.EventsURL(cfg.Name, str), Token: v.Token, Reason: v.Reason, Stock: v.Stock, SKUs: v.SKUs, OpensAt: v.OpensAt,
		Notice: cfg.Notice}
	if v.Status != shopper.Closed {
		// A closed queue has no line to tell of: nobody in it is admitted
		// and nobody can join it (as the stream's closed event, it says
		// only why). The count of those it held stays the public view's.
		pl.Waiting = &v.Waiting
	}
	if v.ETAKnown {
		pl.ETASeconds = &v.ETA
	}
	switch {
	case v.Admitted:
		pl.PollAfterMs = max(v.ReadyAt.Sub(p.now()).Milliseconds(), 1)
	case v.Status == shopper.Waiting:
		pl.PollAfterMs = pollAfter(v.Position, v.ETA, v.ETAKnown, p.jitter()).Milliseconds()
	case v.Status == shopper.Ready:
		pl.ReadyAt, pl.ExpiresAt = &v.ReadyAt, &v.ExpiresAt
	case v.Status == shopper.PreQueue && v.OpensAt != nil:
		// Come back around the opening (spread over two seconds), at most
		// every 30 s meanwhile. The wait is capped before the jitter is
		// added: an opening centuries ahead saturates Sub, and the sum
		// would wrap around to a negative wait.
		wait := min(v.OpensAt.Sub(p.now()), 30*time.Second) + time.Duration(p.jitter()*2000)*time.Millisecond
		pl.PollAfterMs = min(max(wait, time.Second), 30*time.Second).Milliseconds()
	}
	c.Set(fiber.HeaderLocation, "/v1/queues/"+cfg.Name+"/tickets/"+str)
	c.Set(fiber.HeaderCacheControl, "no-store")
	return sendPlace(c, status, pl)
}

// EventsURL is where the notifier streams this ticket's events.
func (p *Places) EventsURL(q, t string) string {
	path := "/v1/queues/" + q + "/tickets/" + url.PathEscape(t) + "/events"
	return p.notifierURL + path
}
