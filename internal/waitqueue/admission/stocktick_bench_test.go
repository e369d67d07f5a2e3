package admission_test

import (
	"context"
	"testing"
	"time"

	"usher/internal/testenv"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/linetest"
	"usher/internal/waitqueue/roles"
)

// BenchmarkStockAwareTickWith5000Held is a stock-aware tick of a queue
// holding 5,000 admitted shoppers, nobody to admit (Redis answers nobody
// else meanwhile): the tick reads what the slots hold from the held index
// (see syncHeld in lib.lua), one call, not every active entry's record.
// The figure includes the 1 ms pause between ticks the loop makes.
func BenchmarkStockAwareTickWith5000Held(b *testing.B) {
	ctx := context.Background()
	s := roles.New(testenv.Redis(b))
	q := testenv.Name(b)
	linetest.JoinAll(b, s, q, linetest.Users(5000)...)
	if err := s.SetStock(ctx, q, false, waitqueue.StockLevel{SKU: "sku", Available: 1 << 30, Version: 1}); err != nil {
		b.Fatal(err)
	}
	tk := waitqueue.Tick{Epoch: epoch, TargetActive: 5000, TickLength: time.Millisecond, TokenTTL: time.Hour, StockAware: true}
	r, err := s.Admit(ctx, q, tk)
	if err != nil || r.Admitted != 5000 {
		b.Fatalf("Admit = %+v, %v", r, err)
	}
	for b.Loop() {
		time.Sleep(time.Millisecond)
		if _, err := s.Admit(ctx, q, tk); err != nil {
			b.Fatal(err)
		}
	}
}
