package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"usher/internal/event"
)

// WaitStreams returns once every usher stream and the catalog's bucket
// exist, as the role that declares them (the admitter) creates them,
// checking twice a second and telling log every ten seconds what it still
// waits for (log may be nil). It changes nothing. It returns ctx's error
// when ctx ends first, and at once an error no wait will cure (the broker
// refusing the lookup); a lookup that times out or finds no responder (a
// fresh cluster electing its leaders) counts as a stream still waited for.
func WaitStreams(ctx context.Context, js jetstream.JetStream, log *slog.Logger) error {
	names := append(streamNames(), event.StreamQueues)
	start := time.Now()
	lastSaid := start
	for {
		var missing []string
		for _, name := range names {
			lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := js.Stream(lctx, name)
			cancel()
			switch {
			case errors.Is(err, jetstream.ErrStreamNotFound):
				missing = append(missing, name)
			case err != nil && ctx.Err() == nil && permanent(err):
				return fmt.Errorf("stream %s: %w", name, err)
			case err != nil && ctx.Err() == nil:
				missing = append(missing, name+" ("+err.Error()+")")
			}
		}
		if len(missing) == 0 && ctx.Err() == nil {
			return nil
		}
		if log != nil && time.Since(lastSaid) >= 10*time.Second {
			lastSaid = time.Now()
			log.Warn("waiting for the streams: the admitter declares them", "missing", missing,
				"for", time.Since(start).Round(time.Second).String())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for streams %v: %w", missing, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}
