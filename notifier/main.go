// Command notifier pushes each waiting shopper's place and their READY over
// Server-Sent Events, so that a shopper learns their turn the moment it
// comes instead of at their next poll.
//
//	GET /v1/queues/{queue}/tickets/{ticket}/events
//
// The stream is authenticated by the ticket alone. Events: position (when it
// changes, at most once a second), ready (at readyAt, never before), expired
// and closed; each with an id, after a retry hint, with a heartbeat comment
// every 15 s. The first event is the current state, read afresh from Redis,
// so a reconnection, a restarted notifier or one that was down when the
// admission happened still delivers READY. See hub.go for how positions are
// computed in bulk and stream.go for the connection's loop.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Getenv, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "notifier:", err)
		os.Exit(1)
	}
}
