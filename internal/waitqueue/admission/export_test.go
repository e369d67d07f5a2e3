package admission

import (
	"context"

	"usher/internal/waitqueue"
	"usher/internal/waitqueue/ledger"
)

// AdmitNowWith is AdmitNow on a reservation taken before (Ledger.Reserve).
func (a *Admission) AdmitNowWith(ctx context.Context, q, epoch string, at waitqueue.AtOnce, r ledger.Reservation) ([]uint64, error) {
	return a.admitNowOn(ctx, q, epoch, at, 0, r)
}
