// Command admitter moves joined shoppers from JetStream into the Redis line
// and, every tick of every queue, admits as many as the downstream can take.
//
// Admissions are written to an outbox in the same atomic step that takes
// the shoppers out of line, and published to USHER_ADMISSIONS from there, so
// a crash between the two loses nothing. Several admitters may run at once:
// the admission script is the single point of truth.
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
		fmt.Fprintln(os.Stderr, "admitter:", err)
		os.Exit(1)
	}
}
