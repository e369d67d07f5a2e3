package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"usher/internal/bus"
	"usher/internal/event"
)

// dropEvents is what the event log says of a drop: the PAID orders
// (usher.order.completed.v1 on USHER_ORDERS) and the sold-out close (the
// admitter's usher.ops.config_changed.v1 on USHER_OPS). Times are the
// CloudEvents time, the publisher's clock as it published.
type dropEvents struct {
	paid     int
	lastPaid time.Time
	closed   time.Time
}

// readDropEvents reads queue q's PAID orders and its sold-out close
// recorded since since, over loopback NATS (nkey: a seed file for a broker
// with authentication — make run's .usher/nats/usherctl.nk).
func readDropEvents(ctx context.Context, natsURL, nkey, q string, since time.Time) (dropEvents, error) {
	var out dropEvents
	if err := loopbackOnly(natsURL); err != nil {
		return out, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	opts := []nats.Option{nats.Name("loadtest"), nats.Timeout(5 * time.Second)}
	if nkey != "" {
		o, err := nats.NkeyOptionFromSeed(nkey)
		if err != nil {
			return out, err
		}
		// make run's usherctl key reads every stream; its replies come
		// to its own inbox only.
		opts = append(opts, o, nats.CustomInboxPrefix(bus.Usherctl.Inbox()))
	}
	nc, err := nats.Connect(natsURL, opts...)
	if err != nil {
		return out, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return out, err
	}
	err = eachEvent(ctx, js, event.StreamOrders, event.OrderCompletedSubject(q), since, func(env event.Envelope) {
		out.paid++
		if env.Time.After(out.lastPaid) {
			out.lastPaid = env.Time
		}
	})
	if err != nil {
		return out, fmt.Errorf("%s: %w", event.StreamOrders, err)
	}
	err = eachEvent(ctx, js, event.StreamOps, event.ConfigChangedSubject, since, func(env event.Envelope) {
		var c struct {
			Queue  string `json:"queue"`
			Config struct {
				State        string `json:"state"`
				ClosedReason string `json:"closedReason"`
			} `json:"config"`
		}
		if json.Unmarshal(env.Data, &c) != nil || c.Queue != q || c.Config.State != "closed" || c.Config.ClosedReason != "sold_out" {
			return
		}
		if out.closed.IsZero() || env.Time.Before(out.closed) {
			out.closed = env.Time
		}
	})
	if err != nil {
		return out, fmt.Errorf("%s: %w", event.StreamOps, err)
	}
	return out, nil
}

// eachEvent calls fn with every envelope stored on subject in stream since
// since, read with batched direct gets: usherctl's key may create no
// consumer.
func eachEvent(ctx context.Context, js jetstream.JetStream, stream, subject string, since time.Time, fn func(event.Envelope)) error {
	req := bus.GetRequest{Subject: subject, Batch: 1000}
	if !since.IsZero() {
		start := since.Add(-time.Second)
		req.StartTime = &start
	}
	for ctx.Err() == nil {
		end, err := bus.Get(ctx, js.Conn(), stream, req, func(m bus.Stored) error {
			var env event.Envelope
			if json.Unmarshal(m.Data, &env) == nil {
				fn(env)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if end.Last == 0 || end.Pending == 0 {
			return nil
		}
		req.Seq, req.StartTime = end.Last+1, nil
	}
	return ctx.Err()
}

// loopbackOnly refuses a NATS URL beyond loopback.
func loopbackOnly(raw string) error {
	u, err := url.Parse(raw)
	if err == nil {
		_, err = newClient("http://"+u.Host, "", 1)
	}
	if err != nil {
		return fmt.Errorf("-nats %q: the load tool only reads a loopback broker", raw)
	}
	return nil
}
