package line

import (
	_ "embed" // the scripts' Lua

	"github.com/redis/go-redis/v9"

	"usher/internal/ratelimit"
	"usher/internal/script"
	"usher/internal/waitqueue/internal/linescript"
)

// The Line's scripts: each a .lua file beside this one that opens with
// the invariant it keeps, put behind the helpers it uses (*.lib.lua, and
// linescript's library for the ones that change the line). The
// per-request ones are script.Scripts: the batcher sends a batch's calls
// of one as one command.
var (
	ingestScript        = script.New(linescript.Changing(undrawnLua, ingestLua))
	lookupScript        = script.New(lookupLua + lookupOnlyLua)
	lookupLimitedScript = script.New(ratelimit.Lua() + lookupLua + lookupLimitedLua)
	pollScript          = script.New(undrawnLua + pollLua)
	leaveScript         = redis.NewScript(linescript.Changing(leaveLua))
	ranksScript         = redis.NewScript(undrawnLua + ranksLua)
)

var (
	//go:embed undrawn.lib.lua
	undrawnLua string
	//go:embed lookup.lib.lua
	lookupLua string
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
	//go:embed ranks.lua
	ranksLua string
)
