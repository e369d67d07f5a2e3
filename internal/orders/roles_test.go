package orders_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"usher/internal/orders"
	"usher/internal/testenv"
)

// roles is a database migrated by an owner that is no superuser, and a URL
// per service role, each a login role that is a member of the service's
// group role (as a DBA would set them up).
type roles struct {
	super, owner, worker, gateway, admitter string
}

func setUpRoles(t *testing.T) roles {
	t.Helper()
	ctx := context.Background()
	super := testenv.PostgresURL(t)
	conn, err := pgx.Connect(ctx, super)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	u, _ := url.Parse(super)
	db := strings.TrimPrefix(u.Path, "/")
	suffix := strings.TrimPrefix(db, "t_")
	as := func(role string) string {
		v := *u
		v.User = url.User(role)
		return v.String()
	}
	r := roles{super: super}
	// What a DBA does once: the owner, the service roles, their logins.
	stmts := []string{
		`DO $$ BEGIN
		   CREATE ROLE usher_orderworker NOLOGIN; CREATE ROLE usher_gateway NOLOGIN; CREATE ROLE usher_admitter NOLOGIN;
		 EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$`,
		"CREATE ROLE " + pgx.Identifier{"own_" + suffix}.Sanitize() + " LOGIN",
		"ALTER DATABASE " + pgx.Identifier{db}.Sanitize() + " OWNER TO " + pgx.Identifier{"own_" + suffix}.Sanitize(),
		"CREATE ROLE " + pgx.Identifier{"ow_" + suffix}.Sanitize() + " LOGIN IN ROLE usher_orderworker",
		"CREATE ROLE " + pgx.Identifier{"gw_" + suffix}.Sanitize() + " LOGIN IN ROLE usher_gateway",
		"CREATE ROLE " + pgx.Identifier{"ad_" + suffix}.Sanitize() + " LOGIN IN ROLE usher_admitter",
	}
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	r.owner, r.worker, r.gateway, r.admitter = as("own_"+suffix), as("ow_"+suffix), as("gw_"+suffix), as("ad_"+suffix)
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), super) // before the database goes
		if err != nil {
			return
		}
		defer conn.Close(context.Background())
		for _, p := range []string{"ow_", "gw_", "ad_"} {
			conn.Exec(context.Background(), "DROP ROLE IF EXISTS "+pgx.Identifier{p + suffix}.Sanitize())
		}
	})
	own := open(t, r.owner)
	if err := own.Migrate(ctx); err != nil {
		t.Fatalf("Migrate as the owner = %v", err)
	}
	return r
}

func open(t *testing.T, url string) *orders.Store {
	t.Helper()
	s, err := orders.Open(url, orders.Options{MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// refused reports a refusal for want of privilege.
func refused(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42501"
}

// The order worker's role places, pays, fails and rejects orders, and can
// do nothing else: no DELETE, TRUNCATE, DROP, ALTER, CREATE or GRANT, no
// new SKU.
func TestTheOrderWorkersRoleDoesItsWorkAndNoMore(t *testing.T) {
	r := setUpRoles(t)
	ctx := context.Background()
	if _, err := open(t, r.gateway).SetStock(ctx, "sku", 3); err != nil {
		t.Fatalf("SetStock as the gateway = %v", err)
	}
	w := open(t, r.worker)
	if err := w.Migrate(ctx); err != nil {
		t.Fatalf("Migrate as the worker on a current schema = %v, want nil (nothing to do)", err)
	}
	paid, err := w.Place(ctx, order(1, "sku", 1))
	if err != nil || paid.Status != orders.Pending {
		t.Fatalf("Place = %+v, %v; want PENDING", paid, err)
	}
	if o, err := w.Pay(ctx, paid.ID, "pay_1"); err != nil || o.Status != orders.Paid {
		t.Fatalf("Pay = %+v, %v; want PAID", o, err)
	}
	failed, err := w.Place(ctx, order(2, "sku", 1))
	if err != nil {
		t.Fatal(err)
	}
	if o, err := w.Fail(ctx, failed.ID, orders.ReasonDeadline); err != nil || o.Status != orders.Failed {
		t.Fatalf("Fail = %+v, %v; want FAILED", o, err)
	}
	if o, err := w.Reject(ctx, order(3, "sku", 1), "token_expired"); err != nil || o.Status != orders.Rejected {
		t.Fatalf("Reject = %+v, %v; want REJECTED", o, err)
	}
	if _, found, err := w.Get(ctx, paid.ID); err != nil || !found {
		t.Fatalf("Get = %v, %v", found, err)
	}
	if _, err := w.SetStock(ctx, "new-sku", 5); !refused(err) {
		t.Errorf("SetStock as the worker = %v, want refused", err)
	}

	conn, err := pgx.Connect(ctx, r.worker)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, stmt := range []string{
		"DELETE FROM orders", "DELETE FROM stock", "TRUNCATE orders", "TRUNCATE stock",
		"DROP TABLE orders", "DROP TABLE stock", "ALTER TABLE orders ADD COLUMN x int",
		"ALTER TABLE stock DROP CONSTRAINT stock_available_check", "CREATE TABLE evil (x int)",
		"INSERT INTO stock (sku, available) VALUES ('free', 1000000)",
		"UPDATE schema_migrations SET name = 'x'", "DELETE FROM schema_migrations",
		"CREATE INDEX ON orders (user_id)", "CREATE SCHEMA evil", "ALTER ROLE CURRENT_USER CREATEROLE",
	} {
		if _, err := conn.Exec(ctx, stmt); !refused(err) {
			t.Errorf("as the worker: %s = %v, want refused", stmt, err)
		}
	}
	// A GRANT of what the role does not hold with grant option only warns;
	// what matters is that nothing was granted.
	conn.Exec(ctx, "GRANT ALL ON orders, stock TO PUBLIC")
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM information_schema.role_table_grants
		WHERE grantee = 'PUBLIC' AND table_name IN ('orders', 'stock')`).Scan(&n); err != nil || n != 0 {
		t.Errorf("privileges PUBLIC holds after the worker's GRANT = %d, %v; want none", n, err)
	}
}

// The gateway's role sets stock and nothing else; the admitter's reads it.
func TestTheStockRoles(t *testing.T) {
	r := setUpRoles(t)
	ctx := context.Background()
	gw := open(t, r.gateway)
	if _, err := gw.SetStock(ctx, "sku", 3); err != nil {
		t.Fatalf("SetStock as the gateway = %v", err)
	}
	if _, err := gw.Place(ctx, order(1, "sku", 1)); !refused(err) {
		t.Errorf("Place as the gateway = %v, want refused", err)
	}
	if sold, err := gw.Sold(ctx, "q"); err != nil || len(sold) != 0 {
		t.Errorf("Sold as the gateway = %v, %v; want the (empty) sums of the sales view", sold, err)
	}
	ad := open(t, r.admitter)
	if st, err := ad.Stocks(ctx, []string{"sku"}); err != nil || len(st) != 1 || st[0].Available != 3 {
		t.Fatalf("Stocks as the admitter = %+v, %v; want 3 of sku", st, err)
	}
	if _, err := ad.SetStock(ctx, "sku", 1000); !refused(err) {
		t.Errorf("SetStock as the admitter = %v, want refused", err)
	}
	for name, url := range map[string]string{"gateway": r.gateway, "admitter": r.admitter} {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		for _, stmt := range []string{"SELECT count(*) FROM orders", "DELETE FROM stock", "TRUNCATE stock", "DROP TABLE stock"} {
			if _, err := conn.Exec(ctx, stmt); !refused(err) {
				t.Errorf("as the %s: %s = %v, want refused", name, stmt, err)
			}
		}
		conn.Close(ctx)
	}
}

// A service role on a database whose schema is behind does not half-migrate:
// it fails with ErrSchemaBehind, which says what to run.
func TestAServiceRoleDoesNotMigrate(t *testing.T) {
	r := setUpRoles(t)
	ctx := context.Background()
	// A second, empty database of the same owner, never migrated.
	fu, _ := url.Parse(testenv.PostgresURL(t))
	wu, _ := url.Parse(r.worker)
	wu.Path = fu.Path
	err := open(t, wu.String()).Migrate(ctx)
	if !errors.Is(err, orders.ErrSchemaBehind) || !strings.Contains(err.Error(), "usherctl migrate") {
		t.Fatalf("Migrate as the worker on an empty database = %v, want ErrSchemaBehind", err)
	}
}
