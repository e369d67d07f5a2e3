package catalog

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Attach is Open for a process that does not declare the bucket: it binds
// to the bucket as another process declared it (under broker auth only the
// admitter does, see bus.Open), loads every queue and starts following
// changes, without creating or changing the bucket. The bucket must exist.
// Call Run to keep following changes.
func Attach(ctx context.Context, js jetstream.JetStream) (*Catalog, error) {
	kv, err := js.KeyValue(ctx, Bucket)
	if err != nil {
		return nil, fmt.Errorf("open catalog: %w", err)
	}
	// As in Open: the watch lives as long as ctx, or until Run returns.
	wctx, stop := context.WithCancel(ctx)
	w, err := kv.WatchAll(wctx)
	if err != nil {
		stop()
		return nil, fmt.Errorf("watch catalog: %w", err)
	}
	c := &Catalog{kv: kv, watcher: w, watchCtx: wctx, stopWatch: stop, queues: map[string]Config{}}
	for e := range w.Updates() {
		if e == nil { // every current value has been delivered
			return c, nil
		}
		c.apply(e)
	}
	stop()
	return nil, errors.New("watch catalog: closed while loading")
}
