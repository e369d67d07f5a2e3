package orders

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

//go:embed migrations/*.sql
var migrations embed.FS

// migrationLock is the advisory lock key under which migrations run, so
// that services starting side by side apply each one exactly once.
const migrationLock = 0x75736865720001

// ErrSchemaBehind says the schema lacks a migration that the connected
// role may not apply: the schema's owner must migrate first (usherctl
// migrate, with USHER_DATABASE_MIGRATE_URL).
var ErrSchemaBehind = errors.New("the database schema is behind and this role may not change it: run `usherctl migrate` as the schema's owner (USHER_DATABASE_MIGRATE_URL) first")

// migration is one embedded migration file.
type migration struct {
	version int
	name    string
	sql     string
}

// recordApplied writes a migration's bookkeeping row (0 rows: it was
// applied before).
const recordApplied = "INSERT INTO schema_migrations (version, name) VALUES ($1, $2) ON CONFLICT DO NOTHING"

// noTransaction, as a migration's first line, runs its statements one by
// one outside any transaction — for CREATE INDEX CONCURRENTLY, which
// PostgreSQL refuses inside one. Each of its statements ends with ";" at
// the end of an unindented line (what a statement holds inside, a DO
// block's body, is indented), and each must be safe to run again: a
// migration interrupted midway is run again from its start.
const noTransaction = "-- usher:no-transaction"

// statements splits a no-transaction migration into its statements.
func (m migration) statements() []string {
	var out []string
	var cur strings.Builder
	for line := range strings.Lines(m.sql) {
		cur.WriteString(line)
		if indented := strings.HasPrefix(line, " ") || strings.HasPrefix(line, "\t"); !indented && strings.HasSuffix(strings.TrimSpace(line), ";") {
			out = append(out, cur.String())
			cur.Reset()
		}
	}
	if strings.TrimSpace(cur.String()) != "" {
		out = append(out, cur.String())
	}
	return out
}

func embedded() ([]migration, error) {
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var out []migration
	for _, name := range names {
		base := strings.TrimPrefix(name, "migrations/")
		version, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
		if err != nil {
			return nil, fmt.Errorf("migration %s: name must start with its version number", base)
		}
		sql, err := migrations.ReadFile(name)
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version, base, string(sql)})
	}
	return out, nil
}

// Migrate brings the schema up to date: it applies every embedded
// migration not applied yet, in file-name order, each in its own
// transaction together with its bookkeeping row, under an advisory lock
// (one marked noTransaction: statement by statement, its row written once
// all of them succeeded).
//
// It changes nothing that is current: when every migration is applied it
// returns after one read, taking no lock and creating nothing — so a
// service connected as a role that may only use the tables (see
// migrations/0003_roles.sql) starts on a migrated database, and on one that
// is behind fails with ErrSchemaBehind instead of half-migrating.
func (s *Store) Migrate(ctx context.Context) error {
	all, err := embedded()
	if err != nil {
		return err
	}
	if current, err := s.current(ctx, all); err == nil && current {
		return nil
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer conn.Release()
	if err := lockMigrations(ctx, conn.Conn()); err != nil {
		return fmt.Errorf("migrate: lock: %w", err)
	}
	defer conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", migrationLock)
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("migrate: %w", behind(err))
	}
	for _, m := range all {
		if strings.HasPrefix(m.sql, noTransaction+"\n") {
			if err := applyOutsideATransaction(ctx, conn.Conn(), m); err != nil {
				return fmt.Errorf("migration %s: %w", m.name, behind(err))
			}
			continue
		}
		err = pgx.BeginFunc(ctx, conn.Conn(), func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, recordApplied, m.version, m.name)
			if err != nil || tag.RowsAffected() == 0 {
				return err // applied before
			}
			_, err = tx.Exec(ctx, m.sql)
			return err
		})
		if err != nil {
			return fmt.Errorf("migration %s: %w", m.name, behind(err))
		}
	}
	return nil
}

// lockMigrations takes the migration lock, asking again every 100 ms
// rather than waiting inside PostgreSQL: a CREATE INDEX CONCURRENTLY that
// the holder runs waits for every transaction in progress to end, and a
// session blocked in pg_advisory_lock is one that never would (PostgreSQL
// reports the deadlock and fails one of them: services starting side by
// side did).
func lockMigrations(ctx context.Context, conn *pgx.Conn) error {
	for {
		var got bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", migrationLock).Scan(&got); err != nil || got {
			return err
		}
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// applyOutsideATransaction applies m statement by statement unless its
// bookkeeping row says it was applied, then writes the row.
func applyOutsideATransaction(ctx context.Context, conn *pgx.Conn, m migration) error {
	var applied bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = $1)", m.version).Scan(&applied); err != nil || applied {
		return err
	}
	for _, st := range m.statements() {
		if _, err := conn.Exec(ctx, st); err != nil {
			return err
		}
	}
	_, err := conn.Exec(ctx, recordApplied, m.version, m.name)
	return err
}

// current reports whether every migration in all is applied.
func (s *Store) current(ctx context.Context, all []migration) (bool, error) {
	var exists bool
	if err := s.pool.QueryRow(ctx, `SELECT to_regclass('schema_migrations') IS NOT NULL`).Scan(&exists); err != nil || !exists {
		return false, err
	}
	rows, err := s.pool.Query(ctx, `SELECT version FROM schema_migrations`)
	if err != nil {
		return false, err
	}
	applied, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return false, err
	}
	have := map[int]bool{}
	for _, v := range applied {
		have[int(v)] = true
	}
	for _, m := range all {
		if !have[m.version] {
			return false, nil
		}
	}
	return true, nil
}

// behind marks a refusal for want of privilege (SQLSTATE 42501: permission
// denied, must be owner) as ErrSchemaBehind.
func behind(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42501" {
		return fmt.Errorf("%w (%s)", ErrSchemaBehind, pe.Message)
	}
	return err
}
