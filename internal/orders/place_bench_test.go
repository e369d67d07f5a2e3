package orders_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"usher/internal/orders"
	"usher/internal/testenv"
)

// BenchmarkPlaceWithALimitPerUser places orders on one hot SKU with a
// limit per user (maxPerUser 2), from 16 goroutines, into a table that
// already holds 200,000 orders of other users: what a sale's order path
// does late in the day. The limit sums the user's own orders of the SKU
// while the stock row is locked, so that sum must not read the table.
func BenchmarkPlaceWithALimitPerUser(b *testing.B) {
	benchPlaceWithALimitPerUser(b, orders.Options{MaxConns: 16})
}

// BenchmarkPlaceWithALimitPerUserBatched is BenchmarkPlaceWithALimitPerUser
// with the order worker's default batching (USHER_ORDER_BATCH 64).
func BenchmarkPlaceWithALimitPerUserBatched(b *testing.B) {
	benchPlaceWithALimitPerUser(b, orders.Options{MaxConns: 16, MaxBatch: 64})
}

func benchPlaceWithALimitPerUser(b *testing.B, opt orders.Options) {
	url := testenv.PostgresURL(b)
	s := newStoreOn(b, url, opt)
	ctx := context.Background()
	sku := fmt.Sprintf("hot-%d", time.Now().UnixNano())
	if _, err := s.SetStock(ctx, sku, 1<<40); err != nil {
		b.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `
INSERT INTO orders (id, token_id, queue, user_id, sku, quantity, amount, status, reason, deadline)
SELECT 'old-' || $1 || '-' || i, 'old:' || $1 || ':' || i, 'q', 'old-user-' || i, $1, 1, 0, 'PAID', '', now()
FROM generate_series(1, 200000) AS i`, sku); err != nil {
		b.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `ANALYZE orders`); err != nil {
		b.Fatal(err)
	}
	cpu := clusterCPU(b, conn)
	cpu0 := cpu()
	var n atomic.Int64
	b.SetParallelism(8) // 16 goroutines on 2 CPUs
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			tok := fmt.Sprintf("q:%s:%d", sku, i)
			o := orders.Order{ID: orders.ID(tok), TokenID: tok, Queue: "q", User: fmt.Sprintf("new-user-%d", i),
				SKU: sku, Quantity: 1, Deadline: time.Now().Add(time.Minute), MaxPerUser: 2}
			got, err := s.Place(ctx, o)
			if err != nil {
				b.Fatal(err)
			}
			if got.Status != orders.Pending {
				b.Fatalf("order %d: %s %s", i, got.Status, got.Reason)
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "orders/s")
	cpu1 := cpu()
	for i, unit := range []string{"cpu-µs/order-postgres", "cpu-µs/order-test"} {
		b.ReportMetric(float64(cpu1[i]-cpu0[i])/float64(time.Microsecond)/float64(b.N), unit)
	}
}

// clusterCPU returns a function that reads the CPU time used so far by the
// test's PostgreSQL cluster (its postmaster and every process it started)
// and by this process: figures other processes on a busy machine do not
// move, where orders/s does.
func clusterCPU(b *testing.B, conn *pgx.Conn) func() [2]time.Duration {
	b.Helper()
	var dir string
	if err := conn.QueryRow(context.Background(), `SHOW data_directory`).Scan(&dir); err != nil {
		b.Fatal(err)
	}
	pid, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		b.Fatal(err)
	}
	postmaster, err := strconv.Atoi(strings.SplitN(string(pid), "\n", 2)[0])
	if err != nil {
		b.Fatal(err)
	}
	self := os.Getpid()
	return func() (out [2]time.Duration) {
		for _, p := range testenv.Processes() {
			switch {
			case p.PID == postmaster, p.PPID == postmaster:
				out[0] += p.CPU
			case p.PID == self:
				out[1] += p.CPU
			}
		}
		return out
	}
}
