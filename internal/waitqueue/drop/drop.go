// Package drop is a scheduled drop's part of the line: the pre-queue of
// those who joined before the opening, the lottery's draw that places it
// (and a redraw after Redis lost one), settling the drawn into the line,
// and the invite codes that let a join past the line.
package drop

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
	"usher/internal/keyspace"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/internal/linescript"

	"github.com/redis/go-redis/v9"
)

// Drop is a scheduled drop's part of the line: its pre-queue, the draw
// that places it (and a redraw after Redis lost one), settling the drawn
// into the line, and the invite codes that let a join past the line. It
// is safe for concurrent use.
type Drop struct {
	client *waitqueue.Client
	rdb    redis.UniversalClient
}

// New returns the Drop role on c.
func New(c *waitqueue.Client) *Drop { return &Drop{client: c, rdb: c.Redis()} }

// Draw places the pre-queue of q in the order given (the lottery's), read
// at version (see PreQueue), and keeps digest (the order's, see
// lottery.Digest) for the reveal. The order is staged in batches first;
// then one script checks it is exactly the pre-queue of the entries cursor
// and makes it the line (see draw.lua),
// so Redis is never busy for long, even for a million. It returns how many
// were placed. Call SettleDraw after.
func (d *Drop) Draw(ctx context.Context, q, epoch, version string, order []uint64, digest string) (int, error) {
	return d.draw(ctx, q, epoch, version, order, digest, 0)
}

// Redraw is Draw of a queue whose draw Redis lost (the catalog says drawn,
// the line does not): the pre-queue is that of the first draw's entries
// cursor upTo — so that the same seed gives the same order — and the
// pre-queue joins after it queue FIFO, as they did the first time. order
// must be the lottery order of the pre-queue up to upTo.
func (d *Drop) Redraw(ctx context.Context, q, epoch, version string, order []uint64, digest string, upTo uint64) (int, error) {
	return d.draw(ctx, q, epoch, version, order, digest, upTo)
}

func (d *Drop) draw(ctx context.Context, q, epoch, version string, order []uint64, digest string, upTo uint64) (int, error) {
	k := keyspace.Of(q)
	if err := d.rdb.Unlink(ctx, k.Draw()).Err(); err != nil {
		return 0, fmt.Errorf("draw %s: %w", q, err)
	}
	n := float64(len(order) + 1)
	for i := 0; i < len(order); i += drawBatch {
		chunk := order[i:min(i+drawBatch, len(order))]
		z := make([]redis.Z, len(chunk))
		for j, seq := range chunk {
			z[j] = redis.Z{Score: float64(i+j+1) / n, Member: seq}
		}
		if err := d.rdb.ZAdd(ctx, k.Draw(), z...).Err(); err != nil {
			return 0, fmt.Errorf("draw %s: stage: %w", q, err)
		}
	}
	args := drawArgs{Epoch: epoch, Digest: digest, N: len(order), Version: version, UpTo: upTo}
	placed, err := decodeDraw(drawScript.Run(ctx, d.rdb, linescript.Keys(k), args.argv(k, d.client.TombstoneTTL())...))
	switch {
	case errors.Is(err, waitqueue.ErrDrawn), errors.Is(err, waitqueue.ErrDrawChanged):
		return 0, err
	case err != nil:
		return 0, fmt.Errorf("draw %s: %w", q, err)
	}
	return placed, nil
}

// drawBatch is how many places one command of the draw writes or settles.
const drawBatch = 2_000

// SettleDraw turns a batch of q's drawn records from pre-queued into
// waiting (see settle_draw.lua) and returns how many are left; the
// admitter calls it once a tick until none are, so that Redis is never
// busy for long. Nothing left is one cheap call.
func (d *Drop) SettleDraw(ctx context.Context, q string) (int, error) {
	k := keyspace.Of(q)
	args := settleArgs{Batch: drawBatch}
	left, err := settleDrawScript.Run(ctx, d.rdb, linescript.Keys(k), args.argv(k, d.client.TombstoneTTL())...).Int()
	if err != nil {
		return 0, fmt.Errorf("settle the draw of %s: %w", q, err)
	}
	return left, nil
}

// Drawing reads what the line recorded of q's draw.
func (d *Drop) Drawing(ctx context.Context, q string) (waitqueue.Drawing, error) {
	v, err := d.rdb.HMGet(ctx, keyspace.Of(q).Stats(), "drawn", "drawCursor", "drawDigest").Result()
	if err != nil {
		return waitqueue.Drawing{}, fmt.Errorf("drawing %s: %w", q, err)
	}
	str := func(i int) string { s, _ := v[i].(string); return s }
	out := waitqueue.Drawing{Drawn: v[0] != nil, Digest: str(2)}
	out.Entries, _ = strconv.Atoi(str(0))
	out.Cursor, _ = strconv.ParseUint(str(1), 10, 64)
	return out, nil
}

// PreQueue reads the pre-queue of q (for the draw), whether q was drawn,
// and the pre-queue's version as the read began: Draw refuses an order
// read from a pre-queue that changed since.
func (d *Drop) PreQueue(ctx context.Context, q string) ([]waitqueue.PreEntry, bool, string, error) {
	k := keyspace.Of(q)
	st, err := d.rdb.HMGet(ctx, k.Stats(), "drawn", "preVersion").Result()
	if err != nil {
		return nil, false, "", fmt.Errorf("pre-queue %s: %w", q, err)
	}
	drawn := st[0] != nil
	version, _ := st[1].(string)
	if version == "" {
		version = "0"
	}
	seqs, err := d.rdb.ZRange(ctx, k.PreQueue(), 0, -1).Result()
	if err != nil {
		return nil, false, "", fmt.Errorf("pre-queue %s: %w", q, err)
	}
	out := make([]waitqueue.PreEntry, 0, len(seqs))
	for len(seqs) > 0 {
		chunk := seqs[:min(len(seqs), 10_000)]
		seqs = seqs[len(chunk):]
		cmds := make([]*redis.StringCmd, len(chunk))
		_, err := d.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, sq := range chunk {
				seq, _ := strconv.ParseUint(sq, 10, 64)
				cmds[i] = p.HGet(ctx, k.Entry(seq), "user")
			}
			return nil
		})
		if err != nil && err != redis.Nil {
			return nil, false, "", fmt.Errorf("pre-queue %s: %w", q, err)
		}
		for i, sq := range chunk {
			seq, _ := strconv.ParseUint(sq, 10, 64)
			out = append(out, waitqueue.PreEntry{Seq: seq, User: cmds[i].Val()})
		}
	}
	return out, drawn, version, nil
}

// AddInvites records single-use invite codes of q, each valid until
// expiresAt (now is the caller's Redis-synced clock). Every code keeps its
// own expiry (its score, in Unix ms): a later batch neither cuts an earlier
// one's lifetime short nor stretches it, and the key lives as long as its
// longest-lived code. Codes past their expiry are dropped on the way.
func (d *Drop) AddInvites(ctx context.Context, q string, codes []string, now, expiresAt time.Time) error {
	members := make([]redis.Z, len(codes))
	for i, c := range codes {
		members[i] = redis.Z{Score: float64(expiresAt.UnixMilli()), Member: c}
	}
	if err := d.putInvites(ctx, q, members, now, expiresAt); err != nil {
		return fmt.Errorf("add invites %s: %w", q, err)
	}
	return nil
}

// putInvites adds members to q's invite codes and keeps the key until
// expiresAt at least: EXPIRE NX gives a new key its lifetime, EXPIRE GT
// lengthens an existing key's, never shortens it.
func (d *Drop) putInvites(ctx context.Context, q string, members []redis.Z, now, expiresAt time.Time) error {
	if !expiresAt.After(now) {
		return nil // expired already: nothing to keep (and EXPIRE 0 would drop every code)
	}
	key := keyspace.Of(q).Invites()
	ttl := expiresAt.Sub(now).Truncate(time.Second) + time.Second
	_, err := d.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZRemRangeByScore(ctx, key, "-inf", "("+strconv.FormatInt(now.UnixMilli(), 10))
		p.ZAdd(ctx, key, members...)
		p.ExpireNX(ctx, key, ttl)
		p.ExpireGT(ctx, key, ttl)
		return nil
	})
	return err
}

// UseInvite takes invite code of q, once: false when it is unknown, used or
// past its expiry at now (the caller's Redis-synced clock).
func (d *Drop) UseInvite(ctx context.Context, q, code string, now time.Time) (waitqueue.Invite, bool, error) {
	key := keyspace.Of(q).Invites()
	var score *redis.FloatCmd
	var removed *redis.IntCmd
	_, err := d.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		score = p.ZScore(ctx, key, code)
		removed = p.ZRem(ctx, key, code)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return waitqueue.Invite{}, false, fmt.Errorf("use invite %s: %w", q, err)
	}
	if removed.Val() != 1 || score.Err() != nil {
		return waitqueue.Invite{}, false, nil
	}
	inv := waitqueue.Invite{Code: code, ExpiresAt: time.UnixMilli(int64(score.Val()))}
	return inv, now.Before(inv.ExpiresAt), nil
}

// ReturnInvite gives back a code whose join could not be recorded, with
// the expiry it had.
func (d *Drop) ReturnInvite(ctx context.Context, q string, inv waitqueue.Invite, now time.Time) error {
	err := d.putInvites(ctx, q, []redis.Z{{Score: float64(inv.ExpiresAt.UnixMilli()), Member: inv.Code}}, now, inv.ExpiresAt)
	if err != nil {
		return fmt.Errorf("return invite %s: %w", q, err)
	}
	return nil
}
