// Package line is the line as a shopper's requests see and change it:
// a join put in line at once (Ingest), a user's lookup (with the join's
// rate limits in the same step), a poll, a leave, and the ranks and
// presence the notifier reads. The gateway's line API and the notifier
// take it.
package line

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
	"usher/internal/keyspace"
	"usher/internal/ratelimit"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/internal/linescript"

	"github.com/redis/go-redis/v9"
)

// Line is what a shopper's requests do to the line: join (Ingest), look
// a user up (with the join's rate limits), poll, leave — the gateway's
// line API — and the ranks and presence the notifier reads, and the line's
// figures. It is safe for concurrent use.
type Line struct {
	client *waitqueue.Client
	rdb    redis.UniversalClient
}

// New returns the Line role on c. Its per-request scripts go through
// c's batcher, which loads them as it starts.
func New(c *waitqueue.Client) *Line {
	c.Preload(ingestScript, lookupScript, lookupLimitedScript, pollScript)
	return &Line{client: c, rdb: c.Redis()}
}

// Ingest puts the shopper who joined with seq in line ahead of the
// admitter's follower, so the gateway can answer with the exact place
// (unless that sequence was seen before or the user is already in line:
// then it resolves to the user's current entry). epoch is the identity of
// the entries stream the sequence counts in; prev is the entry the gateway
// saw finished when it published the join (0: none).
func (l *Line) Ingest(ctx context.Context, q, epoch string, seq uint64, user string, prev uint64) (waitqueue.Entry, error) {
	return l.IngestAs(ctx, q, epoch, seq, user, prev, waitqueue.InLine)
}

// IngestAs is Ingest of a join of the given kind. seq is the join's
// place (event.Place).
func (l *Line) IngestAs(ctx context.Context, q, epoch string, seq uint64, user string, prev uint64, kind waitqueue.JoinKind) (waitqueue.Entry, error) {
	e, _, err := l.ingest(ctx, q, ingestArgs{Epoch: epoch, Seq: seq, User: user, Prev: prev, Kind: kind})
	return e, err
}

// IngestJoined is IngestAs of the join a usher.joined.v1 message stored at
// stream sequence seq: it puts the join at its place — seq while the
// queue had no usher.joins.v2 message, seq × 1024 after the first one
// (event.Place) — and returns that place. The line knows the first
// usher.joins.v2 message once its follower applied it: a join stored
// just after the queue's first group, before the follower applied that
// group, is put at seq (the follower, applying it, keeps the user there:
// their live entry), while a rebuild from the stream would place it at
// seq × 1024.
func (l *Line) IngestJoined(ctx context.Context, q, epoch string, seq uint64, user string, prev uint64, kind waitqueue.JoinKind) (waitqueue.Entry, uint64, error) {
	return l.ingest(ctx, q, ingestArgs{Epoch: epoch, Seq: seq, User: user, Prev: prev, Kind: kind, Form: placeJoined})
}

// ingest runs ingest.lua for one join into q: its entry and place.
func (l *Line) ingest(ctx context.Context, q string, args ingestArgs) (waitqueue.Entry, uint64, error) {
	k := keyspace.Of(q)
	return decodeIngest(l.client.RunScript(ctx, ingestScript, linescript.Keys(k), args.argv(k, l.client.TombstoneTTL())...), q, args)
}

// IngestJoins is IngestJoined of every join a usher.joins.v2 message stored
// at stream sequence seq lists, in their order, in one command: joins[i]
// goes to its place seq × 1024 + i (event.Place; the message is a group,
// so the queue's joins count in groups from it or before). A join listed
// twice, or of a user in line already, resolves to the user's live entry
// as IngestJoined's does. The result has one Ingested per join, each with
// its own error (ErrStale, ErrConflict); err is the command's, which
// every join shares.
func (l *Line) IngestJoins(ctx context.Context, q, epoch string, seq uint64, joins []waitqueue.ListedJoin) ([]waitqueue.Ingested, error) {
	if len(joins) == 0 {
		return nil, nil
	}
	k := keyspace.Of(q)
	cmd := waitqueue.WaitOutMove(ctx, func() *redis.Cmd {
		return ingestGroupScript.Run(ctx, l.rdb, linescript.Keys(k), ingestGroupArgv(k, l.client.TombstoneTTL(), epoch, seq, joins)...)
	})
	replies, err := decodeIngestGroup(ctx, cmd, len(joins))
	if err != nil {
		return nil, fmt.Errorf("ingest %s/%d: %w", q, seq, err)
	}
	out := make([]waitqueue.Ingested, len(joins))
	for i, c := range replies {
		e, place, err := decodeIngest(c, q, ingestArgs{Epoch: epoch, Seq: seq, User: joins[i].User})
		out[i] = waitqueue.Ingested{Entry: e, Place: place, Err: err}
	}
	return out, nil
}

// Lookup returns the user's current entry in q and what they bought there.
func (l *Line) Lookup(ctx context.Context, q, user string) (waitqueue.Current, error) {
	k := keyspace.Of(q)
	args := lookupArgs{User: user}
	res, err := l.client.RunScript(ctx, lookupScript, args.keys(k), args.argv(k)...).Slice()
	if err == nil {
		var c waitqueue.Current
		if c, err = decodeLookup(res); err == nil {
			return c, nil
		}
	}
	return waitqueue.Current{}, fmt.Errorf("lookup %s/%s: %w", q, user, err)
}

// LookupLimited is Lookup and the rate-limit decision of limits (whose
// keys are q's, see ratelimit.Key) in one step: a request the limits refuse
// is charged to none of them, and its lookup is answered all the same.
// With no limit on it is Lookup, and the decision allows.
func (l *Line) LookupLimited(ctx context.Context, q, user string, limits ratelimit.Plan) (waitqueue.Current, ratelimit.Decision, error) {
	if limits.Empty() {
		c, err := l.Lookup(ctx, q, user)
		return c, ratelimit.Decision{Allowed: true}, err
	}
	k := keyspace.Of(q)
	args := lookupLimitedArgs{User: user, Limits: limits}
	c, d, err := decodeLookupLimited(l.client.RunScript(ctx, lookupLimitedScript, args.keys(k), args.argv(k)...), args)
	if err != nil {
		return waitqueue.Current{}, ratelimit.Decision{}, fmt.Errorf("lookup %s/%s: %w", q, user, err)
	}
	return c, d, nil
}

// Poll returns the entry for seq with its position, in one round trip.
// A sequence Redis has not applied yet comes back as Unknown with the
// waiting count, so the caller can answer with an estimate.
func (l *Line) Poll(ctx context.Context, q string, seq uint64) (waitqueue.Entry, error) {
	return l.poll(ctx, q, pollArgs{Seq: seq})
}

// PollPresent is the shopper's own poll: Poll, and a waiting shopper is
// recorded present (see admission/admit.lua: abandonment) unless they were
// less than every ago (catalog.Config.PresenceEvery: as sharp as the
// queue's abandonment needs). every ≤ 0 records nothing.
func (l *Line) PollPresent(ctx context.Context, q string, seq uint64, every time.Duration) (waitqueue.Entry, error) {
	return l.poll(ctx, q, pollArgs{Seq: seq, PresentEvery: max(every, 0)})
}

func (l *Line) poll(ctx context.Context, q string, args pollArgs) (waitqueue.Entry, error) {
	k := keyspace.Of(q)
	e, err := decodePoll(l.client.RunScript(ctx, pollScript, linescript.Keys(k), args.argv(k)...))
	if err != nil {
		return waitqueue.Entry{}, fmt.Errorf("poll %s/%d: %w", q, args.Seq, err)
	}
	return e, nil
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
// and returns the status it had and whether its leave is still to be
// recorded on the entries stream: true when this leave took effect, or an
// earlier one did and is not recorded yet (see leave.lua). Leaving twice
// is harmless.
func (l *Line) Leave(ctx context.Context, q string, seq uint64, user string) (had waitqueue.Status, toRecord bool, err error) {
	k := keyspace.Of(q)
	args := leaveArgs{Seq: seq, User: user}
	res, err := waitqueue.WaitOutMove(ctx, func() *redis.Cmd {
		return leaveScript.Run(ctx, l.rdb, linescript.Keys(k), args.argv(k, l.client.TombstoneTTL())...)
	}).Slice()
	if err != nil {
		return "", false, fmt.Errorf("leave %s/%d: %w", q, seq, err)
	}
	if len(res) != 2 {
		return "", false, fmt.Errorf("leave %s/%d: reply %v", q, seq, res)
	}
	st, _ := res[0].(string)
	return waitqueue.Status(st), linescript.Int(res[1]) == 1, nil
}

// LeaveRecorded forgets shoppers' leaves the entries stream has stored
// (see Leave) and frees the slots admitted entries kept until then: the
// gateway's step after its own record, and the admitter's after it
// recorded what a gateway could not. A leave forgotten already changes
// nothing. Only shoppers' own leaves count here (an abandonment's Reason
// is not looked at).
func (l *Line) LeaveRecorded(ctx context.Context, q string, leaves ...waitqueue.UnrecordedLeave) error {
	if len(leaves) == 0 {
		return nil
	}
	k := keyspace.Of(q)
	args := recordedArgs(leaves)
	err := waitqueue.WaitOutMove(ctx, func() *redis.Cmd {
		return leaveRecordedScript.Run(ctx, l.rdb, linescript.Keys(k), args.argv(k, l.client.TombstoneTTL())...)
	}).Err()
	if err != nil {
		return fmt.Errorf("leaves of %s recorded: %w", q, err)
	}
	return nil
}

// Stats reads a queue's live figures in one round trip.
func (l *Line) Stats(ctx context.Context, q string) (waitqueue.Stats, error) {
	k := keyspace.Of(q)
	var w, a, pre *redis.IntCmd
	var st *redis.SliceCmd
	_, err := l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		w = p.ZCard(ctx, k.Waiting())
		a = p.ZCard(ctx, k.Active())
		pre = p.ZCard(ctx, k.PreQueue())
		st = p.HMGet(ctx, k.Stats(), "admittedTotal", "rate", "stock", "sellable", "heldAdmitted", "skustock", "drawn", "lastTick", "skus")
		return nil
	})
	if err != nil {
		return waitqueue.Stats{}, fmt.Errorf("stats %s: %w", q, err)
	}
	out := waitqueue.Stats{Waiting: w.Val(), Active: a.Val(), PreQueue: pre.Val()}
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
		sku := waitqueue.SKUStock{SKU: p[0]}
		sku.Available, _ = strconv.ParseInt(p[1], 10, 64)
		sku.Claimed, _ = strconv.ParseInt(p[2], 10, 64)
		sku.Pending, _ = strconv.ParseInt(p[3], 10, 64)
		out.SKUs = append(out.SKUs, sku)
	}
	out.SKUsAvailable = skuList(str(8))
	return out, nil
}

// Present records that the waiting shoppers seqs of q are there at now
// (the notifier holds their streams): one command for all of them.
func (l *Line) Present(ctx context.Context, q string, seqs []uint64, now time.Time) error {
	if len(seqs) == 0 {
		return nil
	}
	z := make([]redis.Z, len(seqs))
	for i, sq := range seqs {
		z[i] = redis.Z{Score: float64(now.UnixMilli()), Member: sq}
	}
	if err := l.rdb.ZAddArgs(ctx, keyspace.Of(q).Seen(), redis.ZAddArgs{XX: true, GT: true, Members: z}).Err(); err != nil {
		return fmt.Errorf("present %s: %w", q, err)
	}
	return nil
}

// Ranks reads the line's length, its admission count and rate, and the rank
// of each of seqs in one atomic round trip (ranks.lua: every key shares
// the queue's hash tag). Because the count and the ranks are read at the
// same instant, a caller can derive later positions from the count alone:
// in a FIFO line every admission since happened ahead of every waiting
// entry. Before a scheduled drop's draw its pre-queue counts in the line,
// ahead of every join since the opening, by the rule a poll counts it with
// (see undrawn.lib.lua): the notifier's streams and the gateway's polls tell the
// same place of the same line.
func (l *Line) Ranks(ctx context.Context, q string, seqs []uint64) (waitqueue.Ranks, error) {
	k := keyspace.Of(q)
	args := ranksArgs{Seqs: seqs}
	r, err := decodeRanks(ranksScript.Run(ctx, l.rdb, args.keys(k), args.argv(k)...), args)
	if err != nil {
		return waitqueue.Ranks{}, fmt.Errorf("ranks %s: %w", q, err)
	}
	return r, nil
}
