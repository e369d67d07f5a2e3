package waitqueue

import (
	"context"
	"fmt"
	"strconv"
	"usher/shared/keyspace"

	"github.com/redis/go-redis/v9"
)

// Ranks is one consistent view of a queue for many waiting entries at once.
type Ranks struct {
	Waiting       int64   // how many are waiting in the queue
	AdmittedTotal int64   // how many the queue has ever admitted
	Rate          float64 // admissions per second over the last minute
	// Stock and SKUs are the queue's stock state and its SKUs with units
	// left, as the last tick saw them (see Entry).
	Stock string
	SKUs  []string
	// Rank holds, for each sequence asked about, its 0-based place in line,
	// or -1 when it is not waiting (admitted, gone, or not ingested yet).
	Rank []int64
}

// Ranks reads the line's length, its admission count and rate, and the rank
// of each of seqs in one atomic round trip (MULTI/EXEC: every key shares the
// queue's hash tag). Because the count and the ranks are read at the same
// instant, a caller can derive later positions from the count alone: in a
// FIFO line every admission since happened ahead of every waiting entry.
// Before a scheduled drop's draw its pre-queue counts in the line, ahead of
// every join since the opening (as a poll counts it: see undrawnLua).
func (s *Store) Ranks(ctx context.Context, q string, seqs []uint64) (Ranks, error) {
	k := keyspace.Of(q)
	var card, pre, passed *redis.IntCmd
	var drawn *redis.BoolCmd
	var st *redis.SliceCmd
	ranks := make([]*redis.IntCmd, len(seqs))
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		card = p.ZCard(ctx, k.Waiting())
		drawn = p.HExists(ctx, k.Stats(), "drawn")
		pre = p.ZCard(ctx, k.PreQueue())
		passed = p.ZCount(ctx, k.Waiting(), "-inf", "(0") // allowed past the line: ahead of the draw
		st = p.HMGet(ctx, k.Stats(), "admittedTotal", "rate", "stock", "skus")
		for i, seq := range seqs {
			ranks[i] = p.ZRank(ctx, k.Waiting(), strconv.FormatUint(seq, 10))
		}
		return nil
	})
	if err != nil && err != redis.Nil {
		return Ranks{}, fmt.Errorf("ranks %s: %w", q, err)
	}
	var undrawn int64
	if !drawn.Val() {
		undrawn = pre.Val()
	}
	out := Ranks{Waiting: card.Val() + undrawn, Rank: make([]int64, len(seqs))}
	if v, ok := st.Val()[0].(string); ok {
		out.AdmittedTotal, _ = strconv.ParseInt(v, 10, 64)
	}
	if v, ok := st.Val()[1].(string); ok {
		out.Rate, _ = strconv.ParseFloat(v, 64)
	}
	out.Stock, _ = st.Val()[2].(string)
	v, _ := st.Val()[3].(string)
	out.SKUs = skuList(v)
	for i, c := range ranks {
		r, err := c.Result()
		switch {
		case err == redis.Nil:
			out.Rank[i] = -1
		case err != nil:
			return Ranks{}, fmt.Errorf("ranks %s: %w", q, err)
		case r >= passed.Val():
			out.Rank[i] = r + undrawn
		default:
			out.Rank[i] = r
		}
	}
	return out, nil
}
