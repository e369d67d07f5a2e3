package waitqueue

import (
	"context"
	"fmt"
	"strconv"
	"time"
	"usher/shared/keyspace"

	"github.com/redis/go-redis/v9"
)

// Record is one entry as a rebuild recreates it from the event streams: the
// same fields the live scripts would have written for it.
type Record struct {
	Seq    uint64
	Status Status // Waiting, PreQueued, Admitted, Expired, Used or Left; ignored for an alias
	User   string
	// Alias is the earlier entry this join duplicates (a second join of a
	// user already in line); 0 for an entry of its own.
	Alias     uint64
	TokenID   string // set for every entry that was admitted
	OrderID   string // the order that redeemed the token (status Used)
	ReadyAt   time.Time
	ExpiresAt time.Time
	// Score is a waiting entry's score in line when it is not its
	// sequence: a drawn place (place / (n + 1)) or a join allowed past the
	// line (seq - 2^52). 0: its sequence (FIFO).
	Score float64
}

// RestoreResult says what Restore wrote.
type RestoreResult struct {
	Created map[Status]int // new records by status; aliases count under "alias"
	Kept    int            // records that existed already and were left alone
}

// Alias is the key under which RestoreResult counts aliases: a record that
// names another entry rather than having a status of its own.
const Alias Status = "alias"

// restoreScript recreates entry records that Redis lost.
//
// KEYS: stdKeys. ARGV: prefix, tombstoneTTL, then groups
// of nine: seq, status, user, alias, tokenId, readyAtMs, expiresAtMs,
// orderId, score (a waiting entry's score in line; empty: its sequence).
// Invariants: a record that exists is never touched (the gateway and the
// admitter may be writing the same queue while a rebuild runs, and what they
// wrote is newer); sorted sets only grow with NX, so nobody moves; the user
// pointer only moves forward to a later sequence, as the ingest script moves
// it. Finished records are tombstones that expire like the live ones. A
// pre-queued entry goes into the pre-queue set (counting its version up, as
// the join script does), unless the queue was drawn meanwhile: then it
// queues FIFO, as the join script puts a pre-queue join after the draw.
// Returns, for each group, 1 if it was created and 0 if it was kept.
var restoreScript = redis.NewScript(`
local prefix, ttl = ARGV[1], tonumber(ARGV[2])
local out = {}
for i = 3, #ARGV, 9 do
  local seq, st, user, alias = ARGV[i], ARGV[i+1], ARGV[i+2], ARGV[i+3]
  local tok, ready, exp, ord, score = ARGV[i+4], ARGV[i+5], ARGV[i+6], ARGV[i+7], ARGV[i+8]
  local e = prefix .. 'e:' .. seq
  if redis.call('EXISTS', e) == 1 then
    out[#out+1] = 0
  else
    out[#out+1] = 1
    if alias ~= '' then
      redis.call('HSET', e, 'alias', alias, 'user', user)
    else
      if st == 'pre' and redis.call('HGET', KEYS[4], 'drawn') then st, score = 'waiting', '' end
      redis.call('HSET', e, 'status', st, 'user', user)
      if tok ~= '' then
        redis.call('HSET', e, 'tokenId', tok, 'readyAt', ready, 'expiresAt', exp)
        redis.call('HINCRBY', KEYS[4], 'admittedTotal', 1)
      end
      if ord ~= '' then redis.call('HSET', e, 'orderId', ord) end
      if st == 'waiting' then
        if score == '' then score = seq end
        redis.call('ZADD', KEYS[1], 'NX', score, seq)
      elseif st == 'pre' then
        redis.call('ZADD', prefix .. 'pre', 'NX', seq, seq)
        redis.call('HINCRBY', KEYS[4], 'preVersion', 1)
      elseif st == 'admitted' then
        redis.call('ZADD', KEYS[2], 'NX', exp, seq)
      else
        redis.call('EXPIRE', e, ttl)
      end
      if user ~= '' then
        local uk = prefix .. 'u:' .. user
        local cur = redis.call('GET', uk)
        if not cur or tonumber(cur) < tonumber(seq) then
          redis.call('SET', uk, seq)
          if st ~= 'waiting' and st ~= 'admitted' and st ~= 'pre' then redis.call('EXPIRE', uk, ttl) end
        end
      end
    end
  end
end
return out
`)

// restoreBatch is how many records go into one script call: big enough to
// amortise the round trip, small enough not to block Redis for long.
const restoreBatch = 256

// Restore writes records that Redis lost, in the order given, creating each
// only if it is absent. It is idempotent and safe to run while the gateway
// and admitters work on the same queue: it never overwrites a record and
// never moves anyone in the line. Give admitted records first, so an
// admitter ticking meanwhile sees every held slot before it sees the line.
// A user's pointer is set for entries of their own (not aliases), to the
// latest sequence.
func (s *Store) Restore(ctx context.Context, q string, recs []Record) (RestoreResult, error) {
	res := RestoreResult{Created: map[Status]int{}}
	if err := restoreScript.Load(ctx, s.rdb).Err(); err != nil {
		return res, fmt.Errorf("load restore script: %w", err)
	}
	k := keyspace.Of(q)
	keys := stdKeys(k)
	const pipelined = 16 // script calls per round trip
	for len(recs) > 0 {
		var calls [][]Record
		for len(calls) < pipelined && len(recs) > 0 {
			n := min(restoreBatch, len(recs))
			calls = append(calls, recs[:n])
			recs = recs[n:]
		}
		cmds := make([]*redis.Cmd, len(calls))
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, batch := range calls {
				cmds[i] = restoreScript.EvalSha(ctx, p, keys, restoreArgs(k.Prefix(), s.ttl, batch)...)
			}
			return nil
		})
		if err != nil {
			return res, fmt.Errorf("restore %s: %w", q, err)
		}
		for i, batch := range calls {
			created, err := cmds[i].Int64Slice()
			if err != nil {
				return res, fmt.Errorf("restore %s: %w", q, err)
			}
			for j, r := range batch {
				switch {
				case j >= len(created) || created[j] == 0:
					res.Kept++
				case r.Alias != 0:
					res.Created[Alias]++
				default:
					res.Created[r.Status]++
				}
			}
		}
	}
	return res, nil
}

func restoreArgs(prefix string, ttl int, batch []Record) []any {
	args := make([]any, 0, 2+9*len(batch))
	args = append(args, prefix, ttl)
	for _, r := range batch {
		alias, ready, exp, score := "", "", "", ""
		if r.Alias != 0 {
			alias = strconv.FormatUint(r.Alias, 10)
		}
		if r.TokenID != "" {
			ready = strconv.FormatInt(r.ReadyAt.UnixMilli(), 10)
			exp = strconv.FormatInt(r.ExpiresAt.UnixMilli(), 10)
		}
		if r.Score != 0 {
			score = strconv.FormatFloat(r.Score, 'g', -1, 64) // exactly the double the live scripts wrote
		}
		args = append(args, strconv.FormatUint(r.Seq, 10), string(r.Status), r.User, alias, r.TokenID, ready, exp, r.OrderID, score)
	}
	return args
}

// restoreDrawScript records a draw that Redis lost, as drawScript did:
// the stats hash's drawn, drawCursor and drawDigest, unless a draw is
// recorded already (then nothing changes).
// KEYS: the stats hash. ARGV: n, cursor, digest. Returns 1 if written.
var restoreDrawScript = redis.NewScript(`
if redis.call('HEXISTS', KEYS[1], 'drawn') == 1 then return 0 end
redis.call('HSET', KEYS[1], 'drawn', ARGV[1], 'drawCursor', ARGV[2], 'drawDigest', ARGV[3])
return 1
`)

// RestoreDraw records q's draw (from its usher.lottery.drawn.v1 event)
// unless Redis has one recorded, and says whether it did. A rebuild calls
// it before restoring the drawn, so that no admitter draws the pre-queue
// again meanwhile and a pre-queue join restored after it queues FIFO.
func (s *Store) RestoreDraw(ctx context.Context, q string, d Drawing) (bool, error) {
	n, err := restoreDrawScript.Run(ctx, s.rdb, []string{keyspace.Of(q).Stats()}, d.Entries, d.Cursor, d.Digest).Int()
	if err != nil {
		return false, fmt.Errorf("restore the draw of %s: %w", q, err)
	}
	return n == 1, nil
}

// Existing counts how many of the given entries Redis has a record of. A
// rebuild uses it to tell a queue that lost its state from an intact one.
func (s *Store) Existing(ctx context.Context, q string, seqs []uint64) (int, error) {
	if len(seqs) == 0 {
		return 0, nil
	}
	k := keyspace.Of(q)
	keys := make([]string, len(seqs))
	for i, sq := range seqs {
		keys[i] = k.Entry(sq)
	}
	// One EXISTS per key: a multi-key EXISTS would cross slots on a cluster
	// only if the hash tag were missing, but one per key keeps it obvious.
	cmds := make([]*redis.IntCmd, len(keys))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, key := range keys {
			cmds[i] = p.Exists(ctx, key)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("existing %s: %w", q, err)
	}
	n := 0
	for _, c := range cmds {
		n += int(c.Val())
	}
	return n, nil
}
