// Package door is proof of work at the door: a queue whose challenge mode
// is log or enforce asks every join for a solved challenge (package pow). A
// challenge is issued statelessly — no Redis write — and a proof is spent
// with one SET NX, so a place in line costs a client real work and the
// gateway almost none. A client whose address keeps failing may be sent to
// the shadow line (shadow.go).
package door

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"usher/gateway/httpapi"
	"usher/internal/catalog"
	"usher/internal/keyspace"
	"usher/internal/opshttp"
	"usher/internal/pow"
	"usher/internal/problem"
	"usher/internal/script"
	"usher/internal/shopper"
	"usher/internal/ticket"
	"usher/internal/waitqueue"
)

// Line is the part of the line the door uses: it spends proofs with a
// script on the queue's slot (the line's pipelines) and reads a queue's
// live figures.
type Line interface {
	RunScript(ctx context.Context, sc *script.Script, keys []string, args ...any) *redis.Cmd
	Stats(ctx context.Context, q string) (waitqueue.Stats, error)
}

// Places writes a shopper's place as the line API answers it: a shadow
// ticket's answer is a real answer's, field for field.
type Places interface {
	AnswerAt(c *fiber.Ctx, status int, cfg catalog.Config, t ticket.Ticket, str string, e waitqueue.Entry, now time.Time) error
}

// Deps are what a Door is built from.
type Deps struct {
	Issuer  *pow.Issuer // challenges, and the keys of the shadow line
	Line    Line
	Queues  httpapi.Queues
	Places  Places
	IPs     httpapi.ClientIPs // whose challenge a request is
	Now     func() time.Time
	Epoch   func() string // the entries stream's identity, in every ticket
	Log     *slog.Logger
	Metrics *Metrics
}

// Door is the gateway's proof of work: it issues challenges, checks and
// spends proofs, sets each queue's difficulty (difficulty.go) and keeps
// the shadow line (shadow.go). It is safe for concurrent use.
type Door struct {
	issuer  *pow.Issuer
	shadow  *ticket.Signer // shadow tickets, keyed apart from real ones
	seqKey  []byte         // places a shadow ticket's sequence (shadow.go)
	line    Line
	queues  httpapi.Queues
	places  Places
	ips     httpapi.ClientIPs
	now     func() time.Time
	epoch   func() string
	log     *slog.Logger
	metrics *Metrics
	// asked counts the challenges issued per address and per subnet,
	// failed the joins refused per address, both fading by half every
	// sketchHalfLife.
	asked, failed *sketch

	mu        sync.Mutex
	pressures map[string]*pressure
}

// New returns a door issuing with deps.Issuer, spending proofs and reading
// figures on deps.Line.
func New(deps Deps) *Door {
	shadow, err := ticket.NewSigner(deps.Issuer.Derive("shadow tickets"))
	if err != nil {
		panic(err) // Derive returns 32 bytes, all NewSigner asks for
	}
	return &Door{issuer: deps.Issuer, shadow: shadow, seqKey: deps.Issuer.Derive("shadow sequences"),
		line: deps.Line, queues: deps.Queues, places: deps.Places, ips: deps.IPs, now: deps.Now, epoch: deps.Epoch,
		log: deps.Log, metrics: deps.Metrics,
		asked: newSketch(sketchHalfLife), failed: newSketch(sketchHalfLife), pressures: map[string]*pressure{}}
}

// RandomIssuer is an issuer with a secret of its own, for a gateway that
// is given none (a test's).
func RandomIssuer() *pow.Issuer {
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	issuer, err := pow.NewIssuer(secret, 0)
	if err != nil {
		panic(err) // a 32-byte secret is all NewIssuer asks for
	}
	return issuer
}

// Outcomes of a proof check, the result label of usher_pow_checks_total
// and the reason member of a 428.
const (
	proofOK        = "ok"
	proofMissing   = "missing"   // no Usher-PoW header
	proofMalformed = "malformed" // not <challenge>:<nonce>
	proofInvalid   = "invalid"   // forged, or another queue's or address's
	proofExpired   = "expired"
	proofUnsolved  = "unsolved" // the nonce misses the challenge's difficulty
	proofTooEasy   = "too_easy" // solved, but easier than the queue asks now
	proofReused    = "reused"   // spent already
)

var proofDetail = map[string]string{
	proofMissing:   "this queue asks for a proof of work: solve the challenge and join with Usher-PoW: <challenge>:<nonce>",
	proofMalformed: "the Usher-PoW header is not <challenge>:<nonce>; solve this challenge",
	proofInvalid:   "the proof's challenge was not issued for this queue and address; solve this one",
	proofExpired:   "the proof's challenge expired; solve this one",
	proofUnsolved:  "the nonce does not solve the challenge; solve this one",
	proofTooEasy:   "the queue asks for more work now; solve this challenge",
	proofReused:    "that proof was used already; solve this challenge",
}

// ShadowAfter is how many refused joins from one address (within about a
// sketch half-life) make it a suspect.
const ShadowAfter = 6

// Challenge answers GET /v1/queues/{q}/challenge: a fresh challenge for
// this client and queue. It writes nothing anywhere; a queue whose
// challenge is off answers difficulty 0, so a client can always ask. A
// HEAD (fiber routes it here too) gets the status and headers GET would —
// the difficulty is read as for GET, so a line that cannot be read is a
// 503 to both — and no challenge: it could not read one, so none is
// issued, and none counts toward the address's extra bits or
// usher_pow_challenges_issued_total.
func (d *Door) Challenge(c *fiber.Ctx) error {
	cfg, err := httpapi.Queue(c, d.queues)
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderCacheControl, "no-store")
	if c.Method() == fiber.MethodHead {
		if _, _, err := d.asks(c.UserContext(), cfg, d.ips.Of(c), d.now()); err != nil {
			return err
		}
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		return nil
	}
	ch, err := d.issue(c.UserContext(), cfg, d.ips.Of(c))
	if err != nil {
		return err
	}
	return c.JSON(ch)
}

// issue makes a challenge for client at the difficulty it asks now (asks),
// and counts it when it asks for work.
func (d *Door) issue(ctx context.Context, cfg catalog.Config, client netip.Addr) (pow.Challenge, error) {
	now := d.now()
	bits, work, err := d.asks(ctx, cfg, client, now)
	if err != nil {
		return pow.Challenge{}, err
	}
	if work {
		d.noteIssued(cfg.Name, client, now)
		d.metrics.Issued.WithLabelValues(cfg.Name).Inc()
	}
	return d.issuer.Issue(cfg.Name, client, bits, now), nil
}

// asks is the difficulty a challenge for client asks now: the queue's,
// plus, under auto, the client's own extra bits for asking often. work is
// false when it asks for none: a queue whose challenge is off, or one that
// turns every join away (closed, in maintenance: join refuses those before
// the proof check) — a page is not made to solve for a join refused
// whatever its proof. It reads the line under auto (a 503 while it
// cannot), and counts nothing.
func (d *Door) asks(ctx context.Context, cfg catalog.Config, client netip.Addr, now time.Time) (bits int, work bool, err error) {
	if closed, _ := shopper.ClosedAt(cfg, now); !cfg.Challenge.On() || closed || cfg.QueueMode() == catalog.ModeReject {
		return 0, false, nil
	}
	bits, err = d.Difficulty(ctx, cfg, now)
	if err != nil {
		return 0, false, httpapi.LineDown(err)
	}
	if cfg.Challenge.Difficulty == catalog.DifficultyAuto {
		bits = min(bits+d.clientBits(cfg.Name, client, now), cfg.Challenge.Max)
	}
	return bits, true, nil
}

// CheckProof lets a join through when its queue asks for no proof, or its
// Usher-PoW proof is valid, unexpired, hard enough and unused — and then
// spends it. Under log a join that enforce would refuse passes and is
// counted. Under enforce it is refused with 428 and a fresh challenge; in
// a queue with suspects "shadow", a client whose address keeps failing is
// answered with a ticket in the shadow line instead (done: the answer is
// written). It returns the proof it spent, if any: a join that takes no
// new place after all gives it back (GiveBack).
func (d *Door) CheckProof(c *fiber.Ctx, cfg catalog.Config, user string) (spent pow.Proof, done bool, err error) {
	ch := cfg.Challenge
	if !ch.On() {
		return pow.Proof{}, false, nil
	}
	ctx, now, client := c.UserContext(), d.now(), d.ips.Of(c)
	result, spent, err := d.proofResult(ctx, cfg, c.Get(pow.Header), client, now)
	if err != nil {
		return pow.Proof{}, false, err
	}
	d.metrics.Checks.WithLabelValues(cfg.Name, ch.Mode, result).Inc()
	if result == proofOK {
		return spent, false, nil
	}
	fails := d.noteFailed(cfg.Name, client, now)
	if ch.Mode != catalog.ChallengeEnforce {
		return pow.Proof{}, false, nil
	}
	// A proof that is only too easy did the work of a challenge issued to
	// this very client before the queue asked for more: an honest client
	// behind an address others fail from, to be told to do more, never
	// shadowed.
	if ch.Shadow() && fails >= ShadowAfter && result != proofTooEasy {
		return pow.Proof{}, true, d.shadowJoin(c, cfg, user)
	}
	fresh, err := d.issue(ctx, cfg, client)
	if err != nil {
		return pow.Proof{}, false, err
	}
	p := problem.New(fiber.StatusPreconditionRequired, "challenge-required", proofDetail[result])
	p.Extensions = map[string]any{"challenge": fresh, "reason": result}
	return pow.Proof{}, false, p
}

// proofResult checks value and, when it holds, spends it (and returns it).
func (d *Door) proofResult(ctx context.Context, cfg catalog.Config, value string, client netip.Addr, now time.Time) (string, pow.Proof, error) {
	proof, err := d.issuer.Verify(value, cfg.Name, client, now)
	switch {
	case errors.Is(err, pow.ErrMissing):
		return proofMissing, pow.Proof{}, nil
	case errors.Is(err, pow.ErrMalformed):
		return proofMalformed, pow.Proof{}, nil
	case errors.Is(err, pow.ErrForged):
		return proofInvalid, pow.Proof{}, nil
	case errors.Is(err, pow.ErrExpired):
		return proofExpired, pow.Proof{}, nil
	case errors.Is(err, pow.ErrUnsolved):
		return proofUnsolved, pow.Proof{}, nil
	case err != nil:
		return "", pow.Proof{}, err
	}
	want, err := d.required(ctx, cfg, now)
	if err != nil {
		return "", pow.Proof{}, httpapi.LineDown(err)
	}
	if proof.Difficulty < want {
		return proofTooEasy, pow.Proof{}, nil
	}
	fresh, err := d.spend(ctx, cfg.Name, proof, now)
	if err != nil {
		return "", pow.Proof{}, httpapi.LineDown(err)
	}
	if !fresh {
		return proofReused, pow.Proof{}, nil
	}
	return proofOK, proof, nil
}

// spendScript marks a challenge spent. KEYS: the proof's key. ARGV: ms
// until the challenge expires. Returns 1 the first time, 0 after: a proof
// buys one join, and its mark is gone when the challenge could not be used
// anyway.
var spendScript = script.New(`return redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[1]) and 1 or 0`)

// spend records p as used and reports whether it was unused.
func (d *Door) spend(ctx context.Context, q string, p pow.Proof, now time.Time) (bool, error) {
	ttl := max(p.ExpiresAt.Sub(now).Milliseconds(), 1)
	n, err := d.line.RunScript(ctx, spendScript, []string{keyspace.Of(q).Proof(p.ID)}, ttl).Int()
	if err != nil {
		return false, err
	}
	return n == 1, nil
}

// giveBackScript unmarks a spent challenge. KEYS: the proof's key. An
// EXPIRE of 0 deletes the key (a non-positive timeout deletes rather than
// expires), with a command the gateway's Redis user holds: it may not DEL.
var giveBackScript = script.New(`return redis.call('EXPIRE', KEYS[1], 0)`)

// GiveBack unmarks proof p (spent by this request, so nobody else holds
// it) when the join it was spent on took no new place: a proof buys a
// place in line, and a join refused after the check — an unknown invite,
// the line down — or answered with the place the shopper already holds
// (a reload, a double click) bought none, so the shopper's next join with
// the same proof is not sent back to solve another. Given back, it still
// buys one new place, from the address it was issued to, as it did before
// it was sent. Nothing to give back when nothing was spent.
func (d *Door) GiveBack(ctx context.Context, q string, p pow.Proof) {
	if p.ID == "" {
		return
	}
	if err := d.line.RunScript(context.WithoutCancel(ctx), giveBackScript, []string{keyspace.Of(q).Proof(p.ID)}).Err(); err != nil {
		d.log.Warn("a refused join's proof stays spent: the shopper solves another", "queue", q, "err", err)
	}
}

// Metrics are the door's metrics, labelled by queue (names ops
// configure), mode and outcome.
type Metrics struct {
	Issued     *prometheus.CounterVec
	Checks     *prometheus.CounterVec
	Shadowed   *prometheus.CounterVec
	Difficulty *prometheus.GaugeVec
}

// NewMetrics registers the door's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Issued: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "usher_pow_challenges_issued_total", Help: "Proof-of-work challenges issued (GET challenge and 428s), by queue.",
		}, []string{"queue"}),
		Checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "usher_pow_checks_total",
			Help: "Joins checked for a proof of work, by queue, mode (log, enforce) and result (ok, missing, malformed, invalid, expired, unsolved, too_easy, reused); under log every result but ok is a join enforce would refuse.",
		}, []string{"queue", "mode", "result"}),
		Shadowed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "usher_pow_shadowed_total", Help: "Joins answered with a ticket in the shadow line, by queue.",
		}, []string{"queue"}),
		Difficulty: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "usher_pow_difficulty", Help: "The queue's current proof-of-work difficulty (leading zero bits), before any client's own extra bits.",
		}, []string{"queue"}),
	}
	reg.MustRegister(m.Issued, m.Checks, m.Shadowed, m.Difficulty)
	return m
}

// Forget drops every series of queue q, once it is deleted.
func (m *Metrics) Forget(q string) {
	opshttp.ForgetQueue(q, m.Issued, m.Checks, m.Shadowed, m.Difficulty)
}
