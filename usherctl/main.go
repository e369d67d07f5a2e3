// Command usherctl is the ops tool of usher: it configures queues through the
// gateway's admin API, replays the event streams, rebuilds a queue's Redis
// state from them after a loss, audits from them alone that a line was
// fair and reports what a drop did; it also migrates the PostgreSQL schema
// and writes the Redis and NATS credentials.
//
// Usage:
//
//	usherctl queue create|set|get|list|pause|resume|close|delete [flags] [QUEUE]
//	usherctl replay --stream entries|admissions|orders|ops --queue Q [flags]
//	usherctl rebuild --queue Q [--force] [--dry-run]
//	usherctl audit --queue Q [--show N] [--lottery-list FILE]
//	usherctl report --queue Q [--since DURATION|RFC3339] [--out FILE] [--json FILE]
//	usherctl migrate
//	usherctl redis-acl --dir DIR
//	usherctl nats-auth --dir DIR [--base nats.conf] [--keys DIR [--key-dirs]] [--downstream NAME,...]
//
// It reads the same environment as the services: USHER_NATS_URL,
// USHER_REDIS_URL, USHER_ADMIN_TOKEN, USHER_DATA_DIR (where its NATS key
// and Redis password are, default .usher under the current directory), and
// USHER_GATEWAY_URL for the admin API (default http://127.0.0.1:8080). Exit status: 0 on success, 1 on a
// failure or (audit) a violation found, 2 on a usage error.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	code := exitCode(err)
	if err != nil && !errors.Is(err, errViolations) { // audit printed its verdict
		fmt.Fprintln(os.Stderr, "usherctl:", err)
	}
	os.Exit(code)
}
