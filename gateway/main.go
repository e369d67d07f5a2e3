// Command gateway is usher's HTTP API: shoppers join a queue and poll their
// place, ops configure queues, downstream services fetch the JWKS.
//
// It publishes every join and leave to JetStream and answers once the broker
// has stored the event; it never waits on downstream work.
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
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}
