package orders

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// No more than MaxWriters writing statements run at once; the others wait
// for a turn (or for their context).
func TestWriteIsCapped(t *testing.T) {
	s := &Store{writers: make(chan struct{}, 2)}
	var inside, most atomic.Int64
	release := make(chan struct{})
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = s.write(context.Background(), func() error {
				n := inside.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				<-release
				inside.Add(-1)
				return nil
			})
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for inside.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	if got := most.Load(); got != 2 {
		t.Fatalf("at most %d writers at once, want exactly the cap of 2", got)
	}

	// A writer whose context ends while it waits gives up.
	full := &Store{writers: make(chan struct{}, 1)}
	full.writers <- struct{}{}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := full.write(ctx, func() error { t.Fatal("ran without a turn"); return nil }); err == nil {
		t.Fatal("write with an ended context = nil error")
	}
}
