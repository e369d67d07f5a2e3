// Package linescript is what the scripts that change a queue's line share,
// and only the line's role packages need: the Lua library they start with
// (lib.lua, and stock.lib.lua for the stock-aware count), the six keys and
// two first arguments lib.lua reads, and the reading of the times their
// replies carry.
//
// Every such script runs on one queue's keys, which share the hash tag {q}
// (see package keyspace), so each runs atomically on one Redis Cluster
// node. They derive per-entry and per-user keys from the queue's prefix;
// those hash to the same slot as the declared keys.
//
// An entry record (prefix..'e:'..seq) has status waiting | admitted | used |
// expired | left | pre, or 'alias' naming the live entry a duplicate join
// resolved to. A live record (waiting, admitted, used while its order
// runs) has no TTL; a finished one becomes a tombstone that expires after
// the tombstone TTL, and so does the user's pointer (prefix..'u:'..user)
// when it names it.
//
// One clock: every time decision inside a script reads Redis TIME, never a
// caller's clock, so a host whose clock is off cannot admit early, expire a
// token early or free a slot early.
//
// The cursor hash (prefix..'cursor') says how far each stream is applied to
// the line: field <stream> holds the last stream sequence applied and
// <stream>.id the identity of the stream it counts in (a recreated stream
// starts again at 1). The scripts that apply stream events advance it in the
// same atomic step as the events' effects, so whatever Redis loses — its
// last second, a failover to a lagging replica, everything — it loses the
// cursor's advance with it, and the followers replay exactly the gap.
package linescript

import (
	_ "embed" // the library's Lua
	"strconv"
	"time"

	"usher/internal/keyspace"
)

var (
	//go:embed lib.lua
	lib string
	//go:embed stock.lib.lua
	stock string
)

// Changing is the source of a script that changes a line: lib.lua, then
// the script's own Lua.
func Changing(own ...string) string { return concat(lib, own) }

// Stocked is Changing with the stock-aware count (stock.lib.lua) between
// the library and the script's own Lua.
func Stocked(own ...string) string { return concat(lib+stock, own) }

func concat(head string, own []string) string {
	for _, s := range own {
		head += s
	}
	return head
}

// Keys are the six keys every script of lib.lua gets, in the order it
// reads them: the waiting line, the admitted set, the outbox, the stats,
// the admissions of the last minute and the cursor.
func Keys(k keyspace.Queue) []string {
	return []string{k.Waiting(), k.Active(), k.Outbox(), k.Stats(), k.Admits(), k.Cursor()}
}

// Args is the ARGV of a script of lib.lua: the queue's prefix and the
// tombstone TTL (in seconds), then the script's own arguments.
func Args(k keyspace.Queue, ttl time.Duration, own ...any) []any {
	return append([]any{k.Prefix(), int(ttl / time.Second)}, own...)
}

// MsTime reads a time a script replied with or a record holds, in Unix
// ms; zero for nothing, 0 or what does not parse.
func MsTime(v any) time.Time {
	s, _ := v.(string)
	if s == "" { // not admitted: every waiting shopper's poll (a parse error allocates)
		return time.Time{}
	}
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil || ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// Flag is a yes-or-no argument as the scripts read it: 1 or 0.
func Flag(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Ms is t in Unix milliseconds as the scripts read it, 0 for the zero
// time (unknown).
func Ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// Int reads an integer field of a script's reply (0 for anything else).
func Int(v any) int64 { n, _ := v.(int64); return n }

// Str reads a string field of a script's reply ("" for anything else).
func Str(v any) string { s, _ := v.(string); return s }

// Millis reads a field of a script's reply in milliseconds as a duration.
func Millis(v any) time.Duration { return time.Duration(Int(v)) * time.Millisecond }
