package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"usher/internal/config"
	"usher/internal/event"
)

// The durable consumers are declared by the role that declares the
// streams, the admitter, and only bound by the roles that read through
// them: the order workers' on USHER_ORDERS and each downstream reader's on
// USHER_ADMISSIONS. No other role may create a consumer, because
// nats-server lets whoever may create one create a push consumer
// delivering on any subject, its creator's permissions unchecked (see
// Policy.Permissions).

// Durable is a durable consumer: the stream it reads and how.
type Durable struct {
	Stream string
	Config jetstream.ConsumerConfig
}

// OrderWork is how the order workers' shared durable consumer hands out
// order requests.
type OrderWork struct {
	// AckWait: an order request not acknowledged within it is delivered
	// again (USHER_ORDER_ACK_WAIT). A worker says it is still working
	// every third of it.
	AckWait time.Duration
	// MaxAckPending bounds the order requests handed out and not yet
	// acknowledged, across every worker (USHER_ORDER_MAX_ACK_PENDING).
	MaxAckPending int
}

// MinOrderAckWait is the shortest USHER_ORDER_ACK_WAIT: a worker tells
// the broker it is still working every third of it.
const MinOrderAckWait = time.Second

// LoadOrderWork reads USHER_ORDER_ACK_WAIT (default 30s) and
// USHER_ORDER_MAX_ACK_PENDING (default 2048: four order workers' worth of
// 512 orders in flight each).
func LoadOrderWork(env *config.Env) OrderWork {
	w := OrderWork{
		AckWait:       env.Duration("USHER_ORDER_ACK_WAIT", 30*time.Second),
		MaxAckPending: env.Int("USHER_ORDER_MAX_ACK_PENDING", 2048, 1),
	}
	if w.AckWait < MinOrderAckWait {
		env.Check(fmt.Errorf("USHER_ORDER_ACK_WAIT=%s: want at least %s", w.AckWait, MinOrderAckWait))
		w.AckWait = MinOrderAckWait
	}
	return w
}

// LoadPolicy reads USHER_DOWNSTREAM_READERS, the downstream readers' names
// (comma-separated): `usherctl nats-auth` gives each a key and
// permissions, and the admitter declares each a durable consumer.
func LoadPolicy(env *config.Env) Policy {
	p := Policy{Downstream: env.List("USHER_DOWNSTREAM_READERS", "")}
	if err := p.Validate(); err != nil {
		env.Check(fmt.Errorf("USHER_DOWNSTREAM_READERS: %w", err))
		return Policy{}
	}
	return p
}

// OrderWorkerDurable is the durable consumer every order worker shares:
// the order requests of every queue, split among the workers (a work
// queue), each redelivered until a worker acknowledges it.
func OrderWorkerDurable(w OrderWork) Durable {
	return Durable{Stream: event.StreamOrders, Config: jetstream.ConsumerConfig{
		Durable:       event.ConsumerOrderWorker,
		FilterSubject: event.OrderRequestedSubject(event.All),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       w.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: w.MaxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}}
}

// DownstreamDurable is downstream reader name's durable consumer, also
// called name: every admission, of every queue, from the first the stream
// holds, each acknowledged by the reader.
func DownstreamDurable(name string) Durable {
	return Durable{Stream: event.StreamAdmissions, Config: jetstream.ConsumerConfig{
		Durable:       name,
		FilterSubject: event.AdmittedSubject(event.All),
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}}
}

// Durables are the durable consumers of the policy: the order workers' and
// each downstream reader's.
func (p Policy) Durables(w OrderWork) []Durable {
	ds := []Durable{OrderWorkerDurable(w)}
	for _, name := range p.Downstream {
		ds = append(ds, DownstreamDurable(name))
	}
	return ds
}

// EnsureDurables creates or updates each durable consumer.
func EnsureDurables(ctx context.Context, js jetstream.JetStream, ds []Durable) error {
	for _, d := range ds {
		if _, err := js.CreateOrUpdateConsumer(ctx, d.Stream, d.Config); err != nil {
			return fmt.Errorf("declare consumer %s on %s: %w", d.Config.Durable, d.Stream, err)
		}
	}
	return nil
}

// BindDurable returns durable consumer name on stream once it exists, as
// the admitter declares it, looking twice a second and telling log every
// ten seconds that it still waits (log may be nil). It creates and changes
// nothing. It returns ctx's error when ctx ends first, and at once an
// error no wait will cure (the broker refusing the lookup).
func BindDurable(ctx context.Context, js jetstream.JetStream, stream, name string, log *slog.Logger) (jetstream.Consumer, error) {
	start := time.Now()
	lastSaid := start
	for {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		cons, err := js.Consumer(lctx, stream, name)
		cancel()
		switch {
		case err == nil:
			return cons, nil
		case ctx.Err() != nil:
			return nil, fmt.Errorf("waiting for consumer %s on %s: %w", name, stream, ctx.Err())
		case permanent(err):
			return nil, fmt.Errorf("consumer %s on %s: %w", name, stream, err)
		case !errors.Is(err, jetstream.ErrConsumerNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound) && log != nil:
			log.Debug("look up the durable consumer", "consumer", name, "stream", stream, "err", err)
		}
		if log != nil && time.Since(lastSaid) >= 10*time.Second {
			lastSaid = time.Now()
			log.Warn("waiting for the durable consumer: the admitter declares it", "consumer", name, "stream", stream,
				"for", time.Since(start).Round(time.Second).String())
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for consumer %s on %s: %w", name, stream, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}
