package waitqueue_test

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/roles"
)

// Batched calls (what the gateway uses) answer exactly like direct ones,
// and the calls of one script on one queue that wait together reach Redis
// as one command (package script's many-call form).
func TestBatchedCallsAnswerLikeDirectOnes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rdb := testenv.OwnRedis(t) // its own: the command count below is this test's alone
	direct, s := roles.New(rdb), roles.New(rdb)
	s.EnableBatching()
	go s.RunBatches(ctx, 2)
	q := testenv.Name(t)
	const n = 300
	var wg sync.WaitGroup
	for i := 1; i <= n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Ingest(ctx, q, epoch, uint64(i), fmt.Sprintf("u%d", i), 0); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	before := testenv.RedisCalls(t, rdb, "evalsha")
	for i := 1; i <= n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e, err := s.Poll(ctx, q, uint64(i))
			want, werr := direct.Poll(ctx, q, uint64(i))
			if err != nil || werr != nil || !reflect.DeepEqual(e, want) || e.Position != int64(i) || e.Waiting != n {
				t.Errorf("Poll(%d) = %+v, %v; direct %+v, %v; want position %d of %d", i, e, err, want, werr, i, n)
			}
			c, err := s.Lookup(ctx, q, fmt.Sprintf("u%d", i))
			if err != nil || !c.Found || c.Seq != uint64(i) || c.Status != waitqueue.Waiting {
				t.Errorf("Lookup(u%d) = %+v %v", i, c, err)
			}
		}()
	}
	wg.Wait()
	// 2n batched calls and n direct polls: the batched ones went in fewer
	// commands than calls.
	if got := testenv.RedisCalls(t, rdb, "evalsha") - before - n; got >= 2*n {
		t.Errorf("%d batched script calls took %d EVALSHA commands; want them grouped", 2*n, got)
	}
}

// Calls made once the batches have stopped (a service draining its last
// requests after its context ended) are answered straight from Redis,
// not left waiting for a batcher that is gone.
func TestCallsAfterTheBatchesStopAreAnswered(t *testing.T) {
	rdb := testenv.OwnRedis(t)
	s := roles.New(rdb)
	s.EnableBatching()
	ctx, stop := context.WithCancel(context.Background())
	ended := make(chan error, 1)
	go func() { ended <- s.RunBatches(ctx, 2) }()
	q := testenv.Name(t)
	if _, err := s.Ingest(context.Background(), q, epoch, 1, "u1", 0); err != nil {
		t.Fatal(err)
	}
	stop()
	testenv.EndsWith(t, ended, 5*time.Second, nil)
	cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.Ingest(cctx, q, epoch, 2, "u2", 0); err != nil {
		t.Fatalf("Ingest after the batches stopped: %v", err)
	}
	if e, err := s.Poll(cctx, q, 2); err != nil || e.Position != 2 {
		t.Fatalf("Poll after the batches stopped = %+v, %v; want position 2", e, err)
	}
}

// A Redis that lost its scripts (a restart, a failover: SCRIPT FLUSH here)
// still answers batched calls, grouped and alone: the batcher loads them
// again.
func TestBatchedCallsSurviveALostScriptCache(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rdb := testenv.OwnRedis(t) // its own: SCRIPT FLUSH empties the whole server's cache
	s := roles.New(rdb)
	s.EnableBatching()
	go s.RunBatches(ctx, 1)
	q := testenv.Name(t)
	if _, err := s.Ingest(ctx, q, epoch, 1, "u1", 0); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 50} { // one call alone, then many together
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if e, err := s.Poll(ctx, q, 1); err != nil || e.Position != 1 {
					t.Errorf("Poll after SCRIPT FLUSH (%d at once) = %+v, %v; want position 1", n, e, err)
				}
			}()
		}
		wg.Wait()
	}
}
