package bus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

func TestRetryWaitsOutTransientFailuresAndStopsAtPermanentOnes(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	n := 0
	start := time.Now()
	err := Retry(context.Background(), log, "declare the streams", func(context.Context) error {
		if n++; n < 4 {
			return fmt.Errorf("ensure stream USHER_ENTRIES: %w", context.DeadlineExceeded)
		}
		return nil
	})
	if err != nil || n != 4 {
		t.Fatalf("Retry = %v after %d attempts, want success at the 4th", err, n)
	}
	// 100, 200, 400 ms, each jittered down to half at most.
	if took := time.Since(start); took < 350*time.Millisecond || took > 2*time.Second {
		t.Errorf("three waits took %v, want 0.35-0.7 s", took)
	}
	if got := strings.Count(logs.String(), "declare the streams: retrying"); got != 3 {
		t.Errorf("%d retry lines logged, want 3:\n%s", got, logs.String())
	}
	if !strings.Contains(logs.String(), "declare the streams: done") {
		t.Errorf("no line says it worked in the end:\n%s", logs.String())
	}

	for _, perm := range []error{Permanent(errors.New("bad config")), fmt.Errorf("connect: %w", nats.ErrAuthorization)} {
		n = 0
		err = Retry(context.Background(), nil, "connect", func(context.Context) error { n++; return perm })
		if n != 1 || err == nil {
			t.Errorf("Retry of %v: %d attempts, err %v; want one attempt and the error", perm, n, err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err = Retry(ctx, nil, "connect to NATS", func(context.Context) error { return nats.ErrNoServers })
	if !errors.Is(err, nats.ErrNoServers) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Retry until ctx ended = %v, want the last error and ctx's", err)
	}
}
