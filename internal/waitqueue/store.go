package waitqueue

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Store is every role of the line on one Client, for a caller that drives
// the whole line: each promoted method is its role's.
type Store struct {
	*Client
	*Line
	*AdmissionRole
	*Claims
	*Drop
	*Projection
	*Ledger
}

// New returns every role of the line on one Client on rdb (see
// NewClient).
func New(rdb redis.UniversalClient) *Store {
	c := NewClient(rdb)
	return &Store{Client: c, Line: NewLine(c), AdmissionRole: NewAdmission(c), Claims: NewClaims(c),
		Drop: NewDrop(c), Projection: NewProjection(c), Ledger: NewLedger(c)}
}

// Cursor reads how far each stream is applied to q's line (see
// Client.Cursor).
func (s *Store) Cursor(ctx context.Context, q string) (Cursor, error) { return s.Client.Cursor(ctx, q) }
