package claims

import (
	_ "embed" // the scripts' Lua

	"github.com/redis/go-redis/v9"

	"usher/internal/script"
	"usher/internal/waitqueue/internal/linescript"
)

// The claims' scripts: each a .lua file beside this one that opens with
// the invariant it keeps, behind linescript's library. The order worker's
// per-order ones are script.Scripts: the batcher sends a batch's calls of
// one as one command.
var (
	claimScript    = redis.NewScript(linescript.Stocked(claimLua))
	redeemScript   = script.New(linescript.Changing(redeemLua))
	releaseScript  = script.New(linescript.Changing(releaseLua))
	boughtScript   = script.New(linescript.Changing(boughtLua))
	placedScript   = script.New(linescript.Changing(placedLua))
	setStockScript = redis.NewScript(linescript.Changing(setStockLua))
)

var (
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
)
