package ledger

import (
	_ "embed" // the scripts' Lua

	"usher/internal/script"
)

// The ledger's scripts: each a .lua file beside this one that opens with
// the invariant it keeps, behind ledger.lib.lua.
var (
	reserveScript     = script.New(ledgerLua + reserveLua)
	reportScript      = script.New(ledgerLua + reportLua)
	ledgerStockScript = script.New(ledgerLua + ledgerStockLua)
	cancelScript      = script.New(ledgerLua + cancelLua)
	withdrawScript    = script.New(ledgerLua + withdrawLua)
)

var (
	//go:embed ledger.lib.lua
	ledgerLua string
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
