package waitqueue

import (
	_ "embed" // the scripts' Lua

	"github.com/redis/go-redis/v9"

	"usher/internal/ratelimit"
	"usher/internal/script"
)

// Every script runs on one queue's keys, which share the hash tag {q} (see
// package keyspace), so each runs atomically on one Redis Cluster node.
// They derive per-entry and per-user keys from the queue's prefix; those
// hash to the same slot as the declared keys. Each script is a .lua file
// beside this one that starts with the invariant it keeps; the helpers
// several share are *.lib.lua files, put in front of a script's own Lua
// when it is loaded.
//
// Every mutating script gets the same six keys (stdKeys) and starts with the
// same two arguments: the queue's prefix and the tombstone TTL in seconds
// (lib.lua).
//
// An entry record (prefix..'e:'..seq) has status waiting | admitted | used |
// expired | left, or 'alias' naming the live entry a duplicate join resolved
// to. A live record (waiting, admitted, used while its order runs) has no
// TTL; a finished one becomes a tombstone that expires after the tombstone
// TTL, and so does the user's pointer (prefix..'u:'..user) when it names it.
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

// The helpers several scripts share.
var (
	//go:embed lib.lua
	luaLib string
	//go:embed stock.lib.lua
	stockLua string
	//go:embed undrawn.lib.lua
	undrawnLua string
	//go:embed lookup.lib.lua
	lookupLua string
	//go:embed ledger.lib.lua
	ledgerLua string
	//go:embed apply.head.lua
	applyPrologue string
	//go:embed apply.tail.lua
	applyEpilogue string
)

// Each script's own Lua.
var (
	//go:embed apply_entries.lua
	applyEntriesLua string
	//go:embed apply_admissions.lua
	applyAdmissionsLua string
	//go:embed apply_orders.lua
	applyOrdersLua string
	//go:embed ingest.lua
	ingestLua string
	//go:embed lookup.lua
	lookupOnlyLua string
	//go:embed lookup_limited.lua
	lookupLimitedLua string
	//go:embed poll.lua
	pollLua string
	//go:embed leave.lua
	leaveLua string
	//go:embed admit.lua
	admitLua string
	//go:embed admit_now.lua
	admitNowLua string
	//go:embed claim.lua
	claimLua string
	//go:embed redeem.lua
	redeemLua string
	//go:embed release.lua
	releaseLua string
	//go:embed bought.lua
	boughtLua string
	//go:embed placed.lua
	placedLua string
	//go:embed set_stock.lua
	setStockLua string
	//go:embed draw.lua
	drawLua string
	//go:embed settle_draw.lua
	settleDrawLua string
	//go:embed ranks.lua
	ranksLua string
	//go:embed restore.lua
	restoreLua string
	//go:embed restore_draw.lua
	restoreDrawLua string
	//go:embed closed_since.lua
	closedSinceLua string
	//go:embed closing.lua
	closingLua string
	//go:embed reserve.lua
	reserveLua string
	//go:embed report.lua
	reportLua string
	//go:embed ledger_stock.lua
	ledgerStockLua string
	//go:embed cancel.lua
	cancelLua string
	//go:embed withdraw.lua
	withdrawLua string
)

// The scripts, each its helpers and its own Lua (see each .lua file).
var (
	applyEntriesScript    = redis.NewScript(luaLib + applyPrologue + applyEntriesLua + applyEpilogue)
	applyAdmissionsScript = redis.NewScript(luaLib + applyPrologue + applyAdmissionsLua + applyEpilogue)
	applyOrdersScript     = redis.NewScript(luaLib + applyPrologue + applyOrdersLua + applyEpilogue)
	ingestScript          = script.New(luaLib + undrawnLua + ingestLua)
	lookupScript          = script.New(lookupLua + lookupOnlyLua)
	lookupLimitedScript   = script.New(ratelimit.Lua() + lookupLua + lookupLimitedLua)
	pollScript            = script.New(undrawnLua + pollLua)
	leaveScript           = redis.NewScript(luaLib + leaveLua)
	admitScript           = redis.NewScript(luaLib + stockLua + admitLua)
	admitNowScript        = redis.NewScript(luaLib + stockLua + admitNowLua)
	claimScript           = redis.NewScript(luaLib + stockLua + claimLua)
	redeemScript          = script.New(luaLib + redeemLua)
	releaseScript         = script.New(luaLib + releaseLua)
	boughtScript          = script.New(luaLib + boughtLua)
	placedScript          = script.New(luaLib + placedLua)
	stockScript           = redis.NewScript(luaLib + setStockLua)
	drawScript            = redis.NewScript(luaLib + drawLua)
	settleDrawScript      = redis.NewScript(luaLib + settleDrawLua)
	ranksScript           = redis.NewScript(undrawnLua + ranksLua)
	restoreScript         = redis.NewScript(restoreLua)
	restoreDrawScript     = redis.NewScript(restoreDrawLua)
	closedSinceScript     = redis.NewScript(closedSinceLua)
	closingScript         = redis.NewScript(closingLua)
	reserveScript         = script.New(ledgerLua + reserveLua)
	reportScript          = script.New(ledgerLua + reportLua)
	ledgerStockScript     = script.New(ledgerLua + ledgerStockLua)
	cancelScript          = script.New(ledgerLua + cancelLua)
	withdrawScript        = script.New(ledgerLua + withdrawLua)
)
