package line

import (
	"context"
	_ "embed" // the scripts' Lua
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"usher/internal/keyspace"
	"usher/internal/ratelimit"
	"usher/internal/script"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/internal/linescript"
)

// The Line's scripts: each a .lua file beside this one that opens with
// the invariant it keeps, put behind the helpers it uses (*.lib.lua, and
// linescript's library for the ones that change the line). The
// per-request ones are script.Scripts: the batcher sends a batch's calls
// of one as one command.
var (
	ingestScript        = script.New(linescript.Changing(undrawnLua, ingestLua))
	ingestGroupScript   = script.New(linescript.Changing(undrawnLua, ingestGroupLua))
	lookupScript        = script.New(lookupLua + lookupOnlyLua)
	lookupLimitedScript = script.New(ratelimit.Lua() + lookupLua + lookupLimitedLua)
	pollScript          = script.New(undrawnLua + pollLua)
	leaveScript         = script.New(linescript.Changing(leaveLua))
	leaveRecordedScript = script.New(linescript.Changing(leaveRecordedLua))
	ranksScript         = script.New(undrawnLua + ranksLua)
)

var (
	//go:embed undrawn.lib.lua
	undrawnLua string
	//go:embed lookup.lib.lua
	lookupLua string
	//go:embed ingest.lua
	ingestLua string
	//go:embed ingest_group.lua
	ingestGroupLua string
	//go:embed lookup.lua
	lookupOnlyLua string
	//go:embed lookup_limited.lua
	lookupLimitedLua string
	//go:embed poll.lua
	pollLua string
	//go:embed leave.lua
	leaveLua string
	//go:embed leave_recorded.lua
	leaveRecordedLua string
	//go:embed ranks.lua
	ranksLua string
)

// ingestArgs are ingest.lua's arguments (after lib.lua's two).
type ingestArgs struct {
	Epoch string // the entries stream's identity the sequence counts in
	Seq   uint64
	User  string
	Prev  uint64 // the entry the gateway saw finished when it published the join (0: none)
	Kind  waitqueue.JoinKind
	// Form says what Seq is: the join's place (placeSeq) or a
	// usher.joined.v1 message's stream sequence (placeJoined), which the
	// script puts at its place (event.Place). A usher.joins.v2 message's
	// joins go in together (ingest_group.lua).
	Form ingestForm
}

// ingestForm is what an ingest's Seq is (ingestArgs.Form).
type ingestForm int

const (
	placeSeq    ingestForm = iota // the join's place itself
	placeJoined                   // a usher.joined.v1 message's stream sequence
)

// argv is ingest.lua's ARGV, in the order it reads them. Every form has
// as many arguments, so the calls of one batch go as one command.
func (a ingestArgs) argv(k keyspace.Queue, ttl time.Duration) []any {
	return linescript.Args(k, ttl, a.Epoch, a.Seq, a.User, a.Prev, string(a.Kind), int(a.Form))
}

// decodeIngest reads ingest.lua's reply to a's join into q: {status, seq
// of the live entry, rank or -1, waiting, rate, stock state, SKUs with
// units left, the join's place} — a poll's view of the entry — or
// {'stale'} (ErrStale) or {'conflict'} (ErrConflict).
func decodeIngest(cmd *redis.Cmd, q string, a ingestArgs) (waitqueue.Entry, uint64, error) {
	res, err := cmd.Slice()
	if err != nil {
		return waitqueue.Entry{}, 0, fmt.Errorf("ingest %s/%d: %w", q, a.Seq, err)
	}
	if len(res) == 1 {
		if res[0] == "stale" {
			return waitqueue.Entry{}, 0, fmt.Errorf("ingest %s/%d: %w", q, a.Seq, waitqueue.ErrStale)
		}
		return waitqueue.Entry{}, 0, fmt.Errorf("ingest %s/%d for %s: %w", q, a.Seq, a.User, waitqueue.ErrConflict)
	}
	if len(res) != 8 {
		return waitqueue.Entry{}, 0, fmt.Errorf("ingest %s/%d: reply of %d fields", q, a.Seq, len(res))
	}
	e := placed(res[0], res[1], res[2], res[3])
	figures(&e, res[4], res[5], res[6])
	place, err := strconv.ParseUint(linescript.Str(res[7]), 10, 64)
	if err != nil {
		return waitqueue.Entry{}, 0, fmt.Errorf("ingest %s/%d: place %v", q, a.Seq, res[7])
	}
	return e, place, nil
}

// ingestGroupArgv is ingest_group.lua's ARGV: the message's joins, in
// their order, stored at stream sequence seq of the stream epoch names.
func ingestGroupArgv(k keyspace.Queue, ttl time.Duration, epoch string, seq uint64, joins []waitqueue.ListedJoin) []any {
	own := make([]any, 0, 2+3*len(joins))
	own = append(own, epoch, seq)
	for _, j := range joins {
		own = append(own, j.User, j.Prev, string(j.Kind))
	}
	return linescript.Args(k, ttl, own...)
}

// decodeIngestGroup reads ingest_group.lua's reply for n joins: one
// ingest.lua reply each, or {'stale'} for all of them.
func decodeIngestGroup(ctx context.Context, cmd *redis.Cmd, n int) ([]*redis.Cmd, error) {
	res, err := cmd.Slice()
	if err != nil {
		return nil, err
	}
	if len(res) == 1 && res[0] == "stale" {
		res = slices.Repeat([]any{[]any{"stale"}}, n)
	}
	if len(res) != n {
		return nil, fmt.Errorf("a reply of %d joins for %d", len(res), n)
	}
	out := make([]*redis.Cmd, n)
	for i, r := range res {
		out[i] = redis.NewCmd(ctx)
		out[i].SetVal(r)
	}
	return out, nil
}

// lookupArgs are lookup.lua's keys and arguments: whom to look up.
type lookupArgs struct{ User string }

// keys are lookup.lua's KEYS: the user's pointer and bought count.
func (a lookupArgs) keys(k keyspace.Queue) []string {
	return []string{k.User(a.User), k.Bought(a.User)}
}

// argv is lookup.lua's ARGV: the queue's prefix.
func (a lookupArgs) argv(k keyspace.Queue) []any { return []any{k.Prefix()} }

// decodeLookup reads lookup's three fields (lookup.lib.lua): {seq or ”,
// status or ”, bought}.
func decodeLookup(res []any) (waitqueue.Current, error) {
	if len(res) < 3 {
		return waitqueue.Current{}, fmt.Errorf("reply of %d fields", len(res))
	}
	c := waitqueue.Current{Bought: int(linescript.Int(res[2]))}
	if seq := linescript.Str(res[0]); seq != "" {
		n, err := strconv.ParseUint(seq, 10, 64)
		if err != nil {
			return waitqueue.Current{}, fmt.Errorf("bad seq %q", seq)
		}
		c.Found, c.Seq, c.Status = true, n, waitqueue.Status(linescript.Str(res[1]))
	}
	return c, nil
}

// lookupLimitedArgs are lookup_limited.lua's keys and arguments: whom to
// look up and the rate limits to decide.
type lookupLimitedArgs struct {
	User   string
	Limits ratelimit.Plan
}

// keys are lookup_limited.lua's KEYS: lookup's, then the limits'.
func (a lookupLimitedArgs) keys(k keyspace.Queue) []string {
	return append(lookupArgs{a.User}.keys(k), a.Limits.Keys...)
}

// argv is lookup_limited.lua's ARGV: the queue's prefix, then the limits'.
func (a lookupLimitedArgs) argv(k keyspace.Queue) []any {
	return append([]any{k.Prefix()}, a.Limits.Args...)
}

// decodeLookupLimited reads lookup_limited.lua's reply: lookup's three
// fields, then gcra's, which a's limits decide.
func decodeLookupLimited(cmd *redis.Cmd, a lookupLimitedArgs) (waitqueue.Current, ratelimit.Decision, error) {
	res, err := cmd.Slice()
	if err != nil {
		return waitqueue.Current{}, ratelimit.Decision{}, err
	}
	c, err := decodeLookup(res)
	if err != nil {
		return waitqueue.Current{}, ratelimit.Decision{}, err
	}
	ints := make([]int64, len(res)-3)
	for i, v := range res[3:] {
		n, ok := v.(int64)
		if !ok {
			return waitqueue.Current{}, ratelimit.Decision{}, fmt.Errorf("rate limit field %d is %T", i, v)
		}
		ints[i] = n
	}
	d, err := a.Limits.Decide(ints)
	return c, d, err
}

// pollArgs are poll.lua's arguments (a poll changes nothing but presence:
// it takes no tombstone TTL).
type pollArgs struct {
	Seq uint64
	// PresentEvery is the shopper's own poll's presence granularity:
	// recorded present unless they were less than this long ago (0: not
	// their own poll, record nothing).
	PresentEvery time.Duration
}

// argv is poll.lua's ARGV, in the order it reads them.
func (a pollArgs) argv(k keyspace.Queue) []any {
	return []any{k.Prefix(), a.Seq, a.PresentEvery.Milliseconds()}
}

// decodePoll reads poll.lua's reply: {status, seq, rank, waiting, readyAt,
// expiresAt, tokenId, user, rate, stock state, SKUs with units left,
// reason}.
func decodePoll(cmd *redis.Cmd) (waitqueue.Entry, error) {
	res, err := cmd.Slice()
	if err != nil {
		return waitqueue.Entry{}, err
	}
	if len(res) != 12 {
		return waitqueue.Entry{}, fmt.Errorf("reply of %d fields", len(res))
	}
	e := placed(res[0], res[1], res[2], res[3])
	e.ReadyAt = linescript.MsTime(res[4])
	e.ExpiresAt = linescript.MsTime(res[5])
	e.TokenID = linescript.Str(res[6])
	e.User = linescript.Str(res[7])
	figures(&e, res[8], res[9], res[10])
	e.Reason = linescript.Str(res[11])
	return e, nil
}

// placed is an entry as a script's reply places it: its status, the live
// entry's sequence, its rank in line (-1: none) and the line's length.
func placed(status, seq, rank, waiting any) waitqueue.Entry {
	n, _ := strconv.ParseUint(linescript.Str(seq), 10, 64)
	e := waitqueue.Entry{Seq: n, Status: waitqueue.Status(linescript.Str(status)), Waiting: linescript.Int(waiting)}
	if r := linescript.Int(rank); e.Status == waitqueue.Waiting && r >= 0 {
		e.Position = r + 1
	}
	return e
}

// figures sets the line's figures a script read from its stats: the
// admission rate, the stock state and the SKUs with units left.
func figures(e *waitqueue.Entry, rate, stock, skus any) {
	e.Rate, _ = strconv.ParseFloat(linescript.Str(rate), 64)
	e.Stock = linescript.Str(stock)
	e.SKUs = skuList(linescript.Str(skus))
}

// leaveArgs are leave.lua's arguments (after lib.lua's two).
type leaveArgs struct {
	Seq  uint64
	User string
}

// argv is leave.lua's ARGV, in the order it reads them.
func (a leaveArgs) argv(k keyspace.Queue, ttl time.Duration) []any {
	return linescript.Args(k, ttl, a.Seq, a.User)
}

// recordedArgs are leave_recorded.lua's arguments (after lib.lua's two):
// the leaves, each its seq and user.
type recordedArgs []waitqueue.UnrecordedLeave

// argv is leave_recorded.lua's ARGV, in the order it reads them.
func (a recordedArgs) argv(k keyspace.Queue, ttl time.Duration) []any {
	own := make([]any, 0, 2*len(a))
	for _, l := range a {
		own = append(own, strconv.FormatUint(l.Seq, 10), l.User)
	}
	return linescript.Args(k, ttl, own...)
}

// ranksArgs are ranks.lua's arguments: the sequences whose ranks to read.
type ranksArgs struct{ Seqs []uint64 }

// keys are ranks.lua's KEYS: the waiting line and the stats.
func (a ranksArgs) keys(k keyspace.Queue) []string { return []string{k.Waiting(), k.Stats()} }

// argv is ranks.lua's ARGV: the queue's prefix, then the sequences.
func (a ranksArgs) argv(k keyspace.Queue) []any {
	args := make([]any, 1, len(a.Seqs)+1)
	args[0] = k.Prefix()
	for _, seq := range a.Seqs {
		args = append(args, strconv.FormatUint(seq, 10))
	}
	return args
}

// decodeRanks reads ranks.lua's reply to a: {waiting, admittedTotal, rate,
// stock state, SKUs with units left, then each sequence's rank or -1}.
func decodeRanks(cmd *redis.Cmd, a ranksArgs) (waitqueue.Ranks, error) {
	res, err := cmd.Slice()
	if err != nil {
		return waitqueue.Ranks{}, err
	}
	if len(res) != 5+len(a.Seqs) {
		return waitqueue.Ranks{}, fmt.Errorf("reply of %d fields for %d sequences", len(res), len(a.Seqs))
	}
	out := waitqueue.Ranks{Rank: make([]int64, len(a.Seqs)), Waiting: linescript.Int(res[0]),
		Stock: linescript.Str(res[3]), SKUs: skuList(linescript.Str(res[4]))}
	out.AdmittedTotal, _ = strconv.ParseInt(linescript.Str(res[1]), 10, 64)
	out.Rate, _ = strconv.ParseFloat(linescript.Str(res[2]), 64)
	for i := range a.Seqs {
		r, ok := res[5+i].(int64)
		if !ok {
			return waitqueue.Ranks{}, fmt.Errorf("rank %d is %T", i, res[5+i])
		}
		out.Rank[i] = r
	}
	return out, nil
}
