package waitqueue

import (
	"context"
	"fmt"
	"strconv"
	"time"
	"usher/internal/keyspace"

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
// KEYS: stdKeys. ARGV: prefix, tombstoneTTL, unique ('1' when no user has
// two records in the call, as most calls of a rebuild), then a group per
// record: nine for any record — seq, status, user, alias, tokenId,
// readyAtMs, expiresAtMs, orderId, score (a waiting entry's score in line;
// empty: its sequence) — or three for an entry waiting in its FIFO place,
// most of a line: seq, 'w', user. No two records of a call have one seq.
// Invariants: a record that exists is never touched (the gateway and the
// admitter may be writing the same queue while a rebuild runs, and what they
// wrote is newer); sorted sets only grow with NX, so nobody moves; the user
// pointer only moves forward to a later sequence, as the ingest script moves
// it. Finished records are tombstones that expire like the live ones. A
// pre-queued entry goes into the pre-queue set (counting its version up, as
// the join script does), unless the queue was drawn meanwhile: then it
// queues FIFO, as the join script puts a pre-queue join after the draw.
// Returns, for each group, 1 if it was created and 0 if it was kept.
//
// A record costs one HSET (and an EXPIRE if finished); the rest is one
// command per call: the line, the pre-queue and the admitted set get one
// ZADD each, the counters one HINCRBY. Whether the records exist is one
// EXISTS of them all (a wiped queue holds none; only when it holds some is
// each asked on its own), and the users' pointers one MSETNX (none of them
// exists: each is set to the user's latest sequence of the call, with the
// tombstone TTL if that entry is finished, which is what setting them one
// by one in any order leaves; if any exists, they are set one by one).
// Lua tables keyed by strings are this script's dearest work (BENCHMARKS.md,
// "Why the defaults are what they are"): the caller's promises —
// distinct seqs, and whether a user repeats — spare it two of them.
var restoreScript = redis.NewScript(`
local prefix, ttl, unique = ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1'
local ekeys, at, ne = {}, {}, 0 -- each record's key, and where its group starts
local i = 4
while i <= #ARGV do
  ne = ne + 1
  ekeys[ne], at[ne] = prefix .. 'e:' .. ARGV[i], i
  if ARGV[i+1] == 'w' then i = i + 3 else i = i + 9 end
end
local fresh = ne == 0 or redis.call('EXISTS', unpack(ekeys)) == 0
local out, line, pre, held, heldIdx = {}, {}, {}, {}, {}
local nl = 0
-- User pointers to set, in record order: user, seq and finished (nil: not).
local pu, ps, pf, np = {}, {}, {}, 0
local admitted, drawn = 0, nil
for j = 1, ne do
  local i = at[j]
  local seq, st, user = ARGV[i], ARGV[i+1], ARGV[i+2]
  local alias, tok, ready, exp, ord, score = '', '', '', '', '', ''
  if st == 'w' then
    st = 'waiting'
  else
    alias, tok, ready, exp, ord, score = ARGV[i+3], ARGV[i+4], ARGV[i+5], ARGV[i+6], ARGV[i+7], ARGV[i+8]
  end
  local e = ekeys[j]
  if not fresh and redis.call('EXISTS', e) == 1 then
    out[j] = 0
  else
    out[j] = 1
    if alias ~= '' then
      redis.call('HSET', e, 'alias', alias, 'user', user)
    else
      if st == 'pre' then
        if drawn == nil then drawn = redis.call('HEXISTS', KEYS[4], 'drawn') == 1 end
        if drawn then st, score = 'waiting', '' end
      end
      if tok == '' and ord == '' then
        redis.call('HSET', e, 'status', st, 'user', user)
      else
        local h = {'status', st, 'user', user}
        if tok ~= '' then
          h[5], h[6], h[7], h[8], h[9], h[10] = 'tokenId', tok, 'readyAt', ready, 'expiresAt', exp
          admitted = admitted + 1
        end
        if ord ~= '' then h[#h+1], h[#h+2] = 'orderId', ord end
        redis.call('HSET', e, unpack(h))
      end
      local finished = false
      if st == 'waiting' then
        if score == '' then score = seq end
        line[nl+1], line[nl+2], nl = score, seq, nl + 2
      elseif st == 'pre' then
        pre[#pre+1], pre[#pre+2] = seq, seq
      elseif st == 'admitted' then
        held[#held+1], held[#held+2] = exp, seq
        heldIdx[#heldIdx+1], heldIdx[#heldIdx+2] = seq, 'a'
      else
        redis.call('EXPIRE', e, ttl)
        finished = true
      end
      if user ~= '' then
        np = np + 1
        pu[np], ps[np] = user, seq
        if finished then pf[np] = true end
      end
    end
  end
end
if np > 0 then
  -- Each user's latest entry of the call (its index), in the order first
  -- seen: every entry, when no user has two.
  local users = pu
  local latest = nil
  if not unique then
    latest, users = {}, {}
    for n = 1, np do
      local cur = latest[pu[n]]
      if cur == nil then
        users[#users+1] = pu[n]
        latest[pu[n]] = n
      elseif tonumber(ps[cur]) < tonumber(ps[n]) then
        latest[pu[n]] = n
      end
    end
  end
  local kv, nu = {}, #users
  for n = 1, nu do
    local u, m = users[n], n
    if latest then m = latest[u] end
    kv[2*n-1], kv[2*n] = prefix .. 'u:' .. u, ps[m]
  end
  if redis.call('MSETNX', unpack(kv)) == 1 then
    for n = 1, nu do
      local m = n
      if latest then m = latest[users[n]] end
      if pf[m] then redis.call('EXPIRE', kv[2*n-1], ttl) end
    end
  else
    for n = 1, np do
      local uk, seq = prefix .. 'u:' .. pu[n], ps[n]
      local moved = redis.call('SET', uk, seq, 'NX')
      if not moved then
        local cur = redis.call('GET', uk)
        if tonumber(cur) < tonumber(seq) then moved = redis.call('SET', uk, seq) end
      end
      if moved and pf[n] then redis.call('EXPIRE', uk, ttl) end
    end
  end
end
if nl > 0 then redis.call('ZADD', KEYS[1], 'NX', unpack(line)) end
if #pre > 0 then
  redis.call('ZADD', prefix .. 'pre', 'NX', unpack(pre))
  redis.call('HINCRBY', KEYS[4], 'preVersion', #pre / 2)
end
if #held > 0 then
  redis.call('ZADD', KEYS[2], 'NX', unpack(held))
  redis.call('HSET', prefix .. 'held', unpack(heldIdx)) -- what each holds, for the stock-aware tick (see syncHeld)
end
if admitted > 0 then redis.call('HINCRBY', KEYS[4], 'admittedTotal', admitted) end
return out
`)

// restoreBatch is how many records go into one script call: big enough to
// amortise the round trip, small enough not to block Redis for long (and
// below what Lua's unpack takes: the script unpacks two values a record).
const restoreBatch = 256

// Restore writes records that Redis lost, in the order given, creating each
// only if it is absent. It is idempotent and safe to run while the gateway
// and admitters work on the same queue: it never overwrites a record and
// never moves anyone in the line. Give admitted records first, so an
// admitter ticking meanwhile sees every held slot before it sees the line.
// A user's pointer is set for entries of their own (not aliases), to the
// latest sequence. An entry given twice is written as it was given first
// (the second finds it and counts as kept).
//
// The script calls go out in order, a round of them at a time on one
// connection, so Redis applies them in the order given; the next round's
// arguments are made while Redis runs the one before.
func (s *Store) Restore(ctx context.Context, q string, recs []Record) (RestoreResult, error) {
	res := RestoreResult{Created: map[Status]int{}}
	recs, res.Kept = firstOfEach(recs)
	if err := restoreScript.Load(ctx, s.rdb).Err(); err != nil {
		return res, fmt.Errorf("load restore script: %w", err)
	}
	k := keyspace.Of(q)
	keys := stdKeys(k)
	rounds := make(chan restoreRound, 1)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() { // owned by this call: it ends when the records do or the call returns
		defer close(done)
		defer close(rounds)
		for len(recs) > 0 {
			var r restoreRound
			for len(r.calls) < restorePipelined && len(recs) > 0 {
				n := min(restoreBatch, len(recs))
				r.calls = append(r.calls, recs[:n])
				r.args = append(r.args, restoreArgs(k.Prefix(), s.ttl, recs[:n]))
				recs = recs[n:]
			}
			select {
			case rounds <- r:
			case <-stop:
				return
			}
		}
	}()
	defer func() { close(stop); <-done }()
	for r := range rounds {
		cmds := make([]*redis.Cmd, len(r.calls))
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, args := range r.args {
				cmds[i] = restoreScript.EvalSha(ctx, p, keys, args...)
			}
			return nil
		})
		if err != nil {
			return res, fmt.Errorf("restore %s: %w", q, err)
		}
		for i, batch := range r.calls {
			created, err := cmds[i].Int64Slice()
			if err != nil {
				return res, fmt.Errorf("restore %s: %w", q, err)
			}
			for j, rec := range batch {
				switch {
				case j >= len(created) || created[j] == 0:
					res.Kept++
				case rec.Alias != 0:
					res.Created[Alias]++
				default:
					res.Created[rec.Status]++
				}
			}
		}
	}
	return res, nil
}

// firstOfEach is recs without the records of an entry given before, and
// how many it left out: the script trusts each call's seqs to be distinct.
// recs itself when they are, as a rebuild's are.
func firstOfEach(recs []Record) ([]Record, int) {
	seen := make(map[uint64]struct{}, len(recs))
	var out []Record // nil until the first repeat
	for i, r := range recs {
		if _, dup := seen[r.Seq]; dup {
			if out == nil {
				out = append(make([]Record, 0, len(recs)), recs[:i]...)
			}
			continue
		}
		seen[r.Seq] = struct{}{}
		if out != nil {
			out = append(out, r)
		}
	}
	if out == nil {
		return recs, 0
	}
	return out, len(recs) - len(out)
}

// restorePipelined is how many script calls go in one round trip.
const restorePipelined = 16

// restoreRound is one round trip of script calls: their records and
// arguments.
type restoreRound struct {
	calls [][]Record
	args  [][]any
}

func restoreArgs(prefix string, ttl int, batch []Record) []any {
	args := make([]any, 0, 3+9*len(batch))
	users := make(map[string]struct{}, len(batch))
	for _, r := range batch {
		users[r.User] = struct{}{}
	}
	unique := "0"
	if len(users) == len(batch) {
		unique = "1"
	}
	args = append(args, prefix, ttl, unique)
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
		if r.Status == Waiting && alias == "" && r.TokenID == "" && r.OrderID == "" && score == "" {
			args = append(args, strconv.FormatUint(r.Seq, 10), "w", r.User)
			continue
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
