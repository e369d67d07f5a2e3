// Command orderworker turns entry tokens into orders: it redeems each
// token once, takes the stock and records the order in PostgreSQL in short
// single-statement transactions, pays through the payment gateway behind a
// circuit breaker (outside any transaction), publishes the outcome and
// frees the shopper's admission slot so the next one is let in.
//
// Several workers share the USHER_ORDERS work; a crash anywhere is
// finished by redelivery, exactly once: no double stock decrement, no
// double charge (the payment's idempotency key is the order id).
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
