package waitqueue

import (
	"context"
	"fmt"
	"strconv"

	"usher/internal/keyspace"
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
// of each of seqs in one atomic round trip (ranksScript: every key shares
// the queue's hash tag). Because the count and the ranks are read at the
// same instant, a caller can derive later positions from the count alone:
// in a FIFO line every admission since happened ahead of every waiting
// entry. Before a scheduled drop's draw its pre-queue counts in the line,
// ahead of every join since the opening, by the rule a poll counts it with
// (see undrawnLua): the notifier's streams and the gateway's polls tell the
// same place of the same line.
func (s *Store) Ranks(ctx context.Context, q string, seqs []uint64) (Ranks, error) {
	k := keyspace.Of(q)
	args := make([]any, 1, len(seqs)+1)
	args[0] = k.Prefix()
	for _, seq := range seqs {
		args = append(args, strconv.FormatUint(seq, 10))
	}
	res, err := ranksScript.Run(ctx, s.rdb, []string{k.Waiting(), k.Stats()}, args...).Slice()
	if err != nil {
		return Ranks{}, fmt.Errorf("ranks %s: %w", q, err)
	}
	if len(res) != 5+len(seqs) {
		return Ranks{}, fmt.Errorf("ranks %s: reply of %d fields for %d sequences", q, len(res), len(seqs))
	}
	out := Ranks{Rank: make([]int64, len(seqs))}
	out.Waiting, _ = res[0].(int64)
	if v, ok := res[1].(string); ok {
		out.AdmittedTotal, _ = strconv.ParseInt(v, 10, 64)
	}
	if v, ok := res[2].(string); ok {
		out.Rate, _ = strconv.ParseFloat(v, 64)
	}
	out.Stock, _ = res[3].(string)
	v, _ := res[4].(string)
	out.SKUs = skuList(v)
	for i := range seqs {
		r, ok := res[5+i].(int64)
		if !ok {
			return Ranks{}, fmt.Errorf("ranks %s: rank %d is %T", q, i, res[5+i])
		}
		out.Rank[i] = r
	}
	return out, nil
}
