// Command orderworker redeems entry tokens and turns them into orders:
// one order per token, stock in PostgreSQL, payment behind a circuit breaker.
//
// This first version serves only its operational endpoints; the order
// path is the orders issue's work.
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
		fmt.Fprintln(os.Stderr, "orderworker:", err)
		os.Exit(1)
	}
}
