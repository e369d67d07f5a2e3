package waitqueue

import (
	_ "embed" // the scripts' Lua

	"github.com/redis/go-redis/v9"

	"usher/internal/ratelimit"
	"usher/internal/script"
	"usher/internal/waitqueue/internal/linescript"
)

// Each script is a .lua file beside this one that opens with the
// invariant it keeps; the helpers several scripts share are *.lib.lua
// files, put in front of a script's own Lua (the library of every script
// that changes a line is package linescript's).

// The helpers several scripts share.
var (
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
	applyEntriesScript    = redis.NewScript(linescript.Changing(applyPrologue, applyEntriesLua, applyEpilogue))
	applyAdmissionsScript = redis.NewScript(linescript.Changing(applyPrologue, applyAdmissionsLua, applyEpilogue))
	applyOrdersScript     = redis.NewScript(linescript.Changing(applyPrologue, applyOrdersLua, applyEpilogue))
	ingestScript          = script.New(linescript.Changing(undrawnLua, ingestLua))
	lookupScript          = script.New(lookupLua + lookupOnlyLua)
	lookupLimitedScript   = script.New(ratelimit.Lua() + lookupLua + lookupLimitedLua)
	pollScript            = script.New(undrawnLua + pollLua)
	leaveScript           = redis.NewScript(linescript.Changing(leaveLua))
	admitScript           = redis.NewScript(linescript.Stocked(admitLua))
	admitNowScript        = redis.NewScript(linescript.Stocked(admitNowLua))
	claimScript           = redis.NewScript(linescript.Stocked(claimLua))
	redeemScript          = script.New(linescript.Changing(redeemLua))
	releaseScript         = script.New(linescript.Changing(releaseLua))
	boughtScript          = script.New(linescript.Changing(boughtLua))
	placedScript          = script.New(linescript.Changing(placedLua))
	stockScript           = redis.NewScript(linescript.Changing(setStockLua))
	drawScript            = redis.NewScript(linescript.Changing(drawLua))
	settleDrawScript      = redis.NewScript(linescript.Changing(settleDrawLua))
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
