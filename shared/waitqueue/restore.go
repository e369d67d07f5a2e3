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
// Returns, for each group, 1 if it was created and 0 if it was kept. The
// line and the admitted set get one ZADD per call and the counters one
// HINCRBY, a record one HSET.
var restoreScript = redis.NewScript(`
local prefix, ttl = ARGV[1], tonumber(ARGV[2])
local out, line, held, heldIdx = {}, {}, {}, {}
local admitted, pre, drawn = 0, 0, nil
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
      if st == 'pre' then
        if drawn == nil then drawn = redis.call('HEXISTS', KEYS[4], 'drawn') == 1 end
        if drawn then st, score = 'waiting', '' end
      end
      local h = {'status', st, 'user', user}
      if tok ~= '' then
        h[5], h[6], h[7], h[8], h[9], h[10] = 'tokenId', tok, 'readyAt', ready, 'expiresAt', exp
        admitted = admitted + 1
      end
      if ord ~= '' then h[#h+1], h[#h+2] = 'orderId', ord end
      redis.call('HSET', e, unpack(h))
      local finished = false
      if st == 'waiting' then
        if score == '' then score = seq end
        line[#line+1], line[#line+2] = score, seq
      elseif st == 'pre' then
        redis.call('ZADD', prefix .. 'pre', 'NX', seq, seq)
        pre = pre + 1
      elseif st == 'admitted' then
        held[#held+1], held[#held+2] = exp, seq
        heldIdx[#heldIdx+1], heldIdx[#heldIdx+2] = seq, 'a'
      else
        redis.call('EXPIRE', e, ttl)
        finished = true
      end
      if user ~= '' then
        local uk = prefix .. 'u:' .. user
        local moved = redis.call('SET', uk, seq, 'NX')
        if not moved then
          local cur = redis.call('GET', uk)
          if tonumber(cur) < tonumber(seq) then moved = redis.call('SET', uk, seq) end
        end
        if moved and finished then redis.call('EXPIRE', uk, ttl) end
      end
    end
  end
end
if #line > 0 then redis.call('ZADD', KEYS[1], 'NX', unpack(line)) end
if #held > 0 then
  redis.call('ZADD', KEYS[2], 'NX', unpack(held))
  redis.call('HSET', prefix .. 'held', unpack(heldIdx)) -- what each holds, for the stock-aware tick (see syncHeld)
end
if admitted > 0 then redis.call('HINCRBY', KEYS[4], 'admittedTotal', admitted) end
if pre > 0 then redis.call('HINCRBY', KEYS[4], 'preVersion', pre) end
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
