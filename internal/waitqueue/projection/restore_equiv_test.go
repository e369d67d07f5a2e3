package projection_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"usher/internal/keyspace"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/roles"
)

// restoreReference is the restore script written the plain way, one
// record at a time: one EXISTS, HSET and SET NX per record, where Restore
// asks once per call whether records and pointers exist. Restore must
// leave Redis exactly as it would.
var restoreReference = redis.NewScript(`
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

// TestRestoreLeavesWhatTheOneByOneScriptLeft restores random records into
// random leftovers of a queue (records and pointers that exist, a draw
// recorded or not) twice — with Restore and with the one-by-one reference
// script — and compares every key, value and whether it expires, and what
// each says it created.
func TestRestoreLeavesWhatTheOneByOneScriptLeft(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	s := roles.New(rdb)
	const ttl = 3600
	for round := range 40 {
		rng := rand.New(rand.NewPCG(uint64(round), 7))
		got, want := testenv.Name(t), testenv.Name(t)
		maxSeq := 20 + rng.IntN(500)
		users := 1 + rng.IntN(maxSeq)
		user := func() string { return "u" + strconv.Itoa(rng.IntN(users)) }
		// Leftovers, the same in both queues.
		for _, q := range []string{got, want} {
			r := rand.New(rand.NewPCG(uint64(round), 11))
			k := keyspace.Of(q)
			for seq := 1; seq <= maxSeq; seq++ {
				if r.IntN(4) == 0 {
					rdb.HSet(ctx, k.Entry(uint64(seq)), "status", "waiting", "user", "left"+strconv.Itoa(seq))
				}
			}
			for u := range users {
				switch r.IntN(6) {
				case 0:
					rdb.Set(ctx, k.User("u"+strconv.Itoa(u)), r.IntN(maxSeq)+1, 0)
				case 1:
					rdb.Set(ctx, k.User("u"+strconv.Itoa(u)), r.IntN(maxSeq)+1, time.Hour)
				}
			}
			if round%3 == 0 {
				rdb.HSet(ctx, k.Stats(), "drawn", 5)
			}
		}
		if round%2 == 1 { // a queue that lost everything: the common case
			for _, q := range []string{got, want} {
				unlinkAll(t, rdb, q)
			}
		}
		var recs []waitqueue.Record
		now := time.UnixMilli(1_800_000_000_000)
		for range 1 + rng.IntN(2*maxSeq) {
			r := waitqueue.Record{Seq: uint64(1 + rng.IntN(maxSeq)), User: user()}
			switch rng.IntN(9) {
			case 0, 1, 2:
				r.Status = waitqueue.Waiting
			case 3:
				r.Status, r.Score = waitqueue.Waiting, float64(r.Seq)-(1<<52)
			case 4:
				r.Status = waitqueue.PreQueued
			case 5:
				r.Status = waitqueue.Admitted
			case 6:
				r.Status = []waitqueue.Status{waitqueue.Expired, waitqueue.Used, waitqueue.Left}[rng.IntN(3)]
			case 7:
				r.Alias = uint64(1 + rng.IntN(maxSeq))
			case 8:
				r.Status, r.User = waitqueue.Left, "" // a leave of an entry the streams no longer hold
			}
			if round%4 == 2 { // a user per entry: the calls Restore marks as having no user twice
				r.User = "u" + strconv.Itoa(int(r.Seq)-1)
			}
			if r.Status == waitqueue.Admitted || r.Status == waitqueue.Expired || r.Status == waitqueue.Used {
				r.TokenID = waitqueue.TokenID("q", epoch, r.Seq)
				r.ReadyAt, r.ExpiresAt = now.Add(time.Duration(rng.IntN(1000))*time.Millisecond), now.Add(time.Hour)
			}
			if r.Status == waitqueue.Used {
				r.OrderID = "o" + strconv.Itoa(rng.IntN(100))
			}
			recs = append(recs, r)
		}
		s.SetTombstoneTTL(ttl * time.Second)
		res, err := s.Restore(ctx, got, recs)
		if err != nil {
			t.Fatal(err)
		}
		wantRes := restoreOneByOne(t, rdb, want, ttl, recs)
		if fmt.Sprint(res) != fmt.Sprint(wantRes) {
			t.Errorf("round %d: Restore = %v, want %v", round, res, wantRes)
		}
		if g, w := dump(t, rdb, got), dump(t, rdb, want); !reflect.DeepEqual(g, w) {
			for key := range w {
				if !reflect.DeepEqual(g[key], w[key]) {
					t.Errorf("round %d: %s = %v, want %v", round, key, g[key], w[key])
				}
			}
			for key := range g {
				if _, ok := w[key]; !ok {
					t.Errorf("round %d: %s = %v, want none", round, key, g[key])
				}
			}
			t.FailNow()
		}
	}
}

// restoreOneByOne runs the reference script, 256 records a call, and
// counts what it created as Restore does.
func restoreOneByOne(t *testing.T, rdb redis.UniversalClient, q string, ttl int, recs []waitqueue.Record) waitqueue.RestoreResult {
	t.Helper()
	k := keyspace.Of(q)
	keys := []string{k.Waiting(), k.Active(), k.Outbox(), k.Stats(), k.Admits(), k.Cursor()}
	res := waitqueue.RestoreResult{Created: map[waitqueue.Status]int{}}
	for len(recs) > 0 {
		batch := recs[:min(256, len(recs))]
		recs = recs[len(batch):]
		args := []any{k.Prefix(), ttl}
		for _, r := range batch {
			alias, ready, exp, score := "", "", "", ""
			if r.Alias != 0 {
				alias = strconv.FormatUint(r.Alias, 10)
			}
			if r.TokenID != "" {
				ready, exp = strconv.FormatInt(r.ReadyAt.UnixMilli(), 10), strconv.FormatInt(r.ExpiresAt.UnixMilli(), 10)
			}
			if r.Score != 0 {
				score = strconv.FormatFloat(r.Score, 'g', -1, 64)
			}
			args = append(args, strconv.FormatUint(r.Seq, 10), string(r.Status), r.User, alias, r.TokenID, ready, exp, r.OrderID, score)
		}
		created, err := restoreReference.Run(context.Background(), rdb, keys, args...).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		for j, r := range batch {
			switch {
			case created[j] == 0:
				res.Kept++
			case r.Alias != 0:
				res.Created[waitqueue.Alias]++
			default:
				res.Created[r.Status]++
			}
		}
	}
	return res
}

// dump is every key of queue q (without its prefix): its value, and
// whether it expires.
func dump(t *testing.T, rdb redis.UniversalClient, q string) map[string]string {
	t.Helper()
	ctx := context.Background()
	k := keyspace.Of(q)
	keys, err := rdb.Keys(ctx, k.Pattern()).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, key := range keys {
		var v any
		switch typ := rdb.Type(ctx, key).Val(); typ {
		case "hash":
			v = rdb.HGetAll(ctx, key).Val()
		case "zset":
			v = rdb.ZRangeWithScores(ctx, key, 0, -1).Val()
		case "string":
			v = rdb.Get(ctx, key).Val()
		default:
			t.Fatalf("%s is a %s", key, typ)
		}
		out[strings.TrimPrefix(key, k.Prefix())] = fmt.Sprintf("%v expires=%v", v, rdb.TTL(ctx, key).Val() > 0)
	}
	return out
}

func unlinkAll(t *testing.T, rdb redis.UniversalClient, q string) {
	t.Helper()
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, keyspace.Of(q).Pattern()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) > 0 {
		if err := rdb.Unlink(ctx, keys...).Err(); err != nil {
			t.Fatal(err)
		}
	}
}
