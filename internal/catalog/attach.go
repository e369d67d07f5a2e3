package catalog

import (
	"context"
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
	return follow(ctx, js, kv)
}
