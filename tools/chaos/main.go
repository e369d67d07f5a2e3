// Command chaos is usher's fault-injection harness. It starts what
// production has on loopback — a 3-node NATS JetStream cluster, a Redis
// Cluster of 3 masters and 3 replicas, PostgreSQL, the payment simulator
// and two of every service — drives shoppers through it, injects one fault
// per scenario (kill -9, SIGSTOP, a NATS leader's death, partition or full
// store, a Redis failover or reshard, lost or flushed Redis data, payment
// outages, a PostgreSQL crash, network partitions, a skewed or jumping
// clock), lets the system settle and checks usher's
// invariants from independent records: the load client's journal, the
// JetStream streams, Redis, PostgreSQL and the payment simulator's ledger.
//
//	go run ./tools/chaos -list
//	go run ./tools/chaos -scenario kill-admitter -seed 7
//	go run ./tools/chaos -all -reliability RELIABILITY.md
//
// The seed drives every random choice (which process, which queue, the
// crowd's behaviour), so a failing scenario reruns with the command it
// prints.
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
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(exitCode(err))
	}
}
