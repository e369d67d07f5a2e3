package waitqueue

import (
	"context"

	"usher/shared/keyspace"
	"usher/shared/script"
)

// BatchedJoin is one join of IngestInOneBatch.
type BatchedJoin struct {
	Seq  uint64
	User string
	Kind JoinKind
}

// IngestInOneBatch ingests joins into q as the batcher does calls that wait
// together: one many-call command, in order (a test cannot make the
// batcher's timing put them in one batch).
func (s *Store) IngestInOneBatch(ctx context.Context, q, epoch string, joins []BatchedJoin) ([]Entry, error) {
	k := keyspace.Of(q)
	calls := make([]script.Call, len(joins))
	for i, j := range joins {
		calls[i] = script.Call{Keys: stdKeys(k), Args: s.args(k, epoch, j.Seq, j.User, 0, string(j.Kind))}
	}
	out := make([]Entry, len(joins))
	for i, cmd := range script.Split(ctx, ingestScript.RunMany(ctx, s.rdb, calls), len(calls)) {
		e, err := ingested(cmd, q, joins[i].Seq, joins[i].User)
		if err != nil {
			return nil, err
		}
		out[i] = e
	}
	return out, nil
}
