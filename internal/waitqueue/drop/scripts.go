package drop

import (
	_ "embed" // the scripts' Lua
	"time"

	"github.com/redis/go-redis/v9"

	"usher/internal/keyspace"
	"usher/internal/script"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/internal/linescript"
)

// The drop's scripts: each a .lua file beside this one that opens with the
// invariant it keeps, behind linescript's library.
var (
	drawScript       = script.New(linescript.Changing(drawLua))
	settleDrawScript = script.New(linescript.Changing(settleDrawLua))
)

var (
	//go:embed draw.lua
	drawLua string
	//go:embed settle_draw.lua
	settleDrawLua string
)

// drawArgs are draw.lua's arguments (after lib.lua's two).
type drawArgs struct {
	Epoch  string // the entries stream's identity
	Digest string // the lottery order's digest, kept for the reveal
	N      int    // how many places were staged
	// Version is the pre-queue's version as it was read: the draw is
	// refused if it changed since.
	Version string
	// UpTo is the entries cursor of the draw being redone (0: the cursor
	// now).
	UpTo uint64
}

// argv is draw.lua's ARGV, in the order it reads them.
func (a drawArgs) argv(k keyspace.Queue, ttl time.Duration) []any {
	return linescript.Args(k, ttl, a.Epoch, a.Digest, a.N, a.Version, a.UpTo)
}

// decodeDraw reads draw.lua's reply: how many it placed, or -1 (drawn
// already: ErrDrawn) or -2 (the staged order is not the pre-queue of the
// cursor: ErrDrawChanged).
func decodeDraw(cmd *redis.Cmd) (int, error) {
	placed, err := cmd.Int()
	switch {
	case err != nil:
		return 0, err
	case placed == -1:
		return 0, waitqueue.ErrDrawn
	case placed == -2:
		return 0, waitqueue.ErrDrawChanged
	}
	return placed, nil
}

// settleArgs are settle_draw.lua's arguments (after lib.lua's two).
type settleArgs struct {
	Batch int // the most records one call settles
}

// argv is settle_draw.lua's ARGV.
func (a settleArgs) argv(k keyspace.Queue, ttl time.Duration) []any {
	return linescript.Args(k, ttl, a.Batch)
}
