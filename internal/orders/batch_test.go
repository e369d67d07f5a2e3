package orders_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"usher/internal/orders"
	"usher/internal/testenv"
)

// Statements that queue while a batch is in flight go together in the
// next round trips, at most MaxBatch a batch, each caller told its own
// row and its share of the hold of the connection its statement ran on
// (the hold divided among the batch's statements, so the shares of one
// hold add up to it); a caller gone before its turn has nothing run.
func TestWritesQueuedBehindABatchGoTogether(t *testing.T) {
	url := testenv.PostgresURL(t)
	var holds atomic.Int64
	var mu sync.Mutex
	var held, shared time.Duration
	told := map[context.Context]int{}
	s := newStoreOn(t, url, orders.Options{MaxConns: 40, MaxBatch: 16,
		Hold: func(d time.Duration) {
			holds.Add(1)
			mu.Lock()
			held += d
			mu.Unlock()
		},
		HoldOf: func(ctx context.Context, d time.Duration) {
			mu.Lock()
			told[ctx]++
			shared += d
			mu.Unlock()
		}})
	ctx := context.Background()
	if _, err := s.SetStock(ctx, "hot", 60); err != nil {
		t.Fatal(err)
	}
	// The test holds the stock row: the first order's batch waits for it,
	// and everything after queues behind that batch.
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM stock WHERE sku = 'hot' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	holds.Store(0)
	mu.Lock()
	held, shared = 0, 0
	mu.Unlock()

	const n = 100
	results := make([]orders.Order, n+1)
	errs := make([]error, n+1)
	ctxs := make([]context.Context, n+1)
	var wg sync.WaitGroup
	place := func(i int) {
		defer wg.Done()
		results[i], errs[i] = s.Place(ctxs[i], order(i, "hot", 1))
	}
	ctxs[1] = context.WithValue(ctx, struct{ n int }{1}, 1)
	wg.Add(1)
	go place(1)
	waitForLockWaiter(t, url)
	gone, cancel := context.WithCancel(ctx)
	ctxs[0] = gone
	wg.Add(1)
	go place(0)
	for i := 2; i <= n; i++ {
		ctxs[i] = context.WithValue(ctx, struct{ n int }{i}, i) // one context per caller
		wg.Add(1)
		go place(i)
	}
	time.Sleep(200 * time.Millisecond) // every caller queued
	cancel()
	time.Sleep(50 * time.Millisecond)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	batches := holds.Load()

	if errs[0] == nil {
		t.Errorf("a caller gone before its turn got %+v, want its context's error", results[0])
	}
	if _, found, err := s.Get(ctx, order(0, "", 0).ID); err != nil || found {
		t.Errorf("the order of a caller gone before its turn: found %v (%v), want not placed", found, err)
	}
	pending, rejected := 0, 0
	for i := 1; i <= n; i++ {
		switch {
		case errs[i] != nil:
			t.Errorf("order %d: %v", i, errs[i])
		case results[i].Status == orders.Pending:
			pending++
		case results[i].Status == orders.Rejected && results[i].Reason == orders.ReasonSoldOut:
			rejected++
		}
		if got := told[ctxs[i]]; got != 1 {
			t.Errorf("order %d's caller was told %d holds, want 1 (its batch's)", i, got)
		}
	}
	if left, _, _ := s.Stock(ctx, "hot"); pending != 60 || rejected != 40 || left != 0 {
		t.Errorf("100 orders for 60 units: %d PENDING, %d REJECTED sold_out, %d left; want 60, 40, 0", pending, rejected, left)
	}
	// A hold is divided among the statements it served, not given whole
	// to each: a batch of many is one hold of the database, not many.
	if diff := held - shared; diff < -time.Millisecond || diff > time.Millisecond {
		t.Errorf("the callers were told %v of holds in all, want the %v the connections were held", shared, held)
	}
	// 1 alone, then 99 queued in batches of at most 16: 7 more.
	if batches > 8 {
		t.Errorf("%d connection holds for %d statements queued together, want at most 8", batches, n)
	}
}

// waitForLockWaiter returns once a session of the database at url waits
// for a row lock.
func waitForLockWaiter(t *testing.T, url string) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	testenv.Eventually(t, 10*time.Second, func() error {
		var n int
		if err := conn.QueryRow(context.Background(),
			`SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'`).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return errors.New("no session waits for a lock")
		}
		return nil
	}, "a statement waiting for the stock row's lock")
}

// A connection given back is at once the next statement's: timing the
// holds does not make the pool give connections back later (in a
// goroutine of their own, as its AfterRelease hook does), so statements in
// turn run on one connection and never wait for a new one.
func TestStatementsInTurnShareOneConnection(t *testing.T) {
	url := testenv.PostgresURL(t)
	var holds atomic.Int64
	s := newStoreOn(t, url, orders.Options{MaxConns: 40, MaxBatch: 16, Hold: func(time.Duration) { holds.Add(1) }})
	ctx := context.Background()
	if _, err := s.SetStock(ctx, "sku", 1000); err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		if _, err := s.Place(ctx, order(i, "sku", 1)); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 || holds.Load() < 200 {
		t.Errorf("200 statements in turn: %d connections to the database, %d holds timed; want 1 connection, every hold timed", n, holds.Load())
	}
}
