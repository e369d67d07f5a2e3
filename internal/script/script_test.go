package script_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"usher/internal/script"
	"usher/internal/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Stop()
	os.Exit(code)
}

// probe answers every kind of reply a script can give, chosen by ARGV[1],
// and appends ARGV[2] to the list KEYS[1] so the order of effects shows.
var probe = script.New(`
redis.call('RPUSH', KEYS[1], ARGV[2])
local k = ARGV[1]
if k == 'array' then return {ARGV[2], redis.call('LLEN', KEYS[1]), #KEYS} end
if k == 'int' then return 7 end
if k == 'false' then return false end
if k == 'nothing' then return end
if k == 'callerr' then return redis.call('INCR', KEYS[2]) end -- KEYS[2] holds a list: WRONGTYPE
if k == 'error' then error('boom') end
if k == 'reply' then return redis.error_reply('refused') end
return {ok = 'fine'}
`)

// A batch of calls run as one answers each call exactly as the call run on
// its own would — values, nil, errors — with the effects in order.
func TestManyAnswersAsEachCallOnItsOwn(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	name := testenv.Name(t)
	kinds := []string{"array", "int", "false", "nothing", "callerr", "error", "reply", "status", "array"}
	for _, sharedKeys := range []bool{true, false} {
		t.Run(fmt.Sprintf("shared keys %v", sharedKeys), func(t *testing.T) {
			one, many := "{"+name+"}:one", "{"+name+"}:many"
			if !sharedKeys {
				one, many = one+":u", many+":u"
			}
			var calls []script.Call
			var single []*redis.Cmd
			for i, k := range kinds {
				keysOne, keysMany := []string{one, one}, []string{many, many}
				if !sharedKeys { // every call a key of its own beside the shared list
					keysOne[0], keysMany[0] = fmt.Sprintf("%s:%d", one, i%2), fmt.Sprintf("%s:%d", many, i%2)
				}
				single = append(single, probe.Run(ctx, rdb, keysOne, k, i))
				calls = append(calls, script.Call{Keys: keysMany, Args: []any{k, i}})
			}
			got := script.Split(ctx, probe.RunMany(ctx, rdb, calls), len(calls))
			for i := range kinds {
				wv, we := single[i].Result()
				gv, ge := got[i].Result()
				if fmt.Sprint(wv) != fmt.Sprint(gv) || !sameError(we, ge) {
					t.Errorf("call %d (%s): many gave %v, %v; alone %v, %v", i, kinds[i], gv, ge, wv, we)
				}
			}
			for i := range 2 {
				a, b := one, many
				if !sharedKeys {
					a, b = fmt.Sprintf("%s:%d", one, i), fmt.Sprintf("%s:%d", many, i)
				}
				wl, gl := rdb.LRange(ctx, a, 0, -1).Val(), rdb.LRange(ctx, b, 0, -1).Val()
				if fmt.Sprint(wl) != fmt.Sprint(gl) {
					t.Errorf("effects: many left %v, alone %v", gl, wl)
				}
				if sharedKeys {
					break
				}
			}
		})
	}
}

// sameError: both nil, both redis.Nil, or both the same cause (Redis
// names the script's line differently in the two forms).
func sameError(alone, many error) bool {
	if alone == nil || many == nil || errors.Is(alone, redis.Nil) || errors.Is(many, redis.Nil) {
		return alone == many
	}
	for _, cause := range []string{"WRONGTYPE", "boom", "refused"} {
		if strings.Contains(alone.Error(), cause) {
			return strings.Contains(many.Error(), cause)
		}
	}
	return alone.Error() == many.Error()
}

// A Redis that lost its scripts (a restart, a failover) gets the many-call
// form again from RunMany.
func TestRunManyLoadsTheScript(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	key := "{" + testenv.Name(t) + "}:l"
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	res := script.Split(ctx, probe.RunMany(ctx, rdb, []script.Call{{Keys: []string{key, key}, Args: []any{"int", 1}}}), 1)
	if n, err := res[0].Int(); err != nil || n != 7 {
		t.Fatalf("got %d, %v; want 7", n, err)
	}
}

func TestTag(t *testing.T) {
	for key, want := range map[string]string{
		"usher:{q}:waiting": "q", "usher:order:{o-1}": "o-1", "plain": "", "a{}b": "", "a{b": "", "{x}{y}": "x",
	} {
		if got := script.Tag(key); got != want {
			t.Errorf("Tag(%q) = %q, want %q", key, got, want)
		}
	}
}

// Every call declares its slot's guard beside its own keys (see Guard),
// and the script sees only its own: in a call on its own and in a batch,
// with keys shared or a call's own.
func TestAScriptSeesOnlyItsOwnKeys(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	tag := "{" + testenv.Name(t) + "}:"
	keys := script.New(`return {#KEYS, KEYS[1], KEYS[#KEYS]}`)
	want := func(t *testing.T, cmd *redis.Cmd, first, last string) {
		t.Helper()
		got, err := cmd.Slice()
		if err != nil || len(got) != 3 || got[0] != int64(2) || got[1] != first || got[2] != last {
			t.Errorf("KEYS = %v, %v; want 2 keys, %s … %s", got, err, first, last)
		}
	}
	want(t, keys.Run(ctx, rdb, []string{tag + "a", tag + "b"}), tag+"a", tag+"b")
	shared := []script.Call{{Keys: []string{tag + "a", tag + "b"}}, {Keys: []string{tag + "a", tag + "b"}}}
	for _, cmd := range script.Split(ctx, keys.RunMany(ctx, rdb, shared), 2) {
		want(t, cmd, tag+"a", tag+"b")
	}
	own := []script.Call{{Keys: []string{tag + "a", tag + "b"}}, {Keys: []string{tag + "c", tag + "d"}}}
	res := script.Split(ctx, keys.RunMany(ctx, rdb, own), 2)
	want(t, res[0], tag+"a", tag+"b")
	want(t, res[1], tag+"c", tag+"d")
}

// A key's guard is in its slot (the same hash tag, or the key itself as
// the tag) and in its family's ACL key pattern (it extends the key's
// prefix through the tag).
func TestGuard(t *testing.T) {
	for key, want := range map[string]string{
		"usher:{q}:waiting": "usher:{q}:moving", "usher:order:{o-1}": "usher:order:{o-1}:moving",
		"usher:{:stock}:q:a": "usher:{:stock}:moving", "plain": "{plain}:moving",
	} {
		got := script.Guard(key)
		if got != want {
			t.Errorf("Guard(%q) = %q, want %q", key, got, want)
		}
		if tag := script.Tag(key); tag != "" && script.Tag(got) != tag || tag == "" && script.Tag(got) != key {
			t.Errorf("Guard(%q) = %q: another slot", key, got)
		}
	}
}

// once reads its value once per command: once for a call on its own, once
// for all the calls of a batch, each call seeing the same value.
func TestOnceReadsOncePerCommand(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	key := "{" + testenv.Name(t) + "}:reads"
	reads := script.New(`return once('n', function() return redis.call('INCR', KEYS[1]) end)`)
	calls := make([]script.Call, 5)
	for i := range calls {
		calls[i] = script.Call{Keys: []string{key}}
	}
	for batch, want := range []int64{1, 2} {
		for i, c := range script.Split(ctx, reads.RunMany(ctx, rdb, calls), len(calls)) {
			if got, err := c.Int64(); err != nil || got != want {
				t.Fatalf("batch %d, call %d: %d, %v; want the batch's one read, %d", batch, i, got, err, want)
			}
		}
	}
	if got, err := reads.Run(ctx, rdb, []string{key}).Int64(); err != nil || got != 3 {
		t.Fatalf("a call on its own: %d, %v; want a read of its own, 3", got, err)
	}
}

// forget drops a value once read, so the next call of the batch reads it
// again: for a value a call changed.
func TestForgetReadsAgain(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	key := "{" + testenv.Name(t) + "}:reads"
	reads := script.New(`local v = once('n', function() return redis.call('INCR', KEYS[1]) end)
if ARGV[1] == 'changed' then forget('n') end
return v`)
	calls := []script.Call{{Keys: []string{key}, Args: []any{"-"}}, {Keys: []string{key}, Args: []any{"changed"}},
		{Keys: []string{key}, Args: []any{"-"}}, {Keys: []string{key}, Args: []any{"-"}}}
	var got []int64
	for i, c := range script.Split(ctx, reads.RunMany(ctx, rdb, calls), len(calls)) {
		v, err := c.Int64()
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		got = append(got, v)
	}
	if want := []int64{1, 1, 2, 2}; !slices.Equal(got, want) {
		t.Fatalf("reads seen by the calls: %v, want %v (one read until the second call forgets it, one after)", got, want)
	}
}
