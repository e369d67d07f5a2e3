package drop

import (
	_ "embed" // the scripts' Lua

	"github.com/redis/go-redis/v9"

	"usher/internal/waitqueue/internal/linescript"
)

// The drop's scripts: each a .lua file beside this one that opens with the
// invariant it keeps, behind linescript's library.
var (
	drawScript       = redis.NewScript(linescript.Changing(drawLua))
	settleDrawScript = redis.NewScript(linescript.Changing(settleDrawLua))
)

var (
	//go:embed draw.lua
	drawLua string
	//go:embed settle_draw.lua
	settleDrawLua string
)
