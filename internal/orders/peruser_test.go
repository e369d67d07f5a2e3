package orders_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"usher/internal/orders"
	"usher/internal/testenv"
)

// Two orders of one user placed at the same moment by two workers never
// take the user past maxPerUser. Both statements start while the SKU's
// stock row is locked (a third party holds it, as a busy hot SKU's
// previous order does), so each reads the orders as they stood before the
// other committed; the row's release lets them run one after the other.
// The second must see the first, not the orders of its own start.
func TestTwoWorkersPlacingOneUsersOrdersAtOnceKeepMaxPerUser(t *testing.T) {
	for name, opt := range map[string]orders.Options{
		"alone": {MaxConns: 4}, "batched": {MaxConns: 4, MaxBatch: 8},
	} {
		t.Run(name, func(t *testing.T) {
			url := testenv.PostgresURL(t)
			workers := []*orders.Store{newStoreOn(t, url, opt), newStoreOn(t, url, opt)}
			ctx := context.Background()
			if _, err := workers[0].SetStock(ctx, "sku", 10); err != nil {
				t.Fatal(err)
			}
			blocker, err := pgx.Connect(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer blocker.Close(ctx)
			tx, err := blocker.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, `SELECT 1 FROM stock WHERE sku = 'sku' FOR UPDATE`); err != nil {
				t.Fatal(err)
			}

			got := make([]orders.Order, 2)
			var wg sync.WaitGroup
			for i, s := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					o := order(i+1, "sku", 1)
					o.User, o.MaxPerUser = "alice", 1
					var err error
					if got[i], err = s.Place(ctx, o); err != nil {
						t.Error(err)
					}
				}()
			}
			waiting := func() (int, error) {
				var n int
				err := blocker.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()`).Scan(&n)
				return n, err
			}
			testenv.Eventually(t, 10*time.Second, func() error {
				n, err := waiting()
				if err == nil && n != 2 {
					err = fmt.Errorf("%d placings wait for the stock row", n)
				}
				return err
			}, "both placings started and waiting for the stock row")
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			wg.Wait()

			placed := 0
			for _, o := range got {
				if o.Status == orders.Pending {
					placed++
				} else if o.Reason != orders.ReasonMaxPerUser {
					t.Errorf("order %s = %s %s, want PENDING or REJECTED max_per_user", o.ID, o.Status, o.Reason)
				}
			}
			if n, _, _ := workers[0].Stock(ctx, "sku"); placed != 1 || n != 9 {
				t.Fatalf("two orders of a user allowed one unit: %d placed, stock %d; want 1 placed, stock 9", placed, n)
			}
			// A redelivery of either is the order as it stands, nothing taken.
			for i, s := range workers {
				o := order(i+1, "sku", 1)
				o.User, o.MaxPerUser = "alice", 1
				again, err := s.Place(ctx, o)
				if err != nil || again.Status != got[i].Status || again.Reason != got[i].Reason {
					t.Errorf("placing order %d again = %s %q, %v; want %s %q", i+1, again.Status, again.Reason, err, got[i].Status, got[i].Reason)
				}
			}
			if n, _, _ := workers[0].Stock(ctx, "sku"); n != 9 {
				t.Fatalf("stock after placing both again = %d, want 9", n)
			}
		})
	}
}
