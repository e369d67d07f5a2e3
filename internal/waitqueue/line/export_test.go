package line

import (
	"context"

	"usher/internal/keyspace"
	"usher/internal/script"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/internal/linescript"
)

// BatchedJoin is one join of IngestInOneBatch.
type BatchedJoin struct {
	Seq  uint64
	User string
	Kind waitqueue.JoinKind
}

// IngestInOneBatch ingests joins into q as the batcher does calls that wait
// together: one many-call command, in order (a test cannot make the
// batcher's timing put them in one batch).
func (l *Line) IngestInOneBatch(ctx context.Context, q, epoch string, joins []BatchedJoin) ([]waitqueue.Entry, error) {
	k := keyspace.Of(q)
	calls := make([]script.Call, len(joins))
	for i, j := range joins {
		args := ingestArgs{Epoch: epoch, Seq: j.Seq, User: j.User, Kind: j.Kind}
		calls[i] = script.Call{Keys: linescript.Keys(k), Args: args.argv(k, l.client.TombstoneTTL())}
	}
	out := make([]waitqueue.Entry, len(joins))
	for i, cmd := range script.Split(ctx, ingestScript.RunMany(ctx, l.rdb, calls), len(calls)) {
		e, _, err := decodeIngest(cmd, q, ingestArgs{Seq: joins[i].Seq, User: joins[i].User})
		if err != nil {
			return nil, err
		}
		out[i] = e
	}
	return out, nil
}
