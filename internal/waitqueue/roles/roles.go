// Package roles puts every role of the line on one Client, for tests that
// bring a line to a state through several roles. A service takes the roles
// its Redis user may play from their packages instead.
package roles

import (
	"context"

	"github.com/redis/go-redis/v9"

	"usher/internal/waitqueue"
	"usher/internal/waitqueue/admission"
	"usher/internal/waitqueue/claims"
	"usher/internal/waitqueue/drop"
	"usher/internal/waitqueue/ledger"
	"usher/internal/waitqueue/line"
	"usher/internal/waitqueue/projection"
)

// All is every role of the line on one Client: each promoted method is
// its role's.
type All struct {
	*waitqueue.Client
	*line.Line
	*admission.Admission
	*claims.Claims
	*drop.Drop
	*projection.Projection
	*ledger.Ledger
}

// New returns every role of the line on one Client on rdb (see
// waitqueue.NewClient).
func New(rdb redis.UniversalClient) *All { return On(waitqueue.NewClient(rdb)) }

// On returns every role of the line on c.
func On(c *waitqueue.Client) *All {
	return &All{Client: c, Line: line.New(c), Admission: admission.New(c), Claims: claims.New(c),
		Drop: drop.New(c), Projection: projection.New(c), Ledger: ledger.New(c)}
}

// Cursor reads how far each stream is applied to q's line (see
// waitqueue.Client.Cursor).
func (a *All) Cursor(ctx context.Context, q string) (waitqueue.Cursor, error) {
	return a.Client.Cursor(ctx, q)
}
