package passes_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"usher/internal/keyspace"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/linetest"
	"usher/internal/waitqueue/passes"
	"usher/internal/waitqueue/roles"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Stop()
	os.Exit(code)
}

// admitted is a line on a real Redis whose users u1..un are admitted at
// sequences 1..n, and its passes.
func admitted(t *testing.T, n int) (*roles.All, *passes.Passes, string) {
	t.Helper()
	s, q := linetest.New(t)
	linetest.JoinAll(t, s, q, linetest.Users(n)...)
	if r, err := s.Admit(context.Background(), q, linetest.Tick(n)); err != nil || r.Admitted != n {
		t.Fatalf("Admit = %+v, %v; want %d admitted", r, err, n)
	}
	return s, passes.New(s.Client), q
}

// A check records a use only for an entry of the pass's user that holds
// its slot; any other entry is named as it is and leaves the set.
func TestUseRecordsOnlyAHeldSlot(t *testing.T) {
	s, p, q := admitted(t, 2)
	ctx := context.Background()
	u, err := p.Use(ctx, q, 1, "u1")
	if err != nil || u.Status != waitqueue.Admitted || !u.Holds() || u.TokenID == "" || u.ExpiresAt.IsZero() {
		t.Fatalf("Use of u1's admission = %+v, %v; want admitted with its token", u, err)
	}
	if u, _ := p.Use(ctx, q, 1, "u2"); u.Status != passes.StatusOther || u.Holds() {
		t.Errorf("Use of u1's entry as u2 = %+v, want %q", u, passes.StatusOther)
	}
	if u, _ := p.Use(ctx, q, 99, "u9"); u.Status != waitqueue.Gone {
		t.Errorf("Use of an entry never admitted = %+v, want gone", u)
	}
	if _, err := p.Use(ctx, q, 2, "u2"); err != nil {
		t.Fatal(err)
	}
	if _, err := linetest.Leave(ctx, s, q, 2, "u2"); err != nil {
		t.Fatal(err)
	}
	if u, _ := p.Use(ctx, q, 2, "u2"); u.Status != waitqueue.Left || u.Holds() {
		t.Errorf("Use after the leave = %+v, want left", u)
	}
	members, err := s.Redis().ZRange(ctx, keyspace.Of(q).Passes(), 0, -1).Result()
	if err != nil || len(members) != 1 || members[0] != "1" {
		t.Errorf("passes set = %v, %v; want only the held entry 1", members, err)
	}
}

// Of any number of gateways sweeping at once, exactly one takes each idle
// pass; a pass used since is taken by none.
func TestEachIdlePassIsSweptOnce(t *testing.T) {
	_, p, q := admitted(t, 6)
	ctx := context.Background()
	for seq := uint64(1); seq <= 6; seq++ {
		if _, err := p.Use(ctx, q, seq, "u"+string(rune('0'+seq))); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	if _, err := p.Use(ctx, q, 6, "u6"); err != nil { // u6 is still browsing
		t.Fatal(err)
	}
	var mu sync.Mutex
	taken := map[uint64]int{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			found, err := p.Sweep(ctx, q, 200*time.Millisecond, 100)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, f := range found {
				taken[f.Seq]++
				if want := "u" + string(rune('0'+f.Seq)); f.User != want {
					t.Errorf("swept %d of %q, want %q", f.Seq, f.User, want)
				}
			}
		}()
	}
	wg.Wait()
	for seq := uint64(1); seq <= 5; seq++ {
		if taken[seq] != 1 {
			t.Errorf("idle pass %d taken %d times, want once", seq, taken[seq])
		}
	}
	if taken[6] != 0 {
		t.Errorf("the pass in use was taken %d times, want never", taken[6])
	}
}
