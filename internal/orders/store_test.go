package orders_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"usher/internal/orders"
	"usher/internal/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Stop()
	os.Exit(code)
}

func newStore(t *testing.T) *orders.Store {
	t.Helper()
	return newStoreOn(t, testenv.PostgresURL(t), orders.Options{MaxConns: 40})
}

// newStoreOn is a migrated store on the database at url (a fresh one per
// testenv.PostgresURL), with opt.
func newStoreOn(tb testing.TB, url string, opt orders.Options) *orders.Store {
	tb.Helper()
	s, err := orders.Open(url, opt)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	if err := s.Migrate(context.Background()); err != nil {
		tb.Fatal(err)
	}
	return s
}

func order(n int, sku string, qty int) orders.Order {
	tok := fmt.Sprintf("q:%d", n)
	return orders.Order{ID: orders.ID(tok), TokenID: tok, Queue: "q", User: fmt.Sprintf("u%d", n),
		SKU: sku, Quantity: qty, Deadline: time.Now().Add(time.Minute)}
}

func TestMigrateTwiceIsHarmless(t *testing.T) {
	s := newStore(t)
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("second Migrate = %v, want nil", err)
	}
}

// writeModes runs f on a store with each way of sending writing
// statements: each alone, and batched.
func writeModes(t *testing.T, f func(t *testing.T, s *orders.Store)) {
	for name, opt := range map[string]orders.Options{
		"alone": {MaxConns: 40}, "batched": {MaxConns: 40, MaxBatch: 8},
	} {
		t.Run(name, func(t *testing.T) { f(t, newStoreOn(t, testenv.PostgresURL(t), opt)) })
	}
}

func TestOrderLifecycle(t *testing.T) { writeModes(t, orderLifecycle) }

func orderLifecycle(t *testing.T, s *orders.Store) {
	ctx := context.Background()
	s.SetStock(ctx, "sku", 3)

	tests := []struct {
		name       string
		do         func() (orders.Order, error)
		status     orders.Status
		reason     string
		wantStock  int64
		wantAmount int64
	}{
		{"placing takes the stock", func() (orders.Order, error) { return s.Place(ctx, order(1, "sku", 2)) }, orders.Pending, "", 1, 2000},
		{"placing again takes nothing", func() (orders.Order, error) { return s.Place(ctx, order(1, "sku", 2)) }, orders.Pending, "", 1, 2000},
		{"fewer units than asked reject, the line open", func() (orders.Order, error) { return s.Place(ctx, order(2, "sku", 2)) }, orders.Rejected, "insufficient_stock", 1, 0},
		{"an unknown SKU rejects", func() (orders.Order, error) { return s.Place(ctx, order(3, "nope", 1)) }, orders.Rejected, "unknown_sku", 1, 0},
		{"paying records the payment", func() (orders.Order, error) { return s.Pay(ctx, order(1, "", 0).ID, "pay_1") }, orders.Paid, "", 1, 2000},
		{"failing a paid order changes nothing", func() (orders.Order, error) { return s.Fail(ctx, order(1, "", 0).ID, "deadline") }, orders.Paid, "", 1, 2000},
		{"a second order", func() (orders.Order, error) { return s.Place(ctx, order(4, "sku", 1)) }, orders.Pending, "", 0, 1000},
		{"failing gives the stock back", func() (orders.Order, error) { return s.Fail(ctx, order(4, "", 0).ID, "deadline") }, orders.Failed, "deadline", 1, 1000},
		{"failing twice gives it back once", func() (orders.Order, error) { return s.Fail(ctx, order(4, "", 0).ID, "deadline") }, orders.Failed, "deadline", 1, 1000},
		{"paying a failed order changes nothing", func() (orders.Order, error) { return s.Pay(ctx, order(4, "", 0).ID, "pay_2") }, orders.Failed, "deadline", 1, 1000},
		{"rejecting before placing", func() (orders.Order, error) { return s.Reject(ctx, order(5, "sku", 1), orders.ReasonTokenExpired) }, orders.Rejected, "token_expired", 1, 0},
	}
	for _, tt := range tests {
		got, err := tt.do()
		stock, _, _ := s.Stock(ctx, "sku")
		if err != nil || got.Status != tt.status || got.Reason != tt.reason || got.Amount != tt.wantAmount || stock != tt.wantStock {
			t.Errorf("%s: got %s %q amount %d stock %d (%v), want %s %q amount %d stock %d",
				tt.name, got.Status, got.Reason, got.Amount, stock, err, tt.status, tt.reason, tt.wantAmount, tt.wantStock)
		}
	}
}

// Many workers placing the same order, and many orders racing for little
// stock: the stock is taken once per order and never goes negative.
func TestConcurrentPlacing(t *testing.T) { writeModes(t, concurrentPlacing) }

func concurrentPlacing(t *testing.T, s *orders.Store) {
	ctx := context.Background()
	s.SetStock(ctx, "hot", 10)
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Place(ctx, order(0, "hot", 1)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n, _, _ := s.Stock(ctx, "hot"); n != 9 {
		t.Fatalf("stock after 20 placings of one order = %d, want 9", n)
	}
	var mu sync.Mutex
	count := map[orders.Status]int{}
	for i := 1; i <= 30; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, err := s.Place(ctx, order(i, "hot", 1))
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			count[o.Status]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	n, _, _ := s.Stock(ctx, "hot")
	if count[orders.Pending] != 9 || count[orders.Rejected] != 21 || n != 0 {
		t.Fatalf("30 orders for 9 units: %v, stock %d, want 9 PENDING, 21 REJECTED, stock 0", count, n)
	}
}

func TestRecords(t *testing.T) {
	r := orders.NewRecords(testenv.Redis(t))
	ctx := context.Background()
	id := orders.ID(testenv.Name(t))
	rec := orders.Record{ID: id, Owner: "alice", Fingerprint: orders.Fingerprint("sku", 1), Queue: "q", SKU: "sku", Quantity: 1}

	tests := []struct {
		name string
		rec  orders.Record
		want orders.Outcome
	}{
		{"the first submit creates", rec, orders.Created},
		{"the same submit finds it", rec, orders.Exists},
		{"another body conflicts", orders.Record{ID: id, Owner: "alice", Fingerprint: orders.Fingerprint("sku", 2)}, orders.Conflict},
	}
	for _, tt := range tests {
		got, cur, err := r.Create(ctx, tt.rec)
		if err != nil || got != tt.want || cur.Status != orders.Pending {
			t.Errorf("%s: Create = %s %+v %v, want %s PENDING", tt.name, got, cur, err, tt.want)
		}
	}
	paid := rec
	paid.Status, paid.PaymentID = orders.Paid, "pay_1"
	r.Put(ctx, paid)
	stale := rec
	stale.Status = orders.Pending
	r.Put(ctx, stale)
	if got, ok, _ := r.Get(ctx, id); !ok || got != paid {
		t.Fatalf("Get after a stale PENDING write = %+v, want %+v", got, paid)
	}
}

func TestIDs(t *testing.T) {
	a, b := orders.ID("demo:1"), orders.ID("demo:2")
	if a == b || a != orders.ID("demo:1") || !orders.ValidID(a) || len(a) != 30 {
		t.Fatalf("ID = %q, %q: want distinct, stable, valid 30-character ids", a, b)
	}
	for _, bad := range []string{"", "ord_", "ord_ABCDEFGHIJKLMNOPQRSTUVWXYZ", a + "x", "xrd_" + a[4:]} {
		if orders.ValidID(bad) {
			t.Errorf("ValidID(%q) = true", bad)
		}
	}
}

// With a cap on writers, concurrent placing still takes exactly the stock.
func TestCappedWritersPlaceCorrectly(t *testing.T) {
	s := newStoreOn(t, testenv.PostgresURL(t), orders.Options{MaxConns: 40, MaxWriters: 2})
	ctx := context.Background()
	s.SetStock(ctx, "hot", 25)
	var wg sync.WaitGroup
	var placed atomic.Int64
	for i := 1; i <= 40; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, err := s.Place(ctx, order(i, "hot", 1))
			if err != nil {
				t.Error(err)
			}
			if o.Status == orders.Pending {
				placed.Add(1)
			}
		}()
	}
	wg.Wait()
	if n, _, _ := s.Stock(ctx, "hot"); n != 0 || placed.Load() != 25 {
		t.Fatalf("stock = %d with %d placed, want 0 and 25", n, placed.Load())
	}
}

// Every change of a SKU's stock reports its new figure with a higher
// version (copies apply them in order), and a user's units are bounded
// by the queue's maxPerUser across all their orders.
func TestStockVersionsAndTheLimitPerUser(t *testing.T) {
	writeModes(t, stockVersionsAndTheLimitPerUser)
}

func stockVersionsAndTheLimitPerUser(t *testing.T, s *orders.Store) {
	ctx := context.Background()
	st, err := s.SetStock(ctx, "sku", 5)
	if err != nil || st.Available != 5 {
		t.Fatalf("SetStock = %+v, %v", st, err)
	}
	o := order(1, "sku", 2)
	o.MaxPerUser = 3
	placed, err := s.Place(ctx, o)
	if err != nil || placed.Status != orders.Pending || placed.Available != 3 || placed.StockVersion <= st.Version {
		t.Fatalf("Place = %+v, %v; want PENDING, 3 left at a later version than %d", placed, err, st.Version)
	}
	more := order(2, "sku", 2)
	more.User, more.MaxPerUser = o.User, 3 // the same user: 2 + 2 > 3
	if got, err := s.Place(ctx, more); err != nil || got.Status != orders.Rejected || got.Reason != orders.ReasonMaxPerUser {
		t.Fatalf("Place past maxPerUser = %+v, %v; want REJECTED max_per_user", got, err)
	}
	failed, err := s.Fail(ctx, placed.ID, orders.ReasonDeadline)
	if err != nil || failed.Available != 5 || failed.StockVersion <= placed.StockVersion {
		t.Fatalf("Fail = %+v, %v; want the units back (5) at a later version than %d", failed, err, placed.StockVersion)
	}
	levels, err := s.Stocks(ctx, []string{"sku", "nope"})
	if err != nil || len(levels) != 1 || levels[0] != (orders.Stock{SKU: "sku", Available: 5, Version: failed.StockVersion}) {
		t.Fatalf("Stocks = %+v, %v; want sku at 5, version %d", levels, err, failed.StockVersion)
	}
}

// Sold sums a queue's PAID orders (the sales view) and reads that queue's
// orders only, through an index: the ops dashboard asks once a second,
// and the table holds every queue's orders ever taken.
func TestSoldReadsOnlyTheQueuesOrders(t *testing.T) {
	url := testenv.PostgresURL(t)
	s := newStoreOn(t, url, orders.Options{MaxConns: 4})
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// 200,000 orders of 20 past sales, then this sale's: 2 + 3 units of
	// "a" and 4 of "b" paid, 7 of "a" failed, 1 of "b" pending.
	if _, err := conn.Exec(ctx, `
INSERT INTO orders (id, token_id, queue, user_id, sku, quantity, amount, status, deadline)
SELECT 'old-' || i, 'old:' || i, 'past-' || (i % 20), 'u' || i, 'a', 1, 0, 'PAID', now()
FROM generate_series(1, 200000) AS i`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `
INSERT INTO orders (id, token_id, queue, user_id, sku, quantity, amount, status, deadline) VALUES
  ('n1', 'n:1', 'now', 'u1', 'a', 2, 0, 'PAID', now()), ('n2', 'n:2', 'now', 'u2', 'a', 3, 0, 'PAID', now()),
  ('n3', 'n:3', 'now', 'u3', 'b', 4, 0, 'PAID', now()), ('n4', 'n:4', 'now', 'u4', 'a', 7, 0, 'FAILED', now()),
  ('n5', 'n:5', 'now', 'u5', 'b', 1, 0, 'PENDING', now())`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `ANALYZE orders`); err != nil {
		t.Fatal(err)
	}
	sold, err := s.Sold(ctx, "now")
	if err != nil || len(sold) != 2 || sold["a"] != 5 || sold["b"] != 4 {
		t.Fatalf("Sold(now) = %v, %v; want a: 5, b: 4", sold, err)
	}
	rows, err := conn.Query(ctx, `EXPLAIN SELECT sku, sold FROM sales WHERE queue = 'now'`)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	plan := strings.Join(lines, "\n")
	if strings.Contains(plan, "Seq Scan") || !strings.Contains(plan, "orders_queue_sku") {
		t.Errorf("the sales sum of one queue reads the whole table, want the index orders_queue_sku:\n%s", plan)
	}
}
