package orders

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Store holds orders and stock in PostgreSQL. Every method is one
// statement, so a connection is held for one round trip and a row lock for
// the time the server needs to run and commit it, never across a network
// call of ours. It is safe for concurrent use.
type Store struct {
	pool    *pgxpool.Pool
	writers chan struct{} // nil: no cap on concurrent writing statements
	batch   *batcher      // nil: each writing statement in its own round trip
}

// Options tune the pool.
type Options struct {
	// MaxConns caps the pool (the seeds' 40 by default).
	MaxConns int32
	// Hold, when set, is told how long each connection was held, from the
	// moment the pool hands it out to the moment it is given back.
	Hold func(time.Duration)
	// HoldOf, when set, is told each caller's share of every hold — the
	// hold divided among the statements of the batch it served — with the
	// caller's context: a caller learns what its own statements held (the
	// adaptive admission's per-order figures).
	HoldOf func(ctx context.Context, d time.Duration)
	// MaxWriters caps the writing statements (place, reject, pay, fail) in
	// flight at once; 0 = no cap beyond the pool. Orders of one hot SKU all
	// update the same stock row: past a handful of writers the extra ones
	// only wait for that row's lock while holding a connection, so holds
	// grow and throughput does not (see BENCHMARKS.md). A writer waits for
	// its turn before it takes a connection, not while holding one.
	MaxWriters int
	// MaxBatch, above 1, sends the writing statements that queue up while
	// one round trip is in flight together in the next, at most MaxBatch
	// in one round trip and one transaction, one batch in flight at a
	// time (MaxWriters does not apply then): one hot SKU's orders take its
	// stock row in turn on one connection instead of waiting for each
	// other's lock on several. A statement that fails rolls its batch back
	// and each of the batch's statements runs again on its own.
	MaxBatch int
}

// Open returns a Store on the database at url. It does not connect yet:
// the first query does, so a service can start while the database is down.
func Open(url string, opt Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database url: %w", err)
	}
	cfg.MaxConns = 40
	if opt.MaxConns > 0 {
		cfg.MaxConns = opt.MaxConns
	}
	if opt.Hold != nil || opt.HoldOf != nil {
		cfg.ConnConfig.Tracer = &holdTracer{hold: opt.Hold, holdOf: opt.HoldOf}
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("database pool: %w", err)
	}
	st := &Store{pool: pool}
	if opt.MaxWriters > 0 {
		st.writers = make(chan struct{}, opt.MaxWriters)
	}
	if opt.MaxBatch > 1 {
		st.batch = &batcher{max: opt.MaxBatch}
	}
	return st, nil
}

// exec runs a writing statement: in a batch, or alone once a writer's turn
// is free.
func (s *Store) exec(ctx context.Context, lock, sql string, args []any, scan func(pgx.Row) error) error {
	return s.run(&stmt{ctx: ctx, sql: sql, args: args, scan: scan, lock: lock})
}

func (s *Store) run(st *stmt) error {
	if s.batch != nil {
		return s.batched(st)
	}
	return s.write(st.ctx, func() error { return s.alone(st) })
}

// write runs a writing statement once a writer's turn is free.
func (s *Store) write(ctx context.Context, f func() error) error {
	if s.writers != nil {
		select {
		case s.writers <- struct{}{}:
			defer func() { <-s.writers }()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return f()
}

// Close closes every connection.
func (s *Store) Close() { s.pool.Close() }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }

const orderColumns = `id, token_id, queue, user_id, sku, quantity, amount, status, reason, payment_id, deadline`

func scanOrder(row pgx.Row) (Order, error) {
	var o Order
	var st string
	err := row.Scan(&o.ID, &o.TokenID, &o.Queue, &o.User, &o.SKU, &o.Quantity, &o.Amount, &st, &o.Reason, &o.PaymentID, &o.Deadline)
	o.Status, o.Available = Status(st), -1
	return o, err
}

// placeSQL is transaction 1. One statement: take the stock with one
// conditional update and insert the order, PENDING when the stock was
// there and REJECTED when not (sold_out: none left; insufficient_stock:
// fewer than asked; max_per_user: the user's PENDING and PAID units of the
// SKU plus these would pass $8, when $8 > 0), judged on the stock row as
// it stands once locked (FOR UPDATE), so concurrent orders each see the
// last one's result. If the order exists already
// (a redelivery, a second worker) the insert violates the primary or the
// token key and the whole statement, stock update included, rolls back:
// stock is taken once. The stock's version is bumped with it.
//
// The user's units (mine) are read from the statement's snapshot, taken
// before the statement waited for the stock row: an order of the same
// user committed while it waited is not in it. With a limit (Place),
// lockStockSQL runs first in the same transaction, so the snapshot is
// taken once the row is ours and holds every order placed before.
const placeSQL = `
WITH cur AS (
  SELECT available, version FROM stock WHERE sku = $5 FOR UPDATE),
mine AS (
  SELECT coalesce(sum(quantity), 0) AS units FROM orders
  WHERE sku = $5 AND user_id = $4 AND status IN ('PENDING', 'PAID')),
s AS (
  UPDATE stock SET available = available - $6::int, version = version + 1, updated_at = now()
  WHERE sku = $5 AND (SELECT available FROM cur) >= $6::int
    AND ($8::int = 0 OR (SELECT units FROM mine) + $6::int <= $8::int)
  RETURNING available, price, version)
INSERT INTO orders (id, token_id, queue, user_id, sku, quantity, amount, status, reason, deadline)
SELECT $1, $2, $3, $4, $5, $6::int, coalesce((SELECT price FROM s), 0) * $6::int,
  CASE WHEN EXISTS (SELECT 1 FROM s) THEN 'PENDING' ELSE 'REJECTED' END,
  CASE WHEN EXISTS (SELECT 1 FROM s) THEN ''
       WHEN NOT EXISTS (SELECT 1 FROM cur) THEN 'unknown_sku'
       WHEN $8::int > 0 AND (SELECT units FROM mine) + $6::int > $8::int THEN 'max_per_user'
       WHEN (SELECT available FROM cur) > 0 THEN 'insufficient_stock'
       ELSE 'sold_out' END,
  $7
RETURNING status, reason, amount,
  coalesce((SELECT available FROM s), (SELECT available FROM cur), -1),
  coalesce((SELECT version FROM s), (SELECT version FROM cur), 0)`

// lockStockSQL takes the stock row of SKU $1 ahead of placeSQL (see
// there): the orders of one SKU take that row in turn anyway, so waiting
// for it one statement earlier costs a limited order no extra wait, only
// a statement's execution in the same round trip.
const lockStockSQL = `SELECT 1 FROM stock WHERE sku = $1 FOR UPDATE`

// Place records the order and takes its stock, or rejects it when there
// is not enough. Placing an order that exists returns it as it stands and
// takes nothing. With a limit per user (MaxPerUser), orders of one user
// placed at once by several workers are judged one after the other.
func (s *Store) Place(ctx context.Context, o Order) (Order, error) {
	var st string
	w := &stmt{ctx: ctx, lock: o.SKU, sql: placeSQL, args: []any{o.ID, o.TokenID, o.Queue, o.User, o.SKU, o.Quantity, o.Deadline, o.MaxPerUser},
		scan: func(row pgx.Row) error { return row.Scan(&st, &o.Reason, &o.Amount, &o.Available, &o.StockVersion) }}
	if o.MaxPerUser > 0 {
		w.first = lockStockSQL
	}
	err := s.run(w)
	if isUniqueViolation(err) {
		got, found, err := s.Get(ctx, o.ID)
		if err == nil && !found {
			// The token is taken by an order of another id: not ours to touch.
			return Order{}, fmt.Errorf("place %s: token %s belongs to another order", o.ID, o.TokenID)
		}
		return got, err
	}
	if err != nil {
		return Order{}, fmt.Errorf("place %s: %w", o.ID, err)
	}
	o.Status, o.PaymentID = Status(st), ""
	return o, nil
}

// Reject records an order that was refused before it could take stock
// (its token had expired, say). An existing order is returned unchanged.
func (s *Store) Reject(ctx context.Context, o Order, reason string) (Order, error) {
	var got Order
	err := s.exec(ctx, "", `
INSERT INTO orders (id, token_id, queue, user_id, sku, quantity, amount, status, reason, deadline)
VALUES ($1, $2, $3, $4, $5, $6, 0, 'REJECTED', $7, $8)
ON CONFLICT DO NOTHING
RETURNING `+orderColumns, []any{o.ID, o.TokenID, o.Queue, o.User, o.SKU, o.Quantity, reason, o.Deadline},
		func(row pgx.Row) (err error) { got, err = scanOrder(row); return err })
	if errors.Is(err, pgx.ErrNoRows) {
		got, _, err = s.Get(ctx, o.ID)
	}
	if err != nil {
		return Order{}, fmt.Errorf("reject %s: %w", o.ID, err)
	}
	return got, nil
}

// Get returns the order with id, and false when there is none.
func (s *Store) Get(ctx context.Context, id string) (Order, bool, error) {
	o, err := scanOrder(s.pool.QueryRow(ctx, `SELECT `+orderColumns+` FROM orders WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Order{}, false, nil
	}
	if err != nil {
		return Order{}, false, fmt.Errorf("get order %s: %w", id, err)
	}
	return o, true, nil
}

// ChangedSince calls fn with every order changed at or after t, in no
// particular order (a scan: it runs once after Redis lost the records).
func (s *Store) ChangedSince(ctx context.Context, t time.Time, fn func(Order) error) error {
	rows, err := s.pool.Query(ctx, `SELECT `+orderColumns+` FROM orders WHERE updated_at >= $1`, t)
	if err != nil {
		return fmt.Errorf("orders changed since %s: %w", t.Format(time.RFC3339), err)
	}
	defer rows.Close()
	for rows.Next() {
		o, err := scanOrder(rows)
		if err != nil {
			return fmt.Errorf("orders changed since %s: %w", t.Format(time.RFC3339), err)
		}
		if err := fn(o); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("orders changed since %s: %w", t.Format(time.RFC3339), err)
	}
	return nil
}

// Pay is transaction 2 of a paid order: it records the payment id and
// PAID. An order that is final already is returned as it stands.
func (s *Store) Pay(ctx context.Context, id, paymentID string) (Order, error) {
	var o Order
	err := s.exec(ctx, "", `
UPDATE orders SET status = 'PAID', payment_id = $2, updated_at = now()
WHERE id = $1 AND status = 'PENDING'
RETURNING `+orderColumns, []any{id, paymentID},
		func(row pgx.Row) (err error) { o, err = scanOrder(row); return err })
	return s.orCurrent(ctx, id, o, err)
}

// Fail is transaction 2 of a failed order: FAILED with its reason and its
// stock given back, in one statement. An order that is final already is
// returned as it stands (and its stock is not given back twice).
func (s *Store) Fail(ctx context.Context, id, reason string) (Order, error) {
	var o Order
	err := s.write(ctx, func() (err error) {
		row := s.pool.QueryRow(ctx, `
WITH o AS (
  UPDATE orders SET status = 'FAILED', reason = $2, updated_at = now()
  WHERE id = $1 AND status = 'PENDING'
  RETURNING `+orderColumns+`),
s AS (
  UPDATE stock SET available = available + o.quantity, version = version + 1, updated_at = now()
  FROM o WHERE stock.sku = o.sku
  RETURNING stock.available, stock.version)
SELECT `+orderColumns+`, coalesce((SELECT available FROM s), -1), coalesce((SELECT version FROM s), 0) FROM o`, id, reason)
		var st string
		err = row.Scan(&o.ID, &o.TokenID, &o.Queue, &o.User, &o.SKU, &o.Quantity, &o.Amount, &st, &o.Reason, &o.PaymentID, &o.Deadline,
			&o.Available, &o.StockVersion)
		o.Status = Status(st)
		return err
	})
	return s.orCurrent(ctx, id, o, err)
}

func (s *Store) orCurrent(ctx context.Context, id string, o Order, err error) (Order, error) {
	if errors.Is(err, pgx.ErrNoRows) {
		var found bool
		o, found, err = s.Get(ctx, id)
		if err == nil && !found {
			err = fmt.Errorf("order %s: not found", id)
		}
	}
	if err != nil {
		return Order{}, fmt.Errorf("update order %s: %w", id, err)
	}
	return o, nil
}

// SetStock sets how many units of sku are available, creating the SKU,
// and returns the stock as it now stands.
func (s *Store) SetStock(ctx context.Context, sku string, available int64) (Stock, error) {
	st := Stock{SKU: sku}
	err := s.pool.QueryRow(ctx, `
INSERT INTO stock (sku, available) VALUES ($1, $2)
ON CONFLICT (sku) DO UPDATE SET available = excluded.available, version = stock.version + 1, updated_at = now()
RETURNING available, version`, sku, available).Scan(&st.Available, &st.Version)
	if err != nil {
		return st, fmt.Errorf("set stock %s: %w", sku, err)
	}
	return st, nil
}

// Stocks returns the stock of each of skus the store knows.
func (s *Store) Stocks(ctx context.Context, skus []string) ([]Stock, error) {
	rows, err := s.pool.Query(ctx, `SELECT sku, available, version FROM stock WHERE sku = ANY($1)`, skus)
	if err != nil {
		return nil, fmt.Errorf("stocks: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Stock, error) {
		var st Stock
		err := r.Scan(&st.SKU, &st.Available, &st.Version)
		return st, err
	})
	if err != nil {
		return nil, fmt.Errorf("stocks: %w", err)
	}
	return out, nil
}

// Stock returns how many units of sku are available, and false when the
// SKU is unknown.
func (s *Store) Stock(ctx context.Context, sku string) (int64, bool, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT available FROM stock WHERE sku = $1`, sku).Scan(&n)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("stock %s: %w", sku, err)
	}
	return n, true, nil
}

func isUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

// Latencies returns, for every final order, the time from its placement
// (transaction 1) to its final status: for benchmarks and reports.
func (s *Store) Latencies(ctx context.Context) ([]time.Duration, error) {
	rows, err := s.pool.Query(ctx, `SELECT updated_at - created_at FROM orders WHERE status <> 'PENDING'`)
	if err != nil {
		return nil, fmt.Errorf("latencies: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[time.Duration])
}

// Sold returns the units of each SKU sold (PAID) through queue q.
func (s *Store) Sold(ctx context.Context, q string) (map[string]int64, error) {
	rows, err := s.pool.Query(ctx, `SELECT sku, sold FROM sales WHERE queue = $1`, q)
	if err != nil {
		return nil, fmt.Errorf("sold %s: %w", q, err)
	}
	out := map[string]int64{}
	var sku string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&sku, &n}, func() error { out[sku] = n; return nil })
	if err != nil {
		return nil, fmt.Errorf("sold %s: %w", q, err)
	}
	return out, nil
}
