package waitqueue

import (
	"context"

	"usher/internal/keyspace"
	"usher/internal/script"
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

// Reserve reserves up to want units in the stock ledger for an admission
// step of q that never comes (its admitter crashed), and returns the grant.
func (s *Store) Reserve(ctx context.Context, q string, sh Share, want int) (int64, error) {
	r, _, err := s.reserve(ctx, q, sh, want)
	return r.Grant, err
}

// Reservation is a reservation of the stock ledger a test holds on to.
type Reservation struct {
	res   reservation
	share string
}

// ReserveFor reserves up to want units for an admission at once of q that
// a test makes later (AdmitNowWith).
func (s *Store) ReserveFor(ctx context.Context, q string, sh Share, want int) (Reservation, error) {
	r, share, err := s.reserve(ctx, q, sh, want)
	return Reservation{r, share}, err
}

// AdmitNowWith is AdmitNow on a reservation taken before.
func (s *Store) AdmitNowWith(ctx context.Context, q, epoch string, a AtOnce, r Reservation) ([]uint64, error) {
	return s.admitNowOn(ctx, q, epoch, a, 0, r.res, r.share)
}
