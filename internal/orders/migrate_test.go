package orders_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"usher/internal/orders"
	"usher/internal/testenv"
)

// The index of orders by user is built CONCURRENTLY, outside a transaction
// (migration 0005). A build interrupted midway leaves an invalid index
// under its name, which CREATE INDEX … IF NOT EXISTS alone would keep for
// good; migrating again drops it and builds a valid one, once.
func TestAnInterruptedIndexBuildIsBuiltAgain(t *testing.T) {
	ctx := context.Background()
	url := testenv.PostgresURL(t)
	s := newStoreOn(t, url, orders.Options{MaxConns: 4})
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	valid := func() (n int, ok bool) {
		t.Helper()
		if err := conn.QueryRow(ctx, `SELECT count(*), coalesce(bool_and(i.indisvalid), false) FROM pg_index i
			JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = 'orders_user_sku'`).Scan(&n, &ok); err != nil {
			t.Fatal(err)
		}
		return n, ok
	}
	if n, ok := valid(); n != 1 || !ok {
		t.Fatalf("after Migrate: %d index(es) orders_user_sku, valid %v; want one, valid", n, ok)
	}

	// An interrupted build: a unique index over rows that are not unique
	// fails midway and stays, invalid, under the name.
	s.SetStock(ctx, "sku", 10)
	for _, n := range []int{1, 2} {
		o := order(n, "sku", 1)
		o.User = "same-user"
		if _, err := s.Place(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []string{`DROP INDEX orders_user_sku`, `DELETE FROM schema_migrations WHERE version = 5`} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Exec(ctx, `CREATE UNIQUE INDEX CONCURRENTLY orders_user_sku ON orders (user_id, sku)`); err == nil {
		t.Fatal("the unique build over duplicates succeeded; want it to fail midway")
	}
	if n, ok := valid(); n != 1 || ok {
		t.Fatalf("after the failed build: %d index(es), valid %v; want one, invalid", n, ok)
	}

	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if n, ok := valid(); n != 1 || !ok {
		t.Fatalf("after migrating again: %d index(es) orders_user_sku, valid %v; want one, valid", n, ok)
	}
	var applied int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM schema_migrations WHERE version = 5`).Scan(&applied); err != nil || applied != 1 {
		t.Fatalf("migration 5 recorded %d times (%v), want once", applied, err)
	}
}

// Services starting side by side migrate one fresh database at once: every
// one of them succeeds (the holder of the lock builds an index
// CONCURRENTLY, which waits for every transaction in progress — a waiter
// blocked inside PostgreSQL on the lock was one, and the deadlock failed
// it).
func TestServicesMigrateSideBySide(t *testing.T) {
	url := testenv.PostgresURL(t)
	const n = 4
	errs := make(chan error, n)
	for range n {
		go func() {
			s, err := orders.Open(url, orders.Options{MaxConns: 2})
			if err != nil {
				errs <- err
				return
			}
			defer s.Close()
			errs <- s.Migrate(context.Background())
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("Migrate = %v", err)
		}
	}
}
