package orders

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// holdTracer times every connection hold, from the moment the pool hands
// the connection out (the end of Acquire) to the moment it is given back
// (the start of Release), and tells Options.Hold and Options.HoldOf.
//
// A tracer, not the pool's PrepareConn and AfterRelease hooks: with an
// AfterRelease hook the pool gives every connection back in a goroutine
// of its own, and on a busy machine that goroutine ran milliseconds
// later — the next batch of order statements found no idle connection,
// made a new one (20–40 ms under load) and prepared its statements on it
// (6–15 ms): the holds over 20 ms of the order path's start-up burst.
type holdTracer struct {
	hold   func(time.Duration)
	holdOf func(context.Context, time.Duration)
	since  sync.Map // *pgx.Conn → held
}

type held struct {
	at  time.Time
	ctx context.Context
}

func (t *holdTracer) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	return ctx
}

func (t *holdTracer) TraceAcquireEnd(ctx context.Context, _ *pgxpool.Pool, d pgxpool.TraceAcquireEndData) {
	if d.Err == nil && d.Conn != nil {
		t.since.Store(d.Conn, held{time.Now(), ctx})
	}
}

func (t *holdTracer) TraceRelease(_ *pgxpool.Pool, d pgxpool.TraceReleaseData) {
	v, ok := t.since.LoadAndDelete(d.Conn)
	if !ok {
		return
	}
	h := v.(held)
	took := time.Since(h.at)
	if t.hold != nil {
		t.hold(took)
	}
	if t.holdOf != nil {
		// A batch is one hold of the database serving many statements:
		// each is told its share, so a batch of sixty-four that held the
		// connection 20 ms does not read as sixty-four slow holds.
		hs := holders(h.ctx)
		share := took / time.Duration(len(hs))
		for _, ctx := range hs {
			t.holdOf(ctx, share)
		}
	}
}

// The connection's own queries are not traced (pgx.QueryTracer asks for
// these two).
func (t *holdTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (t *holdTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
