// Package waitqueue is the live waiting line in Redis: who is waiting, in
// what order, who holds an admission slot, and what the admitter still has
// to announce.
//
// Redis is a projection here, not the record: every join, leave and
// admission is an event in JetStream, and the line can be rebuilt from them.
// Each state change is one Lua script (see scripts.go), so the line's
// invariants hold however many gateways and admitters touch it at once.
package waitqueue

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Status is where an entry stands.
type Status string

// The statuses of an entry. Unknown means Redis has no record of it (yet).
const (
	Unknown  Status = "unknown"
	Waiting  Status = "waiting"
	Admitted Status = "admitted"
	Expired  Status = "expired"
	Used     Status = "used"
	Left     Status = "left"
)

// Live reports whether the entry still holds a place or a slot.
func (s Status) Live() bool { return s == Waiting || s == Admitted }

// Store reads and changes the waiting lines kept in one Redis (or Redis
// Cluster). It is safe for concurrent use.
type Store struct {
	rdb   redis.UniversalClient
	calls chan *scriptCall // set by EnableBatching
}

// New returns a Store on rdb.
func New(rdb redis.UniversalClient) *Store { return &Store{rdb: rdb} }

type keys struct{ prefix string }

func keysOf(q string) keys { return keys{prefix: "usher:{" + q + "}:"} }

func (k keys) waiting() string { return k.prefix + "waiting" }
func (k keys) active() string  { return k.prefix + "active" }
func (k keys) outbox() string  { return k.prefix + "outbox" }
func (k keys) users() string   { return k.prefix + "users" }
func (k keys) stats() string   { return k.prefix + "stats" }
func (k keys) admits() string  { return k.prefix + "admits" }
func (k keys) entry(seq uint64) string {
	return k.prefix + "e:" + strconv.FormatUint(seq, 10)
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
}

// Ingest puts the shopper who joined with seq in line, unless that sequence
// was seen before or the user is already in line (then it resolves to the
// user's current entry). It is idempotent: gateway and admitter both call it.
func (s *Store) Ingest(ctx context.Context, q string, seq uint64, user string) (Entry, error) {
	k := keysOf(q)
	res, err := s.run(ctx, ingestScript, []string{k.waiting(), k.users()}, k.prefix, seq, user, 1).Slice()
	if err != nil {
		return Entry{}, fmt.Errorf("ingest %s/%d: %w", q, seq, err)
	}
	return entryOf(res)
}

// Joined is one join event for IngestBatch.
type Joined struct {
	Queue string
	Seq   uint64
	User  string
}

// IngestBatch ingests many joins in one pipelined round trip, in order.
// The error is the first one met; entries before it were ingested.
func (s *Store) IngestBatch(ctx context.Context, joins []Joined) error {
	if len(joins) == 0 {
		return nil
	}
	// Make sure the script is cached so the pipeline can use EVALSHA alone.
	if err := ingestScript.Load(ctx, s.rdb).Err(); err != nil {
		return fmt.Errorf("load ingest script: %w", err)
	}
	cmds, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, j := range joins {
			k := keysOf(j.Queue)
			ingestScript.EvalSha(ctx, p, []string{k.waiting(), k.users()}, k.prefix, j.Seq, j.User, 0)
		}
		return nil
	})
	if err != nil {
		for _, c := range cmds {
			if c.Err() != nil {
				return fmt.Errorf("ingest batch: %w", c.Err())
			}
		}
		return fmt.Errorf("ingest batch: %w", err)
	}
	return nil
}

// Lookup returns the user's current entry in q, and false when the user has
// none.
func (s *Store) Lookup(ctx context.Context, q, user string) (seq uint64, st Status, ok bool, err error) {
	k := keysOf(q)
	res, err := s.run(ctx, lookupScript, []string{k.users()}, k.prefix, user).StringSlice()
	if err != nil {
		return 0, "", false, fmt.Errorf("lookup %s/%s: %w", q, user, err)
	}
	if len(res) != 2 {
		return 0, "", false, nil
	}
	seq, err = strconv.ParseUint(res[0], 10, 64)
	if err != nil {
		return 0, "", false, fmt.Errorf("lookup %s/%s: bad seq %q", q, user, res[0])
	}
	return seq, Status(res[1]), true, nil
}

// Poll returns the entry for seq with its position, in one round trip.
// A sequence Redis has not seen yet comes back as Unknown with the waiting
// count, so the caller can answer with an estimate.
func (s *Store) Poll(ctx context.Context, q string, seq uint64) (Entry, error) {
	k := keysOf(q)
	res, err := s.run(ctx, pollScript, []string{k.waiting(), k.stats()}, k.prefix, seq).Slice()
	if err != nil {
		return Entry{}, fmt.Errorf("poll %s/%d: %w", q, seq, err)
	}
	if len(res) != 9 {
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
	rate, _ := res[8].(string)
	e.Rate, _ = strconv.ParseFloat(rate, 64)
	return e, nil
}

// Leave takes the entry out of line, or frees its slot if it was admitted,
// and returns the status it had. Leaving twice is harmless.
func (s *Store) Leave(ctx context.Context, q string, seq uint64, user string) (Status, error) {
	k := keysOf(q)
	st, err := leaveScript.Run(ctx, s.rdb, []string{k.waiting(), k.active()}, k.prefix, seq, user).Text()
	if err != nil {
		return "", fmt.Errorf("leave %s/%d: %w", q, seq, err)
	}
	return Status(st), nil
}

// Redemption is what Redeem found.
type Redemption string

// Redeem's outcomes.
const (
	Redeemed       Redemption = "redeemed" // the token is (now) this order's
	RedeemConflict Redemption = "conflict" // the token is another order's
	RedeemExpired  Redemption = "expired"  // the token expired unused
	RedeemLeft     Redemption = "left"     // the shopper gave the slot up
	RedeemUnknown  Redemption = "unknown"  // Redis has no such admission
)

// Redeem marks the token of entry seq as used by orderID and holds its
// slot until holdUntil (or until Release). See redeemScript.
func (s *Store) Redeem(ctx context.Context, q string, seq uint64, tokenID, orderID string, holdUntil time.Time) (Redemption, error) {
	k := keysOf(q)
	res, err := redeemScript.Run(ctx, s.rdb, []string{k.active()}, k.prefix, seq, tokenID, orderID, holdUntil.UnixMilli()).StringSlice()
	if err != nil {
		return "", fmt.Errorf("redeem %s/%d: %w", q, seq, err)
	}
	if len(res) != 2 {
		return "", fmt.Errorf("redeem %s/%d: reply of %d fields", q, seq, len(res))
	}
	switch r := Redemption(res[0]); r {
	case Redeemed, RedeemConflict, RedeemExpired, RedeemLeft:
		return r, nil
	default:
		return RedeemUnknown, nil
	}
}

// Release frees the slot entry seq holds for orderID, once the order is
// final, so the admitter lets the next shopper in. It is idempotent.
func (s *Store) Release(ctx context.Context, q string, seq uint64, orderID string) (bool, error) {
	k := keysOf(q)
	n, err := releaseScript.Run(ctx, s.rdb, []string{k.active()}, k.prefix, seq, orderID).Int()
	if err != nil {
		return false, fmt.Errorf("release %s/%d: %w", q, seq, err)
	}
	return n == 1, nil
}

// ParseTokenID splits an entry token id (queue:seq) into its queue and
// sequence.
func ParseTokenID(id string) (q string, seq uint64, ok bool) {
	i := strings.LastIndexByte(id, ':')
	if i <= 0 {
		return "", 0, false
	}
	seq, err := strconv.ParseUint(id[i+1:], 10, 64)
	if err != nil {
		return "", 0, false
	}
	return id[:i], seq, true
}

// Tick is the input of one admission tick.
type Tick struct {
	Now             time.Time
	TargetActive    int
	MaxAdmitPerTick int // 0: no cap besides targetActive
	TickLength      time.Duration
	TokenTTL        time.Duration
	// Watermark is the highest join sequence before which every join is
	// known to be in line; later ones wait for the next tick.
	Watermark uint64
	Paused    bool
	// Offset in [0,1000) places each readyAt within its slice of the tick.
	Offset int
}

// TickResult says what one tick did.
type TickResult struct {
	Expired, Admitted int
	Active, Waiting   int64
	// AdmitRatePerSec is the measured admission rate of the last minute,
	// the one Stats reports and ETAs use.
	AdmitRatePerSec float64
}

// Admit runs one admission tick: expires stale tokens, admits as many as
// fit, records them in the outbox. See admitScript for the invariants.
func (s *Store) Admit(ctx context.Context, q string, t Tick) (TickResult, error) {
	k := keysOf(q)
	paused := 0
	if t.Paused {
		paused = 1
	}
	res, err := admitScript.Run(ctx, s.rdb,
		[]string{k.waiting(), k.active(), k.outbox(), k.stats(), k.admits()},
		k.prefix, q, t.Now.UnixMilli(), t.TargetActive, t.MaxAdmitPerTick,
		t.TickLength.Milliseconds(), t.TokenTTL.Milliseconds(), t.Watermark, paused, t.Offset,
	).Int64Slice()
	if err != nil {
		return TickResult{}, fmt.Errorf("admit %s: %w", q, err)
	}
	if len(res) < 5 {
		return TickResult{}, fmt.Errorf("admit %s: short script reply", q)
	}
	return TickResult{Expired: int(res[0]), Admitted: int(res[1]), Active: res[2], Waiting: res[3],
		AdmitRatePerSec: float64(res[4]) / 1000}, nil
}

// Admission is an admitted entry waiting in the outbox to be announced.
type Admission struct {
	Queue     string
	Seq       uint64
	User      string
	TokenID   string
	ReadyAt   time.Time
	ExpiresAt time.Time
}

// Outbox returns up to max admissions not yet announced, oldest first.
func (s *Store) Outbox(ctx context.Context, q string, max int) ([]Admission, error) {
	k := keysOf(q)
	seqs, err := s.rdb.ZRange(ctx, k.outbox(), 0, int64(max)-1).Result()
	if err != nil || len(seqs) == 0 {
		return nil, err
	}
	cmds := make([]*redis.SliceCmd, len(seqs))
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, sq := range seqs {
			cmds[i] = p.HMGet(ctx, k.prefix+"e:"+sq, "user", "tokenId", "readyAt", "expiresAt")
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
		a.ReadyAt, a.ExpiresAt = msTime(v[2]), msTime(v[3])
		if a.TokenID == "" {
			return nil, fmt.Errorf("outbox %s: entry %d has no token record", q, seq)
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
	if err := s.rdb.ZRem(ctx, keysOf(q).outbox(), members...).Err(); err != nil {
		return fmt.Errorf("trim outbox %s: %w", q, err)
	}
	return nil
}

// Stats is a queue's live figures.
type Stats struct {
	Waiting, Active, AdmittedTotal int64
	AdmitRatePerSec                float64
}

// Stats reads a queue's live figures in one round trip.
func (s *Store) Stats(ctx context.Context, q string) (Stats, error) {
	k := keysOf(q)
	var w, a *redis.IntCmd
	var st *redis.SliceCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		w = p.ZCard(ctx, k.waiting())
		a = p.ZCard(ctx, k.active())
		st = p.HMGet(ctx, k.stats(), "admittedTotal", "rate")
		return nil
	})
	if err != nil {
		return Stats{}, fmt.Errorf("stats %s: %w", q, err)
	}
	out := Stats{Waiting: w.Val(), Active: a.Val()}
	if v, ok := st.Val()[0].(string); ok {
		out.AdmittedTotal, _ = strconv.ParseInt(v, 10, 64)
	}
	if v, ok := st.Val()[1].(string); ok {
		out.AdmitRatePerSec, _ = strconv.ParseFloat(v, 64)
	}
	return out, nil
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
