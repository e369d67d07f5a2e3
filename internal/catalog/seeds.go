package catalog

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"usher/internal/event"
)

// DeclareSeeds creates the bucket of lottery seeds if needed (see
// event.BucketSeeds); Open, which the role declaring the streams and the
// catalog calls, declares it.
func DeclareSeeds(ctx context.Context, js jetstream.JetStream, replicas int) error {
	_, err := declareBucket(ctx, js, jetstream.KeyValueConfig{
		Bucket: event.BucketSeeds, History: 1, Storage: jetstream.FileStorage, Replicas: replicas,
	})
	if err != nil {
		return fmt.Errorf("declare the seeds bucket: %w", err)
	}
	return nil
}

// declareBucket creates the bucket, or updates it only when it exists
// with another configuration: an update of an unchanged bucket still
// rewrites its stream's store, which races inside nats-server with
// consumers being created (see bus.declareStream).
func declareBucket(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := js.CreateKeyValue(ctx, cfg)
	if errors.Is(err, jetstream.ErrBucketExists) {
		return js.UpdateKeyValue(ctx, cfg)
	}
	return kv, err
}

// ErrNoSeed: the bucket holds no seed for the lottery's commitment.
var ErrNoSeed = errors.New("no seed stored for the lottery's commitment")

// SeedOf is the seed (lowercase hex) queue q's lottery l committed to: the
// catalog's once the draw revealed it (or a catalog written before seeds
// had a bucket of their own), else the bucket's. The caller checks it
// against the commitment (lottery.Reveal).
func SeedOf(ctx context.Context, js jetstream.JetStream, q string, l Lottery) (string, error) {
	if l.Seed != "" {
		return l.Seed, nil
	}
	kv, err := js.KeyValue(ctx, event.BucketSeeds)
	if err != nil {
		return "", fmt.Errorf("seed of %s: %w", q, err)
	}
	e, err := kv.Get(ctx, event.SeedKey(q, l.Commitment))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", fmt.Errorf("seed of %s (commitment %s): %w", q, l.Commitment, ErrNoSeed)
	}
	if err != nil {
		return "", fmt.Errorf("seed of %s: %w", q, err)
	}
	return string(e.Value()), nil
}

// Redacted is c as anyone but the drawing admitter may see it: a lottery's
// seed stays out until the draw reveals it — out of the admin API, out of
// the audit records on USHER_OPS.
func (c Config) Redacted() Config {
	if c.Lottery != nil && !c.Lottery.Drawn && c.Lottery.Seed != "" {
		l := *c.Lottery
		l.Seed = ""
		c.Lottery = &l
	}
	return c
}
