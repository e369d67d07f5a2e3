// Package waitqueue is the live waiting line in Redis: who is waiting, in
// what order, who holds an admission slot, and what the admitter still has
// to announce.
//
// Redis is a projection here, not the record: every join, leave, admission
// and order is an event in JetStream. The admitter's followers apply each
// stream to the line in order (see Apply*), and the line keeps, per queue, a
// cursor of how far each stream is applied, moved in the same atomic step as
// the events' effects. Whatever Redis loses — its last second, a failover to
// a lagging replica, everything — it loses the cursor's advance with it, and
// the followers replay exactly the gap: the line heals itself, no operator
// needed. Each state change is one Lua script (see scripts.go), so the
// line's invariants hold however many gateways and admitters touch it; every
// time decision in them reads Redis TIME. The keys are mapped in package
// keyspace.
package waitqueue

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"usher/internal/keyspace"
	"usher/internal/ratelimit"
)

// Status is where an entry stands.
type Status string

// The statuses of an entry. Unknown means Redis has no record of it (yet):
// its join is not applied. Gone means its record was a tombstone that
// expired: the entry finished long ago.
const (
	Unknown  Status = "unknown"
	Waiting  Status = "waiting"
	Admitted Status = "admitted"
	Expired  Status = "expired"
	Used     Status = "used"
	Left     Status = "left"
	Gone     Status = "gone"
	// PreQueued: joined before a scheduled drop opened; the draw gives
	// the place.
	PreQueued Status = "pre"
)

// Live reports whether the entry still holds a place or a slot.
func (s Status) Live() bool { return s == Waiting || s == Admitted || s == PreQueued }

// JoinKind is how a join enters the line.
type JoinKind string

// The kinds of join.
const (
	InLine   JoinKind = ""  // FIFO, at the back
	PreQueue JoinKind = "p" // a scheduled drop's pre-queue, placed by the draw
	Priority JoinKind = "a" // allowed past the line: into the next free slot
)

// Errors the line returns for states callers branch on.
var (
	// ErrStale: the line belongs to another incarnation of the entries
	// stream (it was recreated); the caller's epoch is out of date.
	ErrStale = errors.New("waitqueue: the line belongs to another incarnation of the entries stream")
	// ErrConflict: the sequence's record names another user.
	ErrConflict = errors.New("waitqueue: the sequence belongs to another user")
)

// Store reads and changes the waiting lines kept in one Redis (or Redis
// Cluster). It is safe for concurrent use.
type Store struct {
	rdb   redis.UniversalClient
	calls chan *scriptCall // set by EnableBatching
	ttl   int              // tombstone TTL in seconds

	// stopMu guards stopped: a call is queued under its read lock, and
	// RunBatches sets stopped under its write lock, so after that nothing
	// joins the queue it drains.
	stopMu  sync.RWMutex
	stopped bool // RunBatches has ended: calls go straight to Redis
}

// New returns a Store on rdb whose finished entries live
// keyspace.TombstoneTTL.
func New(rdb redis.UniversalClient) *Store {
	return &Store{rdb: rdb, ttl: int(keyspace.TombstoneTTL.Seconds())}
}

// SetTombstoneTTL changes how long finished entries stay (at least a
// second). Call it before the Store is used.
func (s *Store) SetTombstoneTTL(d time.Duration) { s.ttl = max(int(d.Seconds()), 1) }

// stdKeys are the keys every mutating script gets (see scripts.go).
func stdKeys(k keyspace.Queue) []string {
	return []string{k.Waiting(), k.Active(), k.Outbox(), k.Stats(), k.Admits(), k.Cursor()}
}

// args starts a mutating script's arguments: prefix and tombstone TTL.
func (s *Store) args(k keyspace.Queue, rest ...any) []any {
	return append([]any{k.Prefix(), s.ttl}, rest...)
}

// Entry is one shopper's place as Redis sees it.
type Entry struct {
	Seq       uint64 // the live entry's sequence (a duplicate join resolves to the first)
	Status    Status
	Position  int64 // 1-based place in line while Waiting, else 0
	Waiting   int64 // how many are waiting in the queue
	User      string
	TokenID   string
	ReadyAt   time.Time
	ExpiresAt time.Time
	Rate      float64 // admissions per second over the last minute
	// Stock is the queue's stock state (StockAvailable, StockHeld,
	// StockSoldOut; "" for a queue that does not follow stock) and SKUs
	// the queue's SKUs with units left, as the last tick saw them.
	Stock string
	SKUs  []string
	// Reason says why a Left entry left: "" (the shopper did) or
	// ReasonAbandoned.
	Reason string
}

// ReasonAbandoned: the shopper was not present for the queue's
// abandonAfterSeconds and left the line.
const ReasonAbandoned = "abandoned"

// The stock states of a stock-aware queue (see admitScript).
const (
	StockAvailable = "available" // units left for the next in line
	StockHeld      = "held"      // none left, but some held by shoppers ahead or pending: they may come back
	StockSoldOut   = "sold_out"  // nothing left, held or pending
	StockUnknown   = "unknown"   // the store has reported nothing yet: nobody is admitted
)

// Ingest puts the shopper who joined with seq in line ahead of the
// admitter's follower, so the gateway can answer with the exact place
// (unless that sequence was seen before or the user is already in line:
// then it resolves to the user's current entry). epoch is the identity of
// the entries stream the sequence counts in; prev is the entry the gateway
// saw finished when it published the join (0: none).
func (s *Store) Ingest(ctx context.Context, q, epoch string, seq uint64, user string, prev uint64) (Entry, error) {
	return s.IngestAs(ctx, q, epoch, seq, user, prev, InLine)
}

// IngestAs is Ingest of a join of the given kind.
func (s *Store) IngestAs(ctx context.Context, q, epoch string, seq uint64, user string, prev uint64, kind JoinKind) (Entry, error) {
	k := keyspace.Of(q)
	return ingested(s.run(ctx, ingestScript, stdKeys(k), s.args(k, epoch, seq, user, prev, string(kind))...), q, seq, user)
}

// ingested reads the reply of an ingest of seq by user into q.
func ingested(cmd *redis.Cmd, q string, seq uint64, user string) (Entry, error) {
	res, err := cmd.Slice()
	if err != nil {
		return Entry{}, fmt.Errorf("ingest %s/%d: %w", q, seq, err)
	}
	if len(res) == 1 {
		if res[0] == "stale" {
			return Entry{}, fmt.Errorf("ingest %s/%d: %w", q, seq, ErrStale)
		}
		return Entry{}, fmt.Errorf("ingest %s/%d for %s: %w", q, seq, user, ErrConflict)
	}
	if len(res) != 7 {
		return Entry{}, fmt.Errorf("ingest %s/%d: reply of %d fields", q, seq, len(res))
	}
	e, err := entryOf(res[:4])
	if err != nil {
		return Entry{}, err
	}
	e.figures(res[4], res[5], res[6])
	return e, nil
}

// Current is a user's current entry in a queue, as Lookup finds it.
type Current struct {
	Found  bool // false: no entry (or it finished long enough ago to be forgotten)
	Seq    uint64
	Status Status
	Bought int // units the user bought in the queue (for maxPerUser)
}

// Lookup returns the user's current entry in q and what they bought there.
func (s *Store) Lookup(ctx context.Context, q, user string) (Current, error) {
	k := keyspace.Of(q)
	res, err := s.run(ctx, lookupScript, []string{k.User(user), k.Bought(user)}, k.Prefix()).Slice()
	if err != nil {
		return Current{}, fmt.Errorf("lookup %s/%s: %w", q, user, err)
	}
	if len(res) != 3 {
		return Current{}, fmt.Errorf("lookup %s/%s: reply of %d fields", q, user, len(res))
	}
	return current(q, user, res)
}

// LookupLimited is Lookup and the rate-limit decision of limits (whose
// keys are q's, see ratelimit.Key) in one step: a request the limits refuse
// is charged to none of them, and its lookup is answered all the same.
// With no limit on it is Lookup, and the decision allows.
func (s *Store) LookupLimited(ctx context.Context, q, user string, limits ratelimit.Plan) (Current, ratelimit.Decision, error) {
	if limits.Empty() {
		c, err := s.Lookup(ctx, q, user)
		return c, ratelimit.Decision{Allowed: true}, err
	}
	k := keyspace.Of(q)
	keys := append([]string{k.User(user), k.Bought(user)}, limits.Keys...)
	args := append([]any{k.Prefix()}, limits.Args...)
	res, err := s.run(ctx, lookupLimitedScript, keys, args...).Slice()
	if err != nil {
		return Current{}, ratelimit.Decision{}, fmt.Errorf("lookup %s/%s: %w", q, user, err)
	}
	if len(res) < 3 {
		return Current{}, ratelimit.Decision{}, fmt.Errorf("lookup %s/%s: reply of %d fields", q, user, len(res))
	}
	ints := make([]int64, len(res)-3)
	for i, v := range res[3:] {
		n, ok := v.(int64)
		if !ok {
			return Current{}, ratelimit.Decision{}, fmt.Errorf("lookup %s/%s: rate limit field %d is %T", q, user, i, v)
		}
		ints[i] = n
	}
	d, err := limits.Decide(ints)
	if err != nil {
		return Current{}, ratelimit.Decision{}, fmt.Errorf("lookup %s/%s: %w", q, user, err)
	}
	c, err := current(q, user, res[:3])
	return c, d, err
}

// current reads lookup's reply.
func current(q, user string, res []any) (Current, error) {
	bought, _ := res[2].(int64)
	c := Current{Bought: int(bought)}
	if seq, _ := res[0].(string); seq != "" {
		n, err := strconv.ParseUint(seq, 10, 64)
		if err != nil {
			return Current{}, fmt.Errorf("lookup %s/%s: bad seq %q", q, user, seq)
		}
		st, _ := res[1].(string)
		c.Found, c.Seq, c.Status = true, n, Status(st)
	}
	return c, nil
}

// Poll returns the entry for seq with its position, in one round trip.
// A sequence Redis has not applied yet comes back as Unknown with the
// waiting count, so the caller can answer with an estimate.
func (s *Store) Poll(ctx context.Context, q string, seq uint64) (Entry, error) {
	return s.poll(ctx, q, seq, 0)
}

// PollPresent is the shopper's own poll: Poll, and a waiting shopper is
// recorded present (see admitScript: abandonment).
func (s *Store) PollPresent(ctx context.Context, q string, seq uint64) (Entry, error) {
	return s.poll(ctx, q, seq, 1)
}

func (s *Store) poll(ctx context.Context, q string, seq uint64, present int) (Entry, error) {
	k := keyspace.Of(q)
	res, err := s.run(ctx, pollScript, stdKeys(k), k.Prefix(), seq, present).Slice()
	if err != nil {
		return Entry{}, fmt.Errorf("poll %s/%d: %w", q, seq, err)
	}
	if len(res) != 12 {
		return Entry{}, fmt.Errorf("poll %s/%d: reply of %d fields", q, seq, len(res))
	}
	e, err := entryOf(res[:4])
	if err != nil {
		return Entry{}, err
	}
	e.ReadyAt = msTime(res[4])
	e.ExpiresAt = msTime(res[5])
	e.TokenID, _ = res[6].(string)
	e.User, _ = res[7].(string)
	e.figures(res[8], res[9], res[10])
	e.Reason, _ = res[11].(string)
	return e, nil
}

// figures sets the line's figures a script read from its stats: the
// admission rate, the stock state and the SKUs with units left.
func (e *Entry) figures(rate, stock, skus any) {
	r, _ := rate.(string)
	e.Rate, _ = strconv.ParseFloat(r, 64)
	e.Stock, _ = stock.(string)
	s, _ := skus.(string)
	e.SKUs = skuList(s)
}

// skuList reads the stats' skus field (SKUs with units left, comma
// separated; "" for none).
func skuList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// Leave takes the entry out of line, or frees its slot if it was admitted,
// and returns the status it had. Leaving twice is harmless.
func (s *Store) Leave(ctx context.Context, q string, seq uint64, user string) (Status, error) {
	k := keyspace.Of(q)
	st, err := leaveScript.Run(ctx, s.rdb, stdKeys(k), s.args(k, seq, user)...).Text()
	if err != nil {
		return "", fmt.Errorf("leave %s/%d: %w", q, seq, err)
	}
	return Status(st), nil
}

// Claim is what Claim found.
type Claim struct {
	Outcome Redemption // Redeemed (claimed now or before by this order), or why not
	// At is when the token was claimed (Redis time): the order's request
	// time, from which its deadline counts.
	At time.Time
}

// Redemption is what a claim or a redemption found.
type Redemption string

// Claim and Redeem outcomes.
const (
	Redeemed       Redemption = "redeemed" // the token is (now) this order's
	RedeemConflict Redemption = "conflict" // the token is another order's
	RedeemEarly    Redemption = "early"    // the token is not valid yet (readyAt)
	RedeemExpired  Redemption = "expired"  // the token expired unused
	RedeemLeft     Redemption = "left"     // the shopper gave the slot up
	RedeemLimit    Redemption = "limit"    // the user bought the queue's maxPerUser units
	RedeemUnknown  Redemption = "unknown"  // Redis holds no admission for this token
	// RedeemLapsed: the token is this order's, but its slot is gone — its
	// hold ran out and the line gave the slot to the next shopper, or the
	// order finished and released it. See redeemScript's hold rule.
	RedeemLapsed Redemption = "lapsed"
)

func redemptionOf(s string) Redemption {
	switch r := Redemption(s); r {
	case Redeemed, RedeemConflict, RedeemEarly, RedeemExpired, RedeemLeft, RedeemLimit, RedeemLapsed:
		return r
	case "claimed":
		return Redeemed
	}
	return RedeemUnknown // unknown, waiting: no admission for this token
}

// Order is what an order claims of its token's entry.
type Order struct {
	ID       string
	TokenID  string
	User     string
	SKU      string
	Quantity int
	// MaxPerUser is the queue's limit of units per user (0: none).
	MaxPerUser int
}

// Claim takes the token of entry seq for order o at the moment the order is
// requested, judged on Redis time, and holds its slot for hold (the order's
// deadline and a margin). See claimScript. A claim of several units of a
// stock-aware line is reported to the stock ledger at once (see
// stockshare.go).
func (s *Store) Claim(ctx context.Context, q string, seq uint64, o Order, hold time.Duration) (Claim, error) {
	k := keyspace.Of(q)
	res, err := claimScript.Run(ctx, s.rdb, stdKeys(k), s.args(k, seq, o.TokenID, o.ID, hold.Milliseconds(),
		o.SKU, max(o.Quantity, 1), o.User, o.MaxPerUser)...).Slice()
	if err != nil {
		return Claim{}, fmt.Errorf("claim %s/%d: %w", q, seq, err)
	}
	if len(res) != 2 && len(res) != 3 {
		return Claim{}, fmt.Errorf("claim %s/%d: reply of %d fields", q, seq, len(res))
	}
	out, _ := res[0].(string)
	at, _ := res[1].(int64)
	if len(res) == 3 {
		snap, _ := res[2].(string)
		if err := s.report(ctx, q, 0, snap); err != nil {
			return Claim{}, fmt.Errorf("claim %s/%d: %w", q, seq, err)
		}
	}
	return Claim{Outcome: redemptionOf(out), At: time.UnixMilli(at)}, nil
}

// Redeem marks the token of entry seq as used by orderID (normally the
// gateway's Claim already did) and holds its slot at least until holdUntil,
// or answers RedeemLapsed when that order's slot is gone. See redeemScript.
// It is RedeemRequest for a request of unknown times.
func (s *Store) Redeem(ctx context.Context, q string, seq uint64, tokenID, orderID string, holdUntil time.Time) (Redemption, error) {
	r, _, err := s.RedeemRequest(ctx, q, seq, Request{Order: Order{ID: orderID, TokenID: tokenID}}, holdUntil)
	return r, err
}

// Request is an order request as the orders stream holds it.
type Request struct {
	Order
	// RequestedAt is when the gateway claimed the token (Redis time; the
	// request's requestedAt).
	RequestedAt time.Time
	// Stored is when the stream stored the request (zero: unknown): the
	// time no publisher can write, by which a replay judges it.
	Stored time.Time
}

// RedeemRequest is the order worker's Redeem of the token of entry seq for
// the order request r. A request the stream stored before the admission
// expired and before the shopper left is honoured however a replay after
// a Redis loss left the entry — expired, or left by the leave applied
// first — and holds the slot again while its hold lasts. See redeemScript.
//
// It also says where USHER_ADMISSIONS holds the admission of the token —
// its stream sequence as the admissions follower recorded it, 0 while it
// has not — for the order worker to read it back from the record before it
// charges the order. Redis only says where to look: whoever can write
// Redis can write that too, so the reader checks what the stream holds
// there.
func (s *Store) RedeemRequest(ctx context.Context, q string, seq uint64, r Request, holdUntil time.Time) (Redemption, uint64, error) {
	k := keyspace.Of(q)
	res, err := s.run(ctx, redeemScript, stdKeys(k), s.args(k, seq, r.TokenID, r.ID, holdUntil.UnixMilli(),
		unixMilli(r.Stored), unixMilli(r.RequestedAt), r.SKU, max(r.Quantity, 1))...).StringSlice()
	if err != nil {
		return "", 0, fmt.Errorf("redeem %s/%d: %w", q, seq, err)
	}
	if len(res) != 3 {
		return "", 0, fmt.Errorf("redeem %s/%d: reply of %d fields", q, seq, len(res))
	}
	aseq, _ := strconv.ParseUint(res[2], 10, 64)
	return redemptionOf(res[0]), aseq, nil
}

// unixMilli is t in Unix milliseconds, 0 for the zero time.
func unixMilli(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// Release frees the slot entry seq holds for orderID, once the order is
// final, so the admitter lets the next shopper in. It is idempotent.
func (s *Store) Release(ctx context.Context, q string, seq uint64, orderID string) (bool, error) {
	k := keyspace.Of(q)
	n, err := s.run(ctx, releaseScript, stdKeys(k), s.args(k, seq, orderID)...).Int()
	if err != nil {
		return false, fmt.Errorf("release %s/%d: %w", q, seq, err)
	}
	return n == 1, nil
}

// CountBought counts quantity units of entry seq's PAID order orderID
// against user's maxPerUser in queue q, unless they were counted already
// (see boughtScript), and reports whether it counted them. It is
// idempotent.
func (s *Store) CountBought(ctx context.Context, q string, seq uint64, orderID, user string, quantity int) (bool, error) {
	k := keyspace.Of(q)
	n, err := s.run(ctx, boughtScript, stdKeys(k), s.args(k, seq, orderID, user, quantity, int(keyspace.BoughtTTL.Seconds()))...).Int()
	if err != nil {
		return false, fmt.Errorf("count bought %s/%d: %w", q, seq, err)
	}
	return n == 1, nil
}

// TokenID is the id of the entry token of entry seq of queue q in the
// entries stream whose identity is epoch: "q:epoch:seq". The epoch keeps the
// tokens (and the orders derived from them) of a recreated stream apart from
// the old one's.
func TokenID(q, epoch string, seq uint64) string {
	return q + ":" + epoch + ":" + strconv.FormatUint(seq, 10)
}

// ParseTokenID splits an entry token id into its queue, epoch and sequence.
func ParseTokenID(id string) (q, epoch string, seq uint64, ok bool) {
	q, rest, ok1 := strings.Cut(id, ":")
	epoch, num, ok2 := strings.Cut(rest, ":")
	if !ok1 || !ok2 || q == "" || epoch == "" || strings.IndexByte(num, ':') >= 0 {
		return "", "", 0, false
	}
	seq, err := strconv.ParseUint(num, 10, 64)
	if err != nil || seq == 0 {
		return "", "", 0, false
	}
	return q, epoch, seq, true
}

// Head is how far a stream holds events of one queue: the stream sequence
// of its last such event (0: none) and the stream's identity.
type Head struct {
	Seq      uint64
	StreamID string
}

// Tick is the input of one admission tick. Its time is Redis's.
type Tick struct {
	Epoch           string // the entries stream's identity (token ids carry it)
	TargetActive    int
	MaxAdmitPerTick int // 0: no cap besides targetActive
	TickLength      time.Duration
	TokenTTL        time.Duration
	Paused          bool
	// Offset in [0,1000) places each readyAt within its slice of the tick.
	Offset int
	// Admissions and Orders are the streams' heads for this queue: nobody
	// is admitted until the line has applied them (see admitScript).
	Admissions, Orders Head
	// StockAware admits only against units that could still be sold;
	// Share names the queues those units are shared with (see Share).
	StockAware bool
	Share      Share
	// AwaitDraw: the queue is a scheduled drop; nobody is admitted until
	// its pre-queue is drawn.
	AwaitDraw bool
	// AbandonAfter: a waiting shopper not present for this long leaves the
	// line (see admitScript); 0: never.
	AbandonAfter time.Duration
	// NoJitter: every readyAt is the tick's own time, not spread across
	// the tick (a passthrough queue: nobody waits, not even a tick).
	NoJitter bool
}

// TickResult says what one tick did.
type TickResult struct {
	// Early: the queue's tick was not due (another admitter ran it); Next
	// says when it is.
	Early bool
	// Behind: the line has not applied every admission or order event the
	// streams hold; nobody was admitted.
	Behind            bool
	Next              time.Duration
	Expired, Admitted int
	Active, Waiting   int64
	// AdmitRatePerSec is the measured admission rate of the last minute,
	// the one Stats reports and ETAs use.
	AdmitRatePerSec float64
	// Stock is the stock state after the tick (see Entry.Stock) and
	// Sellable the units that could still go to the next in line, every
	// queue sharing the SKUs counted (see Share).
	Stock    string
	Sellable int64
	// Abandoned is how many waiting shoppers the tick found gone.
	Abandoned int
}

// Admit runs the queue's admission tick if it is due: expires stale tokens,
// admits as many as fit, records them in the outbox. See admitScript for
// the invariants. A stock-aware tick whose Share names SKUs reserves its
// units in the stock ledger first and reports what the line holds after
// (see stockshare.go); one that finds the line no longer stock-aware takes
// it out of the ledger.
func (s *Store) Admit(ctx context.Context, q string, t Tick) (TickResult, error) {
	k := keyspace.Of(q)
	shared := t.StockAware && len(t.Share.SKUs) > 0
	var res reservation
	var share string
	if shared {
		want := 0
		if !t.Paused {
			want = t.TargetActive
			if t.MaxAdmitPerTick > 0 {
				want = min(want, t.MaxAdmitPerTick)
			}
		}
		var err error
		if res, share, err = s.reserve(ctx, q, t.Share, want); err != nil {
			return TickResult{}, fmt.Errorf("admit %s: %w", q, err)
		}
	}
	out, err := admitScript.Run(ctx, s.rdb, stdKeys(k), s.args(k,
		q, t.Epoch, t.TargetActive, t.MaxAdmitPerTick, t.TickLength.Milliseconds(), t.TokenTTL.Milliseconds(),
		flag(t.Paused), t.Offset, t.Admissions.Seq, t.Admissions.StreamID, t.Orders.Seq, t.Orders.StreamID, flag(t.StockAware),
		flag(t.AwaitDraw), t.AbandonAfter.Milliseconds(), flag(t.NoJitter), share)...).Slice()
	if err != nil {
		return TickResult{}, fmt.Errorf("admit %s: %w", q, err)
	}
	ints := make([]int64, len(out))
	for i := 1; i < len(out); i++ {
		ints[i], _ = out[i].(int64)
	}
	if len(out) == 2 && out[0] == "early" {
		if shared && res.Grant > 0 {
			if err := s.cancel(ctx, q, res.Res); err != nil {
				return TickResult{}, fmt.Errorf("admit %s: %w", q, err)
			}
		}
		return TickResult{Early: true, Next: time.Duration(ints[1]) * time.Millisecond}, nil
	}
	if len(out) != 13 {
		return TickResult{}, fmt.Errorf("admit %s: reply of %d fields", q, len(out))
	}
	stock, _ := out[8].(string)
	r := TickResult{Expired: int(ints[1]), Admitted: int(ints[2]), Active: ints[3], Waiting: ints[4],
		AdmitRatePerSec: float64(ints[5]) / 1000, Behind: ints[6] == 1, Next: time.Duration(ints[7]) * time.Millisecond,
		Stock: stock, Sellable: ints[9], Abandoned: int(ints[10])}
	switch snap, _ := out[11].(string); {
	case shared && snap != "":
		err = s.report(ctx, q, t.TickLength.Milliseconds(), snap)
	case ints[12] == 1:
		err = s.Withdraw(ctx, q)
	}
	if err != nil {
		return TickResult{}, fmt.Errorf("admit %s: %w", q, err)
	}
	return r, nil
}

func flag(b bool) int {
	if b {
		return 1
	}
	return 0
}

// StockLevel is a SKU's units as the store reports them, with the
// version that orders the reports.
type StockLevel struct {
	SKU       string
	Available int64
	Version   int64
}

// SetStock records the stock of SKUs of queue q as the store reported
// them, in q's line and in the stock ledger the queues selling them share;
// an older version than the one recorded changes nothing. With only,
// these are all of the queue's SKUs and any other the line recorded is
// dropped.
func (s *Store) SetStock(ctx context.Context, q string, only bool, levels ...StockLevel) error {
	k := keyspace.Of(q)
	args := s.args(k, flag(only))
	figures := make([]stockFigure, len(levels))
	for i, l := range levels {
		args = append(args, l.SKU, l.Available, l.Version)
		figures[i] = stockFigure{l.SKU, l.Available, l.Version}
	}
	if err := stockScript.Run(ctx, s.rdb, stdKeys(k), args...).Err(); err != nil {
		return fmt.Errorf("set stock of %s: %w", q, err)
	}
	if len(levels) == 0 {
		return nil
	}
	if err := s.ledger(ctx, ledgerStockScript, ledgerRequest{Queue: q, Levels: figures}).Err(); err != nil {
		return fmt.Errorf("set stock of %s: %w", q, err)
	}
	return nil
}

// Placed records that the store placed the order of entry seq — its units
// are out of the store's stock now, no longer held by the line — together
// with the stock the store reported, in one step.
func (s *Store) Placed(ctx context.Context, q string, seq uint64, orderID string, l StockLevel) error {
	k := keyspace.Of(q)
	if err := s.run(ctx, placedScript, stdKeys(k), s.args(k, seq, orderID, l.SKU, l.Available, l.Version)...).Err(); err != nil {
		return fmt.Errorf("placed %s/%d: %w", q, seq, err)
	}
	return nil
}

// Admission is an admitted entry waiting in the outbox to be announced.
type Admission struct {
	Queue     string
	Seq       uint64
	User      string
	TokenID   string
	ReadyAt   time.Time
	ExpiresAt time.Time
	// JoinedAt is when the stream stored the join, as the line recorded it
	// (zero for an entry joined before the line kept it).
	JoinedAt time.Time
}

// Outbox returns up to max admissions not yet announced, oldest first.
func (s *Store) Outbox(ctx context.Context, q string, max int) ([]Admission, error) {
	k := keyspace.Of(q)
	seqs, err := s.rdb.ZRange(ctx, k.Outbox(), 0, int64(max)-1).Result()
	if err != nil || len(seqs) == 0 {
		return nil, err
	}
	cmds := make([]*redis.SliceCmd, len(seqs))
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, sq := range seqs {
			seq, _ := strconv.ParseUint(sq, 10, 64)
			cmds[i] = p.HMGet(ctx, k.Entry(seq), "user", "tokenId", "readyAt", "expiresAt", "joined")
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read outbox %s: %w", q, err)
	}
	out := make([]Admission, 0, len(seqs))
	for i, sq := range seqs {
		v := cmds[i].Val()
		seq, _ := strconv.ParseUint(sq, 10, 64)
		a := Admission{Queue: q, Seq: seq}
		a.User, _ = v[0].(string)
		a.TokenID, _ = v[1].(string)
		a.ReadyAt, a.ExpiresAt, a.JoinedAt = msTime(v[2]), msTime(v[3]), msTime(v[4])
		if a.TokenID == "" {
			// Its record went (a leave freed it and expired meanwhile, or
			// a loss): nothing to announce, nothing anyone can order with.
			if err := s.Announced(ctx, q, []uint64{seq}); err != nil {
				return nil, err
			}
			continue
		}
		out = append(out, a)
	}
	return out, nil
}

// Announced removes admissions from the outbox once their events are stored.
// Removing by sequence is idempotent, so two admitters draining the same
// outbox never drop an admission the other has not published.
func (s *Store) Announced(ctx context.Context, q string, seqs []uint64) error {
	if len(seqs) == 0 {
		return nil
	}
	members := make([]any, len(seqs))
	for i, sq := range seqs {
		members[i] = strconv.FormatUint(sq, 10)
	}
	if err := s.rdb.ZRem(ctx, keyspace.Of(q).Outbox(), members...).Err(); err != nil {
		return fmt.Errorf("trim outbox %s: %w", q, err)
	}
	return nil
}

// Abandoned is a shopper the line found gone (see admitScript), to be
// recorded on the entries stream.
type Abandoned struct {
	Seq  uint64
	User string
}

// AbandonedOutbox returns up to max shoppers abandoned but not yet
// recorded on the stream.
func (s *Store) AbandonedOutbox(ctx context.Context, q string, max int) ([]Abandoned, error) {
	k := keyspace.Of(q)
	seqs, err := s.rdb.ZRange(ctx, k.Leaves(), 0, int64(max)-1).Result()
	if err != nil || len(seqs) == 0 {
		return nil, err
	}
	cmds := make([]*redis.StringCmd, len(seqs))
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, sq := range seqs {
			seq, _ := strconv.ParseUint(sq, 10, 64)
			cmds[i] = p.HGet(ctx, k.Entry(seq), "user")
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read abandoned %s: %w", q, err)
	}
	out := make([]Abandoned, 0, len(seqs))
	for i, sq := range seqs {
		seq, _ := strconv.ParseUint(sq, 10, 64)
		out = append(out, Abandoned{Seq: seq, User: cmds[i].Val()})
	}
	return out, nil
}

// AbandonedRecorded trims the leaves the stream stored from the outbox.
func (s *Store) AbandonedRecorded(ctx context.Context, q string, seqs []uint64) error {
	if len(seqs) == 0 {
		return nil
	}
	members := make([]any, len(seqs))
	for i, sq := range seqs {
		members[i] = strconv.FormatUint(sq, 10)
	}
	if err := s.rdb.ZRem(ctx, keyspace.Of(q).Leaves(), members...).Err(); err != nil {
		return fmt.Errorf("trim abandoned %s: %w", q, err)
	}
	return nil
}

// Present records that the waiting shoppers seqs of q are there at now
// (the notifier holds their streams): one command for all of them.
func (s *Store) Present(ctx context.Context, q string, seqs []uint64, now time.Time) error {
	if len(seqs) == 0 {
		return nil
	}
	z := make([]redis.Z, len(seqs))
	for i, sq := range seqs {
		z[i] = redis.Z{Score: float64(now.UnixMilli()), Member: sq}
	}
	if err := s.rdb.ZAddArgs(ctx, keyspace.Of(q).Seen(), redis.ZAddArgs{XX: true, GT: true, Members: z}).Err(); err != nil {
		return fmt.Errorf("present %s: %w", q, err)
	}
	return nil
}

// Stats is a queue's live figures.
type Stats struct {
	Waiting, Active, AdmittedTotal int64
	AdmitRatePerSec                float64
	// Stock is the stock state of a stock-aware queue ("" otherwise),
	// Sellable the units that could go to the next in line (every queue
	// sharing the SKUs counted, see Share), HeldAdmitted
	// the units held by admitted shoppers who have not ordered (one each),
	// SKUs each SKU's figures and SKUsAvailable the SKUs with units left
	// (what a poll answers as skusAvailable) — as the last tick saw them.
	Stock         string
	Sellable      int64
	HeldAdmitted  int64
	SKUs          []SKUStock
	SKUsAvailable []string
	// PreQueue is how many wait in a scheduled drop's pre-queue; Drawn
	// whether it has been drawn.
	PreQueue int64
	Drawn    bool
	// LastTick is when an admitter last ticked the queue, on Redis time
	// (zero: never). A queue whose last tick is old has no live admitter.
	LastTick time.Time
}

// SKUStock is one SKU's stock as the line sees it.
type SKUStock struct {
	SKU       string `json:"sku"`
	Available int64  `json:"available"` // in the store, as last reported
	Claimed   int64  `json:"claimed"`   // ordered, not placed by the store yet (held)
	Pending   int64  `json:"pending"`   // placed, not final yet
}

// Stats reads a queue's live figures in one round trip.
func (s *Store) Stats(ctx context.Context, q string) (Stats, error) {
	k := keyspace.Of(q)
	var w, a, pre *redis.IntCmd
	var st *redis.SliceCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		w = p.ZCard(ctx, k.Waiting())
		a = p.ZCard(ctx, k.Active())
		pre = p.ZCard(ctx, k.PreQueue())
		st = p.HMGet(ctx, k.Stats(), "admittedTotal", "rate", "stock", "sellable", "heldAdmitted", "skustock", "drawn", "lastTick", "skus")
		return nil
	})
	if err != nil {
		return Stats{}, fmt.Errorf("stats %s: %w", q, err)
	}
	out := Stats{Waiting: w.Val(), Active: a.Val(), PreQueue: pre.Val()}
	v := st.Val()
	str := func(i int) string { s, _ := v[i].(string); return s }
	out.Drawn = v[6] != nil
	if out.Drawn {
		out.PreQueue = 0 // drawn, not settled yet
	}
	if ms, err := strconv.ParseInt(str(7), 10, 64); err == nil {
		out.LastTick = time.UnixMilli(ms)
	}
	out.AdmittedTotal, _ = strconv.ParseInt(str(0), 10, 64)
	out.AdmitRatePerSec, _ = strconv.ParseFloat(str(1), 64)
	out.Stock = str(2)
	out.Sellable, _ = strconv.ParseInt(str(3), 10, 64)
	out.HeldAdmitted, _ = strconv.ParseInt(str(4), 10, 64)
	for _, f := range strings.Split(str(5), ",") {
		p := strings.Split(f, ":")
		if len(p) != 4 {
			continue
		}
		s := SKUStock{SKU: p[0]}
		s.Available, _ = strconv.ParseInt(p[1], 10, 64)
		s.Claimed, _ = strconv.ParseInt(p[2], 10, 64)
		s.Pending, _ = strconv.ParseInt(p[3], 10, 64)
		out.SKUs = append(out.SKUs, s)
	}
	out.SKUsAvailable = skuList(str(8))
	return out, nil
}

// Now returns Redis's time: the one clock every decision uses.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	t, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return time.Time{}, fmt.Errorf("redis time: %w", err)
	}
	return t, nil
}

func entryOf(res []any) (Entry, error) {
	if len(res) < 4 {
		return Entry{}, errors.New("waitqueue: short script reply")
	}
	st, _ := res[0].(string)
	seqStr, _ := res[1].(string)
	seq, _ := strconv.ParseUint(seqStr, 10, 64)
	rank, _ := res[2].(int64)
	waiting, _ := res[3].(int64)
	e := Entry{Seq: seq, Status: Status(st), Waiting: waiting}
	if e.Status == Waiting && rank >= 0 {
		e.Position = rank + 1
	}
	return e, nil
}

func msTime(v any) time.Time {
	s, _ := v.(string)
	if s == "" { // not admitted: every waiting shopper's poll (a parse error allocates)
		return time.Time{}
	}
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil || ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// ETA estimates how long the shopper at position waits, from the admission
// rate measured over the last minute (Entry.Rate, Stats.AdmitRatePerSec).
// It is unknown (ok false) until the queue has admitted anyone: a configured
// rate would be a promise, not an estimate.
func ETA(position int64, ratePerSec float64) (seconds int64, ok bool) {
	if position <= 0 {
		return 0, true
	}
	if ratePerSec <= 0 {
		return 0, false
	}
	return int64(math.Ceil(float64(position) / ratePerSec)), true
}

// ClosedSince records that q is closed (or forgets it when it is open again)
// and returns since when, on Redis time; zero while open.
func (s *Store) ClosedSince(ctx context.Context, q string, closed bool) (time.Time, error) {
	c := 0
	if closed {
		c = 1
	}
	ms, err := closedSinceScript.Run(ctx, s.rdb, []string{keyspace.Of(q).Stats()}, c).Int64()
	if err != nil {
		return time.Time{}, fmt.Errorf("closed since %s: %w", q, err)
	}
	if ms == 0 {
		return time.Time{}, nil
	}
	return time.UnixMilli(ms), nil
}

// Closing is what a closed queue's line says of its end, on Redis time.
type Closing struct {
	ClosedAt time.Time // when an admitter first saw the queue closed (zero: none has)
	Now      time.Time // Redis's time when it was read
	Held     int64     // the slots still held: admitted shoppers who may order
	FreeAt   time.Time // when the last of them frees (zero: none held)
}

// Closing reads how far q's closing has gone (see the gateway's DELETE of
// a queue).
func (s *Store) Closing(ctx context.Context, q string) (Closing, error) {
	k := keyspace.Of(q)
	r, err := closingScript.Run(ctx, s.rdb, []string{k.Stats(), k.Active()}).Int64Slice()
	if err == nil && len(r) != 4 {
		err = fmt.Errorf("%d fields, want 4", len(r))
	}
	if err != nil {
		return Closing{}, fmt.Errorf("closing of %s: %w", q, err)
	}
	at := func(ms int64) time.Time {
		if ms == 0 {
			return time.Time{}
		}
		return time.UnixMilli(ms)
	}
	return Closing{ClosedAt: at(r[0]), Now: at(r[1]), Held: r[2], FreeAt: at(r[3])}, nil
}

// SlotsFreeAt is when the last slot of q's active set frees: its highest
// score, a token's expiresAt (readyAt plus the lifetime the queue had at
// the admission, jitter included) or an order's hold. Zero when no slot is
// taken. A closed queue's line is kept until then (see the admitter's
// dropIfClosedLong): a READY shopper orders until their token expires.
func (s *Store) SlotsFreeAt(ctx context.Context, q string) (time.Time, error) {
	// ZRANGE … REV, not ZREVRANGE: the services' ACL allows zrange.
	last, err := s.rdb.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{Key: keyspace.Of(q).Active(), Start: 0, Stop: 0, Rev: true}).Result()
	if err != nil {
		return time.Time{}, fmt.Errorf("slots of %s: %w", q, err)
	}
	if len(last) == 0 {
		return time.Time{}, nil
	}
	return time.UnixMilli(int64(last[0].Score)), nil
}

// The draw's refusals.
var (
	// ErrDrawn: the queue's pre-queue was drawn already.
	ErrDrawn = errors.New("the pre-queue was drawn already")
	// ErrDrawChanged: the list given is not the pre-queue of the entries
	// cursor (someone joined or left since it was read): read it again.
	ErrDrawChanged = errors.New("the pre-queue changed since it was read")
)

// Draw places the pre-queue of q in the order given (the lottery's), read
// at version (see PreQueue), and keeps digest (the order's, see lottery.Digest) for the reveal. The order
// is staged in batches first; then one script checks it is exactly the
// pre-queue of the entries cursor and makes it the line (see drawScript),
// so Redis is never busy for long, even for a million. It returns how many
// were placed. Call SettleDraw after.
func (s *Store) Draw(ctx context.Context, q, epoch, version string, order []uint64, digest string) (int, error) {
	return s.draw(ctx, q, epoch, version, order, digest, 0)
}

// Redraw is Draw of a queue whose draw Redis lost (the catalog says drawn,
// the line does not): the pre-queue is that of the first draw's entries
// cursor upTo — so that the same seed gives the same order — and the
// pre-queue joins after it queue FIFO, as they did the first time. order
// must be the lottery order of the pre-queue up to upTo.
func (s *Store) Redraw(ctx context.Context, q, epoch, version string, order []uint64, digest string, upTo uint64) (int, error) {
	return s.draw(ctx, q, epoch, version, order, digest, upTo)
}

func (s *Store) draw(ctx context.Context, q, epoch, version string, order []uint64, digest string, upTo uint64) (int, error) {
	k := keyspace.Of(q)
	if err := s.rdb.Unlink(ctx, k.Draw()).Err(); err != nil {
		return 0, fmt.Errorf("draw %s: %w", q, err)
	}
	n := float64(len(order) + 1)
	for i := 0; i < len(order); i += drawBatch {
		chunk := order[i:min(i+drawBatch, len(order))]
		z := make([]redis.Z, len(chunk))
		for j, seq := range chunk {
			z[j] = redis.Z{Score: float64(i+j+1) / n, Member: seq}
		}
		if err := s.rdb.ZAdd(ctx, k.Draw(), z...).Err(); err != nil {
			return 0, fmt.Errorf("draw %s: stage: %w", q, err)
		}
	}
	placed, err := drawScript.Run(ctx, s.rdb, stdKeys(k), s.args(k, epoch, digest, len(order), version, upTo)...).Int()
	switch {
	case err != nil:
		return 0, fmt.Errorf("draw %s: %w", q, err)
	case placed == -1:
		return 0, ErrDrawn
	case placed == -2:
		return 0, ErrDrawChanged
	}
	return placed, nil
}

// drawBatch is how many places one command of the draw writes or settles.
const drawBatch = 2_000

// SettleDraw turns a batch of q's drawn records from pre-queued into
// waiting (see settleDrawScript) and returns how many are left; the
// admitter calls it once a tick until none are, so that Redis is never
// busy for long. Nothing left is one cheap call.
func (s *Store) SettleDraw(ctx context.Context, q string) (int, error) {
	k := keyspace.Of(q)
	left, err := settleDrawScript.Run(ctx, s.rdb, stdKeys(k), s.args(k, drawBatch)...).Int()
	if err != nil {
		return 0, fmt.Errorf("settle the draw of %s: %w", q, err)
	}
	return left, nil
}

// Drawing is what the line recorded of a drop's draw.
type Drawing struct {
	Drawn   bool
	Entries int
	// Cursor is the entries cursor the draw placed the pre-queue of:
	// every pre-queue join up to it, none after.
	Cursor uint64
	Digest string
}

// Drawing reads what the line recorded of q's draw.
func (s *Store) Drawing(ctx context.Context, q string) (Drawing, error) {
	v, err := s.rdb.HMGet(ctx, keyspace.Of(q).Stats(), "drawn", "drawCursor", "drawDigest").Result()
	if err != nil {
		return Drawing{}, fmt.Errorf("drawing %s: %w", q, err)
	}
	str := func(i int) string { s, _ := v[i].(string); return s }
	d := Drawing{Drawn: v[0] != nil, Digest: str(2)}
	d.Entries, _ = strconv.Atoi(str(0))
	d.Cursor, _ = strconv.ParseUint(str(1), 10, 64)
	return d, nil
}

// PreEntry is one shopper in a pre-queue.
type PreEntry struct {
	Seq  uint64
	User string
}

// PreQueue reads the pre-queue of q (for the draw), whether q was drawn,
// and the pre-queue's version as the read began: Draw refuses an order
// read from a pre-queue that changed since.
func (s *Store) PreQueue(ctx context.Context, q string) ([]PreEntry, bool, string, error) {
	k := keyspace.Of(q)
	st, err := s.rdb.HMGet(ctx, k.Stats(), "drawn", "preVersion").Result()
	if err != nil {
		return nil, false, "", fmt.Errorf("pre-queue %s: %w", q, err)
	}
	drawn := st[0] != nil
	version, _ := st[1].(string)
	if version == "" {
		version = "0"
	}
	seqs, err := s.rdb.ZRange(ctx, k.PreQueue(), 0, -1).Result()
	if err != nil {
		return nil, false, "", fmt.Errorf("pre-queue %s: %w", q, err)
	}
	out := make([]PreEntry, 0, len(seqs))
	for len(seqs) > 0 {
		chunk := seqs[:min(len(seqs), 10_000)]
		seqs = seqs[len(chunk):]
		cmds := make([]*redis.StringCmd, len(chunk))
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, sq := range chunk {
				seq, _ := strconv.ParseUint(sq, 10, 64)
				cmds[i] = p.HGet(ctx, k.Entry(seq), "user")
			}
			return nil
		})
		if err != nil && err != redis.Nil {
			return nil, false, "", fmt.Errorf("pre-queue %s: %w", q, err)
		}
		for i, sq := range chunk {
			seq, _ := strconv.ParseUint(sq, 10, 64)
			out = append(out, PreEntry{Seq: seq, User: cmds[i].Val()})
		}
	}
	return out, drawn, version, nil
}

// AtOnce is what an admission at once needs besides what the queue's last
// tick recorded (its limit, maxAdmitPerTick and whether admission is
// paused: see admitNowScript).
type AtOnce struct {
	TokenTTL   time.Duration
	TickLength time.Duration
	// StockAware admits only against units that could still be sold;
	// Share names the queues those units are shared with (see Share). A
	// stock-aware admission at once reserves one unit in the ledger: it
	// admits the head of the line alone (the ticks admit the rest).
	StockAware bool
	Share      Share
}

// AdmitNow admits the head of q's line at once, outside the ticks (see
// admitNowScript), and returns the sequences admitted: within what the
// queue's last tick obeyed — its limit of slots held, what is left of its
// maxAdmitPerTick in the current tick, no admission while it was paused —
// and the units that could still be sold at this moment.
func (s *Store) AdmitNow(ctx context.Context, q, epoch string, a AtOnce) ([]uint64, error) {
	return s.admitNow(ctx, q, epoch, a, 0)
}

// AdmitEntry admits entry seq of q at once if it waits, outside the ticks
// and whatever its place: a passthrough join (nobody waits there, so order
// does not matter). The guards of AdmitNow hold, but for maxAdmitPerTick.
func (s *Store) AdmitEntry(ctx context.Context, q, epoch string, seq uint64, a AtOnce) ([]uint64, error) {
	return s.admitNow(ctx, q, epoch, a, seq)
}

func (s *Store) admitNow(ctx context.Context, q, epoch string, a AtOnce, only uint64) ([]uint64, error) {
	var res reservation
	var share string
	if a.StockAware && len(a.Share.SKUs) > 0 {
		var err error
		if res, share, err = s.reserve(ctx, q, a.Share, 1); err != nil {
			return nil, fmt.Errorf("admit now %s: %w", q, err)
		}
	}
	return s.admitNowOn(ctx, q, epoch, a, only, res, share)
}

// admitNowOn is admitNow on reservation res (share: as the ledger gave
// it), then reports the line's snapshot or releases the reservation
// unused.
func (s *Store) admitNowOn(ctx context.Context, q, epoch string, a AtOnce, only uint64, res reservation, share string) ([]uint64, error) {
	k := keyspace.Of(q)
	shared := share != ""
	out, err := admitNowScript.Run(ctx, s.rdb, stdKeys(k), s.args(k, q, epoch, a.TokenTTL.Milliseconds(), a.TickLength.Milliseconds(),
		flag(a.StockAware), only, share)...).StringSlice()
	if err == nil && len(out) < 2 {
		err = fmt.Errorf("reply of %d fields", len(out))
	}
	if err != nil {
		return nil, fmt.Errorf("admit now %s: %w", q, err)
	}
	switch snap := out[1]; {
	case shared && snap != "":
		err = s.report(ctx, q, a.TickLength.Milliseconds(), snap)
	case shared && res.Grant > 0:
		err = s.cancel(ctx, q, res.Res) // refused before it counted the stock: the reservation is unused
	}
	if err != nil {
		return nil, fmt.Errorf("admit now %s: %w", q, err)
	}
	if out[0] == "later" {
		return nil, ErrNotCurrent
	}
	admitted := make([]uint64, len(out)-2)
	for i, r := range out[2:] {
		admitted[i], _ = strconv.ParseUint(r, 10, 64)
	}
	return admitted, nil
}

// ErrNotCurrent says AdmitNow or AdmitEntry admitted nobody because of a
// guard only a tick lifts: no tick for two ticks and a second (is an
// admitter running?), or the last tick found the line behind the streams
// (an admission or an order event not applied yet — usually the one a
// tick has just published), or — AdmitNow only — the ticks' last readyAt
// lies ahead after ticks that caught up; or a tick used a later stock
// reservation meanwhile. The next tick may lift it (or a fresh
// reservation: try again).
var ErrNotCurrent = errors.New("waitqueue: the line is not current (no recent tick, behind the streams, or its last admissions not READY yet)")

// Invite is an invite code taken by a join, with the expiry it was
// issued with: a join that cannot be recorded gives it back as it was.
type Invite struct {
	Code      string
	ExpiresAt time.Time
}

// AddInvites records single-use invite codes of q, each valid until
// expiresAt (now is the caller's Redis-synced clock). Every code keeps its
// own expiry (its score, in Unix ms): a later batch neither cuts an earlier
// one's lifetime short nor stretches it, and the key lives as long as its
// longest-lived code. Codes past their expiry are dropped on the way.
func (s *Store) AddInvites(ctx context.Context, q string, codes []string, now, expiresAt time.Time) error {
	members := make([]redis.Z, len(codes))
	for i, c := range codes {
		members[i] = redis.Z{Score: float64(expiresAt.UnixMilli()), Member: c}
	}
	if err := s.putInvites(ctx, q, members, now, expiresAt); err != nil {
		return fmt.Errorf("add invites %s: %w", q, err)
	}
	return nil
}

// putInvites adds members to q's invite codes and keeps the key until
// expiresAt at least: EXPIRE NX gives a new key its lifetime, EXPIRE GT
// lengthens an existing key's, never shortens it.
func (s *Store) putInvites(ctx context.Context, q string, members []redis.Z, now, expiresAt time.Time) error {
	if !expiresAt.After(now) {
		return nil // expired already: nothing to keep (and EXPIRE 0 would drop every code)
	}
	key := keyspace.Of(q).Invites()
	ttl := expiresAt.Sub(now).Truncate(time.Second) + time.Second
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZRemRangeByScore(ctx, key, "-inf", "("+strconv.FormatInt(now.UnixMilli(), 10))
		p.ZAdd(ctx, key, members...)
		p.ExpireNX(ctx, key, ttl)
		p.ExpireGT(ctx, key, ttl)
		return nil
	})
	return err
}

// UseInvite takes invite code of q, once: false when it is unknown, used or
// past its expiry at now (the caller's Redis-synced clock).
func (s *Store) UseInvite(ctx context.Context, q, code string, now time.Time) (Invite, bool, error) {
	key := keyspace.Of(q).Invites()
	var score *redis.FloatCmd
	var removed *redis.IntCmd
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		score = p.ZScore(ctx, key, code)
		removed = p.ZRem(ctx, key, code)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return Invite{}, false, fmt.Errorf("use invite %s: %w", q, err)
	}
	if removed.Val() != 1 || score.Err() != nil {
		return Invite{}, false, nil
	}
	inv := Invite{Code: code, ExpiresAt: time.UnixMilli(int64(score.Val()))}
	return inv, now.Before(inv.ExpiresAt), nil
}

// ReturnInvite gives back a code whose join could not be recorded, with
// the expiry it had.
func (s *Store) ReturnInvite(ctx context.Context, q string, inv Invite, now time.Time) error {
	err := s.putInvites(ctx, q, []redis.Z{{Score: float64(inv.ExpiresAt.UnixMilli()), Member: inv.Code}}, now, inv.ExpiresAt)
	if err != nil {
		return fmt.Errorf("return invite %s: %w", q, err)
	}
	return nil
}
