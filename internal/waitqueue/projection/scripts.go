package projection

import (
	_ "embed" // the scripts' Lua

	"github.com/redis/go-redis/v9"

	"usher/internal/waitqueue/internal/linescript"
)

// The projection's scripts: each a .lua file beside this one that opens
// with the invariant it keeps. The three that apply a stream share their
// start and end (apply.head.lua, apply.tail.lua: the cursor's check and
// its move).
var (
	applyEntriesScript    = redis.NewScript(linescript.Changing(applyHead, applyEntriesLua, applyTail))
	applyAdmissionsScript = redis.NewScript(linescript.Changing(applyHead, applyAdmissionsLua, applyTail))
	applyOrdersScript     = redis.NewScript(linescript.Changing(applyHead, applyOrdersLua, applyTail))
	restoreScript         = redis.NewScript(restoreLua)
	restoreDrawScript     = redis.NewScript(restoreDrawLua)
)

var (
	//go:embed apply.head.lua
	applyHead string
	//go:embed apply.tail.lua
	applyTail string
	//go:embed apply_entries.lua
	applyEntriesLua string
	//go:embed apply_admissions.lua
	applyAdmissionsLua string
	//go:embed apply_orders.lua
	applyOrdersLua string
	//go:embed restore.lua
	restoreLua string
	//go:embed restore_draw.lua
	restoreDrawLua string
)
