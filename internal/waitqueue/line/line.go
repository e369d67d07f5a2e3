// Package line is the line as a shopper's requests see and change it:
// a join put in line at once (Ingest), a user's lookup (with the join's
// rate limits in the same step), a poll, a leave, and the ranks and
// presence the notifier reads. The gateway's line API and the notifier
// take it.
package line

import (
	"context"
	"errors"
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

// IngestAs is Ingest of a join of the given kind.
func (l *Line) IngestAs(ctx context.Context, q, epoch string, seq uint64, user string, prev uint64, kind waitqueue.JoinKind) (waitqueue.Entry, error) {
	k := keyspace.Of(q)
	return ingested(l.client.RunScript(ctx, ingestScript, linescript.Keys(k), linescript.Args(k, l.client.TombstoneTTL(), epoch, seq, user, prev, string(kind))...), q, seq, user)
}

// ingested reads the reply of an ingest of seq by user into q.
func ingested(cmd *redis.Cmd, q string, seq uint64, user string) (waitqueue.Entry, error) {
	res, err := cmd.Slice()
	if err != nil {
		return waitqueue.Entry{}, fmt.Errorf("ingest %s/%d: %w", q, seq, err)
	}
	if len(res) == 1 {
		if res[0] == "stale" {
			return waitqueue.Entry{}, fmt.Errorf("ingest %s/%d: %w", q, seq, waitqueue.ErrStale)
		}
		return waitqueue.Entry{}, fmt.Errorf("ingest %s/%d for %s: %w", q, seq, user, waitqueue.ErrConflict)
	}
	if len(res) != 7 {
		return waitqueue.Entry{}, fmt.Errorf("ingest %s/%d: reply of %d fields", q, seq, len(res))
	}
	e, err := entryOf(res[:4])
	if err != nil {
		return waitqueue.Entry{}, err
	}
	figures(&e, res[4], res[5], res[6])
	return e, nil
}

// Lookup returns the user's current entry in q and what they bought there.
func (l *Line) Lookup(ctx context.Context, q, user string) (waitqueue.Current, error) {
	k := keyspace.Of(q)
	res, err := l.client.RunScript(ctx, lookupScript, []string{k.User(user), k.Bought(user)}, k.Prefix()).Slice()
	if err != nil {
		return waitqueue.Current{}, fmt.Errorf("lookup %s/%s: %w", q, user, err)
	}
	if len(res) != 3 {
		return waitqueue.Current{}, fmt.Errorf("lookup %s/%s: reply of %d fields", q, user, len(res))
	}
	return current(q, user, res)
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
	keys := append([]string{k.User(user), k.Bought(user)}, limits.Keys...)
	args := append([]any{k.Prefix()}, limits.Args...)
	res, err := l.client.RunScript(ctx, lookupLimitedScript, keys, args...).Slice()
	if err != nil {
		return waitqueue.Current{}, ratelimit.Decision{}, fmt.Errorf("lookup %s/%s: %w", q, user, err)
	}
	if len(res) < 3 {
		return waitqueue.Current{}, ratelimit.Decision{}, fmt.Errorf("lookup %s/%s: reply of %d fields", q, user, len(res))
	}
	ints := make([]int64, len(res)-3)
	for i, v := range res[3:] {
		n, ok := v.(int64)
		if !ok {
			return waitqueue.Current{}, ratelimit.Decision{}, fmt.Errorf("lookup %s/%s: rate limit field %d is %T", q, user, i, v)
		}
		ints[i] = n
	}
	d, err := limits.Decide(ints)
	if err != nil {
		return waitqueue.Current{}, ratelimit.Decision{}, fmt.Errorf("lookup %s/%s: %w", q, user, err)
	}
	c, err := current(q, user, res[:3])
	return c, d, err
}

// current reads lookup's reply.
func current(q, user string, res []any) (waitqueue.Current, error) {
	bought, _ := res[2].(int64)
	c := waitqueue.Current{Bought: int(bought)}
	if seq, _ := res[0].(string); seq != "" {
		n, err := strconv.ParseUint(seq, 10, 64)
		if err != nil {
			return waitqueue.Current{}, fmt.Errorf("lookup %s/%s: bad seq %q", q, user, seq)
		}
		st, _ := res[1].(string)
		c.Found, c.Seq, c.Status = true, n, waitqueue.Status(st)
	}
	return c, nil
}

// Poll returns the entry for seq with its position, in one round trip.
// A sequence Redis has not applied yet comes back as Unknown with the
// waiting count, so the caller can answer with an estimate.
func (l *Line) Poll(ctx context.Context, q string, seq uint64) (waitqueue.Entry, error) {
	return l.poll(ctx, q, seq, 0)
}

// PollPresent is the shopper's own poll: Poll, and a waiting shopper is
// recorded present (see admitScript: abandonment).
func (l *Line) PollPresent(ctx context.Context, q string, seq uint64) (waitqueue.Entry, error) {
	return l.poll(ctx, q, seq, 1)
}

func (l *Line) poll(ctx context.Context, q string, seq uint64, present int) (waitqueue.Entry, error) {
	k := keyspace.Of(q)
	res, err := l.client.RunScript(ctx, pollScript, linescript.Keys(k), k.Prefix(), seq, present).Slice()
	if err != nil {
		return waitqueue.Entry{}, fmt.Errorf("poll %s/%d: %w", q, seq, err)
	}
	if len(res) != 12 {
		return waitqueue.Entry{}, fmt.Errorf("poll %s/%d: reply of %d fields", q, seq, len(res))
	}
	e, err := entryOf(res[:4])
	if err != nil {
		return waitqueue.Entry{}, err
	}
	e.ReadyAt = linescript.MsTime(res[4])
	e.ExpiresAt = linescript.MsTime(res[5])
	e.TokenID, _ = res[6].(string)
	e.User, _ = res[7].(string)
	figures(&e, res[8], res[9], res[10])
	e.Reason, _ = res[11].(string)
	return e, nil
}

// figures sets the line's figures a script read from its stats: the
// admission rate, the stock state and the SKUs with units left.
func figures(e *waitqueue.Entry, rate, stock, skus any) {
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
func (l *Line) Leave(ctx context.Context, q string, seq uint64, user string) (waitqueue.Status, error) {
	k := keyspace.Of(q)
	st, err := leaveScript.Run(ctx, l.rdb, linescript.Keys(k), linescript.Args(k, l.client.TombstoneTTL(), seq, user)...).Text()
	if err != nil {
		return "", fmt.Errorf("leave %s/%d: %w", q, seq, err)
	}
	return waitqueue.Status(st), nil
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

func entryOf(res []any) (waitqueue.Entry, error) {
	if len(res) < 4 {
		return waitqueue.Entry{}, errors.New("waitqueue: short script reply")
	}
	st, _ := res[0].(string)
	seqStr, _ := res[1].(string)
	seq, _ := strconv.ParseUint(seqStr, 10, 64)
	rank, _ := res[2].(int64)
	waiting, _ := res[3].(int64)
	e := waitqueue.Entry{Seq: seq, Status: waitqueue.Status(st), Waiting: waiting}
	if e.Status == waitqueue.Waiting && rank >= 0 {
		e.Position = rank + 1
	}
	return e, nil
}

// Ranks reads the line's length, its admission count and rate, and the rank
// of each of seqs in one atomic round trip (ranksScript: every key shares
// the queue's hash tag). Because the count and the ranks are read at the
// same instant, a caller can derive later positions from the count alone:
// in a FIFO line every admission since happened ahead of every waiting
// entry. Before a scheduled drop's draw its pre-queue counts in the line,
// ahead of every join since the opening, by the rule a poll counts it with
// (see undrawnLua): the notifier's streams and the gateway's polls tell the
// same place of the same line.
func (l *Line) Ranks(ctx context.Context, q string, seqs []uint64) (waitqueue.Ranks, error) {
	k := keyspace.Of(q)
	args := make([]any, 1, len(seqs)+1)
	args[0] = k.Prefix()
	for _, seq := range seqs {
		args = append(args, strconv.FormatUint(seq, 10))
	}
	res, err := ranksScript.Run(ctx, l.rdb, []string{k.Waiting(), k.Stats()}, args...).Slice()
	if err != nil {
		return waitqueue.Ranks{}, fmt.Errorf("ranks %s: %w", q, err)
	}
	if len(res) != 5+len(seqs) {
		return waitqueue.Ranks{}, fmt.Errorf("ranks %s: reply of %d fields for %d sequences", q, len(res), len(seqs))
	}
	out := waitqueue.Ranks{Rank: make([]int64, len(seqs))}
	out.Waiting, _ = res[0].(int64)
	if v, ok := res[1].(string); ok {
		out.AdmittedTotal, _ = strconv.ParseInt(v, 10, 64)
	}
	if v, ok := res[2].(string); ok {
		out.Rate, _ = strconv.ParseFloat(v, 64)
	}
	out.Stock, _ = res[3].(string)
	v, _ := res[4].(string)
	out.SKUs = skuList(v)
	for i := range seqs {
		r, ok := res[5+i].(int64)
		if !ok {
			return waitqueue.Ranks{}, fmt.Errorf("ranks %s: rank %d is %T", q, i, res[5+i])
		}
		out.Rank[i] = r
	}
	return out, nil
}
