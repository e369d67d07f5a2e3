package e2e

import (
	"context"
	"net/url"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"usher/internal/redisacl"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
)

// The whole journey with every store locked down as make run locks it:
// the broker with each service's NKey, Redis with each service's ACL user
// (usherctl redis-acl; every service finds its password in the data
// folder, the default user is off) and PostgreSQL with the schema owned by
// a role that migrated it (usherctl migrate) and each service connected as
// its own role. A shopper joins, gets READY pushed and polled, orders and
// pays; restocking works; and neither Redis nor PostgreSQL refused the
// services anything, while each connection was made as the service's own
// user.
func TestJourneyOnLockedDownStores(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	data := t.TempDir()
	usherctl := func(env []string, args ...string) {
		t.Helper()
		cmd := exec.Command(filepath.Join(bins, "usherctl"), args...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("usherctl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	natsDir := filepath.Join(data, "nats")
	usherctl(nil, "nats-auth", "--dir", natsDir, "--base", "../../nats.conf", "--downstream", "example-downstream")
	natsURL := testenv.NATSFromConfig(t, filepath.Join(natsDir, "nats.conf"), &testenv.NATSLog{}).ClientURL()

	redisDir := waitqueue.DefaultPasswordDir(data)
	usherctl(nil, "redis-acl", "--dir", redisDir)
	redisURL, _ := testenv.RedisServerWith(t, "--aclfile", filepath.Join(redisDir, redisacl.AuthFile))
	admin, err := waitqueue.Connect(ctx, waitqueue.Settings{URL: redisURL, Pool: 2, User: redisacl.Admin,
		Password: waitqueue.PasswordFile(redisacl.PasswordFile(redisDir, redisacl.Admin))})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()

	// PostgreSQL as a DBA sets it up: an owner that is no superuser, and a
	// login role in each service's group role.
	super := testenv.PostgresURL(t)
	su, _ := url.Parse(super)
	db := strings.TrimPrefix(su.Path, "/")
	suffix := strings.TrimPrefix(db, "t_")
	roleURL := func(role string) string {
		u := *su
		u.User = url.User(role)
		return u.String()
	}
	conn, err := pgx.Connect(ctx, super)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	logins := map[string]string{"gateway": "gw_" + suffix, "admitter": "ad_" + suffix, "orderworker": "ow_" + suffix}
	owner := "own_" + suffix
	for _, stmt := range []string{
		`DO $$ BEGIN
		   CREATE ROLE usher_orderworker NOLOGIN; CREATE ROLE usher_gateway NOLOGIN; CREATE ROLE usher_admitter NOLOGIN;
		 EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$`,
		"CREATE ROLE " + pgx.Identifier{owner}.Sanitize() + " LOGIN",
		"ALTER DATABASE " + pgx.Identifier{db}.Sanitize() + " OWNER TO " + pgx.Identifier{owner}.Sanitize(),
		"CREATE ROLE " + pgx.Identifier{logins["gateway"]}.Sanitize() + " LOGIN IN ROLE usher_gateway",
		"CREATE ROLE " + pgx.Identifier{logins["admitter"]}.Sanitize() + " LOGIN IN ROLE usher_admitter",
		"CREATE ROLE " + pgx.Identifier{logins["orderworker"]}.Sanitize() + " LOGIN IN ROLE usher_orderworker",
	} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	usherctl([]string{"USHER_DATABASE_MIGRATE_URL=" + roleURL(owner)}, "migrate")

	gw, adm, nt, ow, pg := addr(t), addr(t), addr(t), addr(t), addr(t)
	env := map[string]string{
		"USHER_NATS_URL":         natsURL,
		"USHER_REDIS_URL":        redisURL,
		"USHER_DATA_DIR":         data, // NKeys and Redis passwords, as make run keeps them
		"USHER_GATEWAY_ADDR":     gw,
		"USHER_ADMITTER_ADDR":    adm,
		"USHER_NOTIFIER_ADDR":    nt,
		"USHER_ORDERWORKER_ADDR": ow,
		"USHER_PAYMENT_URL":      "http://" + pg,
		"PGSIM_ADDR":             pg,
		"PGSIM_LATENCY_MEAN_MS":  "5",
		"USHER_ADMIN_TOKEN":      "e2e-admin",
	}
	as := func(service string) map[string]string {
		m := map[string]string{}
		for k, v := range env {
			m[k] = v
		}
		if login, ok := logins[service]; ok {
			m["USHER_DATABASE_URL"] = roleURL(login)
		}
		return m
	}
	// The admitter starts last: the others wait for the streams it declares.
	for _, name := range []string{"pgsim", "gateway", "notifier", "orderworker", "admitter"} {
		start(t, name, as(name))
	}
	base := "http://" + gw
	waitReady(t, 30*time.Second, base, "http://"+adm, "http://"+nt, "http://"+ow)
	q := oneSlotQueue(t, base)
	tk := joinLine(t, base, q, "ann")
	openTab(t, "http://"+nt+"/v1/queues/"+q+"/tickets/"+tk+"/events").await(t, "ready", 15*time.Second)
	var token string
	testenv.Eventually(t, 10*time.Second, func() bool {
		_, body := call(t, "GET", base+"/v1/queues/"+q+"/tickets/"+tk, "", nil)
		token, _ = body["token"].(string)
		return body["status"] == "READY"
	}, "ann READY")
	orderPaid(t, base, "ann", token)

	// Redis refused nothing, and every service connected as its own user.
	if denied, err := admin.Do(ctx, "ACL", "LOG").Slice(); err != nil || len(denied) > 0 {
		t.Errorf("Redis ACL LOG = %v, %v; want nothing refused", denied, err)
	}
	clients, err := admin.Do(ctx, "CLIENT", "LIST").Text()
	if err != nil {
		t.Fatal(err)
	}
	for _, svc := range []string{"gateway", "admitter", "notifier", "orderworker"} {
		if !strings.Contains(clients, "user="+redisacl.UserOf(svc)+" ") {
			t.Errorf("no Redis connection as %s:\n%s", redisacl.UserOf(svc), clients)
		}
	}
	if strings.Contains(clients, "user=default ") {
		t.Errorf("a connection as Redis's default user:\n%s", clients)
	}
	// PostgreSQL: the services' connections are their roles', none owns.
	rows, err := conn.Query(ctx, `SELECT DISTINCT usename::text FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, db)
	if err != nil {
		t.Fatal(err)
	}
	users, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(users)
	want := []string{logins["admitter"], logins["gateway"], logins["orderworker"]}
	sort.Strings(want)
	if strings.Join(users, ",") != strings.Join(want, ",") {
		t.Errorf("PostgreSQL connections of the services as %v, want exactly %v", users, want)
	}
}
