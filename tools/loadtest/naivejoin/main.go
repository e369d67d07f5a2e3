// Command naivejoin is the join path of the "naive prototype" usher was
// first measured against, kept as a second anchor for the joins goal:
// fiber → JetStream async publish, answered once the broker acks → a pull
// consumer → pipelined ZADD NX.
//
// It is what a join would cost with none of usher's guarantees beyond the
// stored event: no rate limit, no dedup of a double click before the
// publish (only the broker's by message id), no exact place in the answer
// (the stream sequence instead), no queue configuration, closing, proof of
// work or admission. scripts/bench-goals.sh runs it beside the gateway, on
// the same broker and Redis, under the same wrk load, so the joins' ratio
// can be read against what the shape of the path allows on this machine.
//
//	naivejoin -listen 127.0.0.1:18090 -nats nats://127.0.0.1:14222 -redis 127.0.0.1:16379
//
// Not a service: no settings beyond its flags, no health, no shutdown
// beyond the process's signal.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "naivejoin:", err)
		os.Exit(1)
	}
}

const (
	stream  = "NAIVE"
	subject = "naive.join"
	zkey    = "naive:{q}:line"
)

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("naivejoin", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:18090", "HTTP listen address")
	natsURL := fs.String("nats", nats.DefaultURL, "NATS URL")
	redisAddr := fs.String("redis", "127.0.0.1:6379", "Redis address")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stdout, nil))

	nc, err := nats.Connect(*natsURL)
	if err != nil {
		return fmt.Errorf("nats: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	rdb := redis.NewClient(&redis.Options{Addr: *redisAddr})
	defer rdb.Close()
	cons, err := emptyLine(ctx, js, rdb)
	if err != nil {
		return err
	}
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Post("/v1/queues/:q/tickets", join(js))

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return feedLine(ctx, cons, rdb) })
	g.Go(func() error {
		log.Info("naivejoin listening", "addr", *listen)
		return app.Listen(*listen)
	})
	g.Go(func() error {
		<-ctx.Done()
		return app.ShutdownWithTimeout(5 * time.Second)
	})
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// emptyLine starts each run from an empty stream and line, and returns
// the line's consumer of the stream.
func emptyLine(ctx context.Context, js jetstream.JetStream, rdb *redis.Client) (jetstream.Consumer, error) {
	_ = js.DeleteStream(ctx, stream)
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{subject}, Storage: jetstream.FileStorage})
	if err != nil {
		return nil, fmt.Errorf("stream: %w", err)
	}
	cons, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "line", AckPolicy: jetstream.AckAllPolicy})
	if err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	if err := rdb.Del(ctx, zkey).Err(); err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	return cons, nil
}

// join publishes a join and answers 202 with its stream sequence once the
// broker acks it; the message id (queue/user) makes a double click the
// broker's duplicate.
func join(js jetstream.JetStream) fiber.Handler {
	return func(c *fiber.Ctx) error {
		user := c.Get("X-User-Id")
		if user == "" {
			return fiber.NewError(fiber.StatusUnauthorized, "X-User-Id missing")
		}
		body := `{"queue":"` + c.Params("q") + `","user":"` + user + `","at":"` + time.Now().UTC().Format(time.RFC3339Nano) + `"}`
		f, err := js.PublishAsync(subject, []byte(body), jetstream.WithMsgID(c.Params("q")+"/"+user))
		if err != nil {
			return fiber.NewError(fiber.StatusServiceUnavailable, err.Error())
		}
		select {
		case ack := <-f.Ok():
			return c.Status(fiber.StatusAccepted).JSON(fiber.Map{"seq": ack.Sequence})
		case err := <-f.Err():
			return fiber.NewError(fiber.StatusServiceUnavailable, err.Error())
		case <-c.Context().Done():
			return fiber.NewError(fiber.StatusServiceUnavailable, "shutting down")
		}
	}
}

// feedLine is the line: what the consumer has delivered goes to Redis as
// one pipeline of ZADD NX (score = stream sequence), then is acked as a
// whole (AckAll on its last message). One long-lived pull, so an idle
// prototype costs the broker nothing beside the stack.
func feedLine(ctx context.Context, cons jetstream.Consumer, rdb *redis.Client) error {
	msgs := make(chan jetstream.Msg, 1024)
	cc, err := cons.Consume(func(m jetstream.Msg) { msgs <- m }, jetstream.PullMaxMessages(512))
	if err != nil {
		return fmt.Errorf("consume: %w", err)
	}
	defer cc.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-msgs:
			if err := placeBatch(ctx, rdb, m, msgs); err != nil {
				return err
			}
		}
	}
}

// placeBatch adds first, and up to 511 more messages already delivered,
// to the line in one pipeline, then acks them all.
func placeBatch(ctx context.Context, rdb *redis.Client, first jetstream.Msg, msgs <-chan jetstream.Msg) error {
	pipe := rdb.Pipeline()
	var last jetstream.Msg
	for m := first; m != nil; {
		md, err := m.Metadata()
		if err != nil {
			return err
		}
		pipe.ZAddNX(ctx, zkey, redis.Z{Score: float64(md.Sequence.Stream), Member: m.Headers().Get(jetstream.MsgIDHeader)})
		last, m = m, nil
		if pipe.Len() < 512 {
			select {
			case m = <-msgs:
			default:
			}
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("zadd: %w", err)
	}
	if err := last.Ack(); err != nil {
		return fmt.Errorf("ack: %w", err)
	}
	return nil
}
