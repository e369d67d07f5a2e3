// Package passes is the line as the proxy gate sees it (gateway/gate): a
// pass's check — the entry it was issued for still holds its slot — which
// records the pass's last use, and the sweep that finds the passes idle
// too long so the gate frees their slots.
package passes

import (
	"context"
	_ "embed" // the scripts' Lua
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"usher/internal/keyspace"
	"usher/internal/script"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/internal/linescript"
)

// The passes' scripts: each a .lua file beside this one that opens with
// the invariant it keeps. The check runs on every request a proxy asks
// the gate about: a script.Script, so the batcher sends a batch's calls as
// one command.
var (
	useScript   = script.New(useLua)
	sweepScript = script.New(sweepLua)
)

var (
	//go:embed use.lua
	useLua string
	//go:embed sweep.lua
	sweepLua string
)

// StatusOther is a check's status for an entry of another user than the
// pass's.
const StatusOther waitqueue.Status = "other"

// Use is what a pass's check found of its entry.
type Use struct {
	// Status is the entry's: Admitted or Used while it holds its slot;
	// Expired also for an admitted one past its expiresAt; Gone without a
	// record; StatusOther for another user's.
	Status             waitqueue.Status
	TokenID            string
	ReadyAt, ExpiresAt time.Time
}

// Holds reports whether the entry holds its slot: the pass is good.
func (u Use) Holds() bool { return u.Status == waitqueue.Admitted || u.Status == waitqueue.Used }

// Idle is a pass the sweep found idle whose entry still holds its slot.
type Idle struct {
	Seq  uint64
	User string
}

// Passes is the gate's part of the line. It is safe for concurrent use.
type Passes struct {
	client *waitqueue.Client
	rdb    redis.UniversalClient
}

// New returns the Passes role on c. Its check goes through c's batcher.
func New(c *waitqueue.Client) *Passes {
	c.Preload(useScript)
	return &Passes{client: c, rdb: c.Redis()}
}

// Use checks the pass of user for entry seq of q and, when the entry holds
// its slot, records the use (see use.lua): one round trip.
func (p *Passes) Use(ctx context.Context, q string, seq uint64, user string) (Use, error) {
	k := keyspace.Of(q)
	res, err := p.client.RunScript(ctx, useScript, []string{k.Passes()}, k.Prefix(), seq, user).Slice()
	if err == nil && len(res) != 4 {
		err = fmt.Errorf("reply of %d fields", len(res))
	}
	if err != nil {
		return Use{}, fmt.Errorf("pass %s/%d: %w", q, seq, err)
	}
	return Use{Status: waitqueue.Status(linescript.Str(res[0])), TokenID: linescript.Str(res[1]),
		ReadyAt: linescript.MsTime(res[2]), ExpiresAt: linescript.MsTime(res[3])}, nil
}

// Sweep takes at most limit passes of q idle for longer than idle out of
// the passes set and returns those whose entry is still admitted: the
// caller frees them. Gateways may sweep at once: each idle pass is taken
// by one of them.
func (p *Passes) Sweep(ctx context.Context, q string, idle time.Duration, limit int) ([]Idle, error) {
	k := keyspace.Of(q)
	res, err := sweepScript.Run(ctx, p.rdb, []string{k.Passes()}, k.Prefix(), idle.Milliseconds(), limit).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("sweep passes of %s: %w", q, err)
	}
	out := make([]Idle, 0, len(res)/2)
	for i := 0; i+1 < len(res); i += 2 {
		seq, err := strconv.ParseUint(res[i], 10, 64)
		if err != nil {
			return out, fmt.Errorf("sweep passes of %s: seq %q", q, res[i])
		}
		out = append(out, Idle{Seq: seq, User: res[i+1]})
	}
	return out, nil
}
