package main

import (
	"context"
	"fmt"
	"net/url"

	"usher/internal/config"
	"usher/internal/orders"
)

const migrateSynopsis = `usherctl migrate

Brings the PostgreSQL schema up to date, as the role that owns it:
USHER_DATABASE_MIGRATE_URL (default USHER_DATABASE_URL). The services
connect as roles that may only use the tables (usher_orderworker,
usher_gateway, usher_admitter: see internal/orders/migrations/0003_roles.sql)
and never migrate; run this before starting them on a new release. It is
idempotent and safe to run while the services work.`

func (c *cli) migrate(ctx context.Context, args []string) error {
	fs := newFlags("migrate", migrateSynopsis)
	pos, err := c.parse(fs, args)
	if err != nil {
		return done(err)
	}
	if len(pos) > 0 {
		return usagef("migrate: unexpected arguments %q", pos)
	}
	env := config.New(c.getenv)
	u := env.String("USHER_DATABASE_MIGRATE_URL", env.String("USHER_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/usher?sslmode=disable"))
	if err := env.Err(); err != nil {
		return err
	}
	db, err := orders.Open(u, orders.Options{MaxConns: 2})
	if err != nil {
		return err
	}
	defer db.Close()
	if err := db.Migrate(ctx); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "database schema up to date (%s)\n", redactDB(u))
	return nil
}

// redactDB is a database URL without its password.
func redactDB(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparsable URL)"
	}
	return p.Redacted()
}
