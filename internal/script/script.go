// Package script is a Lua script Redis can also run many times in one call.
//
// A busy gateway sends the same few scripts (a poll, a join's lookup and
// ingest, the rate limit) for hundreds of shoppers of one queue at once.
// Each EVALSHA costs Redis a command dispatch, a fresh Lua call with its
// KEYS and ARGV tables and a reply, and costs the client the encoding of
// the script's hash and every key: for a poll that is as much as the reads
// the script does. Many wraps a script's source in a function and calls it
// once per call of a batch, so n calls on one hash slot are one command.
//
// Each call still runs atomically and in order (the whole batch does, as
// one script); a call that raises an error answers that error and the next
// call runs, as it would have on its own. Keys must all hash to one slot,
// which the caller groups by (Tag).
package script

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Script is one Lua script and its many-call form.
type Script struct {
	one, many *redis.Script
}

// New returns the script of src. src is run as the body of a function
// whose KEYS and ARGV are the call's own, so it has no shebang line
// (flags such as no-writes apply to a whole script, not to one call).
//
// src may read a value with once(name, f): f's value, read once per
// command — once for a call on its own, once for all the calls of a batch
// (a poll's line length and figures, read for each of a batch's polls,
// cost Redis as much as the poll's own reads). Only for values that no
// call of the same script changes — or, when a call may change one,
// forget(name) after the change, so the next call reads it again: the
// batch's calls all run src.
//
// Every call also declares its slot's guard (see Guard), which src never
// sees: its KEYS are the call's own.
func New(src string) *Script {
	return &Script{one: redis.NewScript(oncePrologue + onePrologue + src), many: redis.NewScript(oncePrologue + manyPrologue + src + manyEpilogue)}
}

// Guard is the key every call declares last, beside its own keys: one in
// the slot of keys[0] that nothing ever writes, so that Redis refuses a
// script whole, before it runs, for as long as its slot is moving between
// two masters (a reshard): a multi-key command with a key missing gets
// TRYAGAIN from either of them. Without it a script runs while some of the
// keys it derives (an entry's, from the queue's prefix) have moved: on the
// old master Redis stops it at the first such key, after the writes before
// it; on the new one (asked there once its declared keys have moved) it
// reads a key still on the old one as missing and writes it anew. Either
// leaves a half-done step — a leave the line took but never recorded.
// Keys with a hash tag share its slot ("usher:{q}:moving"); a key without
// one is its own tag.
func Guard(key string) string {
	if _, end := tagSpan(key); end > 0 {
		return key[:end+1] + ":moving"
	}
	return "{" + key + "}:moving"
}

// guarded is keys with their guard (none for no keys: a script without
// keys names no slot).
func guarded(keys []string) []string {
	if len(keys) == 0 {
		return keys
	}
	return append(keys[:len(keys):len(keys)], Guard(keys[0]))
}

// Run runs the script once on keys, loading it when Redis does not have
// it (after a restart or a failover).
func (s *Script) Run(ctx context.Context, c redis.Scripter, keys []string, args ...any) *redis.Cmd {
	return s.one.Run(ctx, c, guarded(keys), args...)
}

// oncePrologue defines once (see New) for both forms.
const oncePrologue = `local onceRead = {}
local function once(name, f)
  local v = onceRead[name]
  if v == nil then v = f(); onceRead[name] = v end
  return v
end
local function forget(name) onceRead[name] = nil end
`

// onePrologue hides the guard from a call on its own.
const onePrologue = "local KEYS = {unpack(KEYS, 1, #KEYS - 1)}\n"

// The many-call form: ARGV[1] the number of calls, ARGV[2] the keys per
// call (0: every call gets all of KEYS, which they share), ARGV[3] the
// arguments per call, then each call's arguments in turn. A call that
// returns nothing answers false (a nil reply), so the reply has a place per
// call; one that raises an error answers it as an error reply.
const manyPrologue = "local function one(KEYS, ARGV)\n"

const manyEpilogue = `
end
local n, nk, na = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local shared = {unpack(KEYS, 1, #KEYS - 1)} -- without the guard, last
local out = {}
for i = 0, n - 1 do
  local k = shared
  if nk > 0 then
    k = {}
    for j = 1, nk do k[j] = KEYS[i * nk + j] end
  end
  local a = {}
  for j = 1, na do a[j] = ARGV[3 + i * na + j] end
  local ok, r = pcall(one, k, a)
  if not ok then
    if type(r) ~= 'table' or not r.err then r = redis.error_reply(tostring(r)) end
  elseif r == nil then
    r = false
  end
  out[i + 1] = r
end
return out
`

// Call is one call of a script: its keys and arguments.
type Call struct {
	Keys []string
	Args []any
}

// Tag is the hash tag of key (the part between the first '{' and the next
// '}', Redis Cluster's rule), or "" when it has none: calls whose keys share
// a non-empty tag can run as one.
func Tag(key string) string {
	if open, end := tagSpan(key); end > 0 {
		return key[open+1 : end]
	}
	return ""
}

// tagSpan is where key's hash tag lies: its '{' and its '}' (end 0: no
// tag).
func tagSpan(key string) (open, end int) {
	open = strings.IndexByte(key, '{')
	if open < 0 {
		return 0, 0
	}
	j := strings.IndexByte(key[open+1:], '}')
	if j <= 0 {
		return 0, 0
	}
	return open, open + 1 + j
}

// EvalSha queues on c one EVALSHA of the script on keys (see Run).
func (s *Script) EvalSha(ctx context.Context, c redis.Scripter, keys []string, args ...any) *redis.Cmd {
	return s.one.EvalSha(ctx, c, guarded(keys), args...)
}

// Eval sends the script's text on keys (see Run): after a pipelined
// EvalSha found Redis without the script.
func (s *Script) Eval(ctx context.Context, c redis.Scripter, keys []string, args ...any) *redis.Cmd {
	return s.one.Eval(ctx, c, guarded(keys), args...)
}

// EvalShaMany queues on c one EVALSHA that runs s once per call, in order.
// Every call must have as many keys and as many arguments as the first, and
// every key one slot. Split reads the reply.
func (s *Script) EvalShaMany(ctx context.Context, c redis.Scripter, calls []Call) *redis.Cmd {
	keys, args := manyArgs(calls)
	return s.many.EvalSha(ctx, c, keys, args...)
}

// RunMany is EvalShaMany sent on its own, loading the script when Redis
// does not have it (after a restart or a failover).
func (s *Script) RunMany(ctx context.Context, c redis.Scripter, calls []Call) *redis.Cmd {
	keys, args := manyArgs(calls)
	return s.many.Run(ctx, c, keys, args...)
}

// Load loads both forms.
func (s *Script) Load(ctx context.Context, c redis.Scripter) error {
	if err := s.one.Load(ctx, c).Err(); err != nil {
		return err
	}
	return s.many.Load(ctx, c).Err()
}

func manyArgs(calls []Call) ([]string, []any) {
	shared := true
	for _, c := range calls[1:] {
		if !slices.Equal(c.Keys, calls[0].Keys) {
			shared = false
			break
		}
	}
	nk := len(calls[0].Keys)
	keys := calls[0].Keys
	if !shared {
		keys = make([]string, 0, nk*len(calls))
		for _, c := range calls {
			keys = append(keys, c.Keys...)
		}
	} else {
		nk = 0
	}
	keys = guarded(keys)
	na := len(calls[0].Args)
	args := make([]any, 0, 3+na*len(calls))
	args = append(args, len(calls), nk, na)
	for _, c := range calls {
		args = append(args, c.Args...)
	}
	return keys, args
}

// Split gives each of the n calls of a many-call reply its own result, as
// one EVALSHA of the script would have: a nil reply is redis.Nil, an error
// reply that call's error, an error of the whole call every call's.
func Split(ctx context.Context, cmd *redis.Cmd, n int) []*redis.Cmd {
	out := make([]*redis.Cmd, n)
	vals, err := cmd.Slice()
	if err == nil && len(vals) != n {
		err = errors.New("script: a reply of " + strconv.Itoa(len(vals)) + " results for " + strconv.Itoa(n) + " calls")
	}
	for i := range out {
		c := redis.NewCmd(ctx)
		switch {
		case err != nil:
			c.SetErr(err)
		case vals[i] == nil:
			c.SetErr(redis.Nil)
		default:
			if e, ok := vals[i].(error); ok {
				c.SetErr(e)
			} else {
				c.SetVal(vals[i])
			}
		}
		out[i] = c
	}
	return out
}
