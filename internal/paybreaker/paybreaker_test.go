package paybreaker_test

import (
	"context"
	"os"
	"testing"
	"time"

	"usher/internal/paybreaker"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Stop()
	os.Exit(code)
}

func TestSharedState(t *testing.T) {
	// Its own server: the key is global, other tests may mark it.
	url, _ := testenv.RedisServer(t)
	rdb, err := waitqueue.DialURL(url, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	s := paybreaker.New(rdb)
	ctx := context.Background()
	s.MarkClosed(ctx)
	steps := []struct {
		name string
		do   func() error
		want bool
	}{
		{"closed at first", func() error { return nil }, false},
		{"open once marked", func() error { return s.MarkOpen(ctx, time.Minute) }, true},
		{"closed once marked closed", func() error { return s.MarkClosed(ctx) }, false},
		{"the mark expires by itself", func() error { return s.MarkOpen(ctx, time.Millisecond) }, false},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatal(err)
		}
		if st.want == false && st.name == "the mark expires by itself" {
			testenv.Eventually(t, time.Second, func() bool { open, _ := s.Open(ctx); return !open }, "mark did not expire")
			continue
		}
		if got, err := s.Open(ctx); got != st.want || err != nil {
			t.Errorf("%s: Open() = %v, %v, want %v", st.name, got, err, st.want)
		}
	}
}
