package admission

import (
	_ "embed" // the scripts' Lua

	"github.com/redis/go-redis/v9"

	"usher/internal/waitqueue/internal/linescript"
)

// The admission's scripts: each a .lua file beside this one that opens
// with the invariant it keeps; the tick and the admission at once count
// stock as one (linescript.Stocked).
var (
	admitScript       = redis.NewScript(linescript.Stocked(admitLua))
	admitNowScript    = redis.NewScript(linescript.Stocked(admitNowLua))
	closedSinceScript = redis.NewScript(closedSinceLua)
	closingScript     = redis.NewScript(closingLua)
)

var (
	//go:embed admit.lua
	admitLua string
	//go:embed admit_now.lua
	admitNowLua string
	//go:embed closed_since.lua
	closedSinceLua string
	//go:embed closing.lua
	closingLua string
)
