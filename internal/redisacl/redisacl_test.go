package redisacl_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"usher/internal/config"
	"usher/internal/orders"
	"usher/internal/paybreaker"
	"usher/internal/ratelimit"
	"usher/internal/redisacl"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/admission"
	"usher/internal/waitqueue/claims"
	"usher/internal/waitqueue/drop"
	"usher/internal/waitqueue/line"
	"usher/internal/waitqueue/projection"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Stop()
	os.Exit(code)
}

// Write makes each password once and keeps it; the ACL file holds their
// hashes, never the passwords, and is readable by its owner only.
func TestWriteKeepsPasswordsAndHashesThem(t *testing.T) {
	dir := t.TempDir()
	created, err := redisacl.Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(created), len(redisacl.Users()); got != want {
		t.Fatalf("first Write created %d passwords, want %d", got, want)
	}
	before := map[string]string{}
	for _, u := range redisacl.Users() {
		b, err := os.ReadFile(redisacl.PasswordFile(dir, u.Name))
		if err != nil {
			t.Fatal(err)
		}
		before[u.Name] = strings.TrimSpace(string(b))
	}
	created, err = redisacl.Write(dir)
	if err != nil || len(created) != 0 {
		t.Fatalf("second Write = %v, %v; want nothing created", created, err)
	}
	acl, err := os.ReadFile(filepath.Join(dir, redisacl.AuthFile))
	if err != nil {
		t.Fatal(err)
	}
	for name, pw := range before {
		b, _ := os.ReadFile(redisacl.PasswordFile(dir, name))
		if got := strings.TrimSpace(string(b)); got != pw {
			t.Errorf("%s's password changed on the second Write", name)
		}
		if len(pw) < 32 || strings.Contains(string(acl), pw) {
			t.Errorf("%s's password is short (%d) or in the ACL file", name, len(pw))
		}
	}
	for _, f := range []string{redisacl.AuthFile, redisacl.Admin + ".pass"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s: mode %v, %v; want readable by its owner only", f, st.Mode(), err)
		}
	}
	if !strings.HasPrefix(string(acl), "user default reset off\n") {
		t.Errorf("the ACL file does not start by turning the default user off:\n%s", acl)
	}
}

// callRE finds the commands Lua scripts call.
var callRE = regexp.MustCompile(`redis\.call\(\s*['"]([A-Za-z]+)['"]`)

// Every command any script in the code calls — in a .lua file, or a Go
// string — is granted to every user that runs usher's scripts (a script
// the line gains with a new command fails here, not in production with
// NOPERM).
func TestEveryScriptCommandIsGranted(t *testing.T) {
	seen, files := 0, 0
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		code := strings.HasSuffix(path, ".lua") || (strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go"))
		if err != nil || d.IsDir() || !code || strings.Contains(path, "/chaos/") || strings.Contains(path, "/testenv/") {
			return err
		}
		if strings.HasSuffix(path, ".lua") {
			files++
		}
		b, err := os.ReadFile(path)
		for _, m := range callRE.FindAllSubmatch(b, -1) {
			seen++
			cmd := strings.ToLower(string(m[1]))
			for _, u := range redisacl.Users() {
				if u.Name != redisacl.UserOf(redisacl.Notifier) && !u.Allows(cmd) {
					t.Errorf("%s calls %s from a script; %s may not (add it to redisacl's lists)", path, strings.ToUpper(cmd), u.Name)
				}
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 50 || files < 30 {
		t.Fatalf("found %d script calls in %d .lua files; the walk missed the scripts", seen, files)
	}
}

// acl is a redis-server loading the ACL file Write wrote, with the
// password files in dir.
type acl struct {
	url, dir string
	admin    redis.UniversalClient
}

func startACL(t *testing.T) acl {
	t.Helper()
	dir := t.TempDir()
	if _, err := redisacl.Write(dir); err != nil {
		t.Fatal(err)
	}
	url, _ := testenv.RedisServerWith(t, "--aclfile", filepath.Join(dir, redisacl.AuthFile))
	a := acl{url: url, dir: dir}
	a.admin = a.connect(t, redisacl.Admin)
	return a
}

// connect connects as user with its password file.
func (a acl) connect(t *testing.T, user string) redis.UniversalClient {
	t.Helper()
	rdb, err := waitqueue.Connect(context.Background(), waitqueue.Settings{
		URL: a.url, Pool: 4, User: user, Password: waitqueue.PasswordFile(redisacl.PasswordFile(a.dir, user)),
	})
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// denials returns the ACL log's entries since the last call, and resets it.
func (a acl) denials(t *testing.T) []string {
	t.Helper()
	ctx := context.Background()
	log, err := a.admin.Do(ctx, "ACL", "LOG").Slice()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range log {
		m, _ := e.(map[any]any)
		out = append(out, strings.Join([]string{str(m["username"]), str(m["reason"]), str(m["object"])}, " "))
	}
	if err := a.admin.Do(ctx, "ACL", "LOG", "RESET").Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func str(v any) string { s, _ := v.(string); return s }

// Each service's user does what that service does to Redis — through the
// same library calls — and the server logs no denial.
func TestEachServiceCanDoItsWork(t *testing.T) {
	a := startACL(t)
	// A refused call must fail the test, not hang it.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	must := func(t *testing.T, what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	q := testenv.Name(t)
	tick := waitqueue.Tick{TargetActive: 1, TickLength: 10 * time.Millisecond, TokenTTL: time.Minute}
	var admitted waitqueue.Admission

	// batched runs c's batcher, as the gateway, the notifier and the order
	// worker do (batching starts by loading the roles' per-request
	// scripts): build the roles on c first.
	batched := func(t *testing.T, c *waitqueue.Client) {
		bctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := c.RunBatches(bctx, 2); err != nil && bctx.Err() == nil {
				t.Errorf("batching: %v", err)
				cancel() // every call waiting on the batcher gives up
			}
		}()
		t.Cleanup(func() { stop(); <-done })
	}
	// client is the line's client of a service connected as user.
	client := func(t *testing.T, user string) (redis.UniversalClient, *waitqueue.Client) {
		rdb := a.connect(t, redisacl.UserOf(user))
		return rdb, waitqueue.NewClient(rdb)
	}
	t.Run("gateway", func(t *testing.T) {
		rdb, c := client(t, redisacl.Gateway)
		c.EnableBatching()
		// The roles the gateway's rooms take (gateway.lineRoles).
		ln, adm, cl, dr := line.New(c), admission.New(c), claims.New(c), drop.New(c)
		batched(t, c)
		for seq, user := range map[uint64]string{1: "ann", 2: "ben"} {
			_, err := ln.Ingest(ctx, q, testenv.Epoch, seq, user, 0)
			must(t, "ingest", err)
		}
		_, err := ln.Poll(ctx, q, 1)
		must(t, "poll", err)
		_, err = ln.Stats(ctx, q)
		must(t, "stats", err)
		_, err = c.Now(ctx)
		must(t, "time", err)
		lim := ratelimit.New(ratelimit.Direct(rdb))
		_, err = lim.Allow(ctx, time.Now(), ratelimit.Check{Key: ratelimit.Key(q, "ip", "192.0.2.1"), Policy: ratelimit.Policy{Rate: 5, Burst: 10}})
		must(t, "rate limit", err)
		recs := orders.NewRecords(rdb)
		_, _, err = recs.Create(ctx, orders.Record{ID: "ord_" + q, Owner: "ann", Fingerprint: "fp", Queue: q, SKU: "sku", Quantity: 1, Status: orders.Pending})
		must(t, "create order record", err)
		_, _, err = recs.Get(ctx, "ord_"+q)
		must(t, "get order record", err)
		_, err = recs.Outcomes(ctx, q)
		must(t, "outcomes", err)
		_, err = paybreaker.New(rdb).Open(ctx)
		must(t, "read the breaker", err)
		_, _, err = ln.Leave(ctx, q, 2, "ben")
		must(t, "leave", err)
		must(t, "leave recorded", ln.LeaveRecorded(ctx, q, waitqueue.UnrecordedLeave{Seq: 2, User: "ben"}))
		// A stock-aware queue: a restock (the line and the stock ledger)
		// and an admission at once, which reserves in the ledger.
		must(t, "set stock", cl.SetStock(ctx, q+"-stock", false, waitqueue.StockLevel{SKU: "sku", Available: 5, Version: 1}))
		_, err = adm.AdmitNow(ctx, q+"-stock", testenv.Epoch, waitqueue.AtOnce{TokenTTL: time.Minute, TickLength: 10 * time.Millisecond,
			StockAware: true, Share: waitqueue.Share{SKUs: []string{"sku"}}})
		if err != nil && !errors.Is(err, waitqueue.ErrNotCurrent) {
			t.Fatalf("admit at once: %v", err)
		}
		now := time.Now()
		must(t, "add invites", dr.AddInvites(ctx, q, []string{"code-1"}, now, now.Add(time.Hour)))
		if _, ok, err := dr.UseInvite(ctx, q, "code-1", now); err != nil || !ok {
			t.Fatalf("use invite: %v, %v", ok, err)
		}
	})
	t.Run("admitter", func(t *testing.T) {
		rdb, c := client(t, redisacl.Admitter)
		adm, proj, drops, stock := admission.New(c), projection.New(c), drop.New(c), claims.New(c)
		testenv.Applied(t, proj, q, testenv.Epoch, 2)
		_, err := proj.Cursor(ctx, q)
		must(t, "cursor", err)
		if r := testenv.Tick(t, adm, q, tick); r.Admitted != 1 {
			t.Fatalf("tick admitted %d, want 1", r.Admitted)
		}
		must(t, "refresh the stock", stock.SetStock(ctx, q+"-stock", true, waitqueue.StockLevel{SKU: "sku", Available: 5, Version: 2}))
		stocked := tick
		stocked.StockAware, stocked.Share = true, waitqueue.Share{SKUs: []string{"sku"}, Peers: []string{q + "-peer"}}
		testenv.Tick(t, adm, q+"-stock", stocked) // reserves and reports in the stock ledger
		_, err = proj.Forget(ctx, q+"-stock")     // out of the stock ledger, and its line removed
		must(t, "forget a deleted queue", err)
		out, err := adm.Outbox(ctx, q, 10)
		must(t, "outbox", err)
		if len(out) != 1 {
			t.Fatalf("outbox = %v, want one admission", out)
		}
		admitted = out[0]
		must(t, "announced", adm.Announced(ctx, q, []uint64{admitted.Seq}))
		_, err = adm.LeavesToRecord(ctx, q, 10)
		must(t, "leaves to record", err)
		must(t, "leaves recorded", adm.LeavesRecorded(ctx, q, []waitqueue.UnrecordedLeave{{Seq: 2, User: "ben"}, {Seq: 9, User: "x", Reason: waitqueue.ReasonAbandoned}}))
		_, err = adm.ClosedSince(ctx, q, false)
		must(t, "closed since", err)
		_, err = adm.SlotsFreeAt(ctx, q)
		must(t, "slots free at", err)
		_, err = drops.Drawing(ctx, q)
		must(t, "drawing", err)
		_, err = drops.SettleDraw(ctx, q)
		must(t, "settle a draw", err)
		_, err = paybreaker.New(rdb).Open(ctx)
		must(t, "read the breaker", err)
		_, err = proj.Remove(ctx, testenv.Name(t), true)
		must(t, "remove a line", err)
	})
	t.Run("notifier", func(t *testing.T) {
		_, c := client(t, redisacl.Notifier)
		c.EnableBatching()
		reads := line.New(c)
		batched(t, c)
		_, err := reads.Poll(ctx, q, admitted.Seq)
		must(t, "poll", err)
		_, err = reads.Ranks(ctx, q, []uint64{1, 2})
		must(t, "ranks", err)
		_, err = c.Now(ctx)
		must(t, "time", err)
		must(t, "present", reads.Present(ctx, q, []uint64{1, 2}, time.Now()))
	})
	t.Run("orderworker", func(t *testing.T) {
		rdb, c := client(t, redisacl.OrderWorker)
		c.EnableBatching()
		slots := claims.New(c)
		batched(t, c)
		_, err := slots.Redeem(ctx, q, admitted.Seq, admitted.TokenID, "ord_"+q, time.Now().Add(time.Minute))
		must(t, "redeem", err)
		must(t, "placed", slots.Placed(ctx, q, admitted.Seq, "ord_"+q, waitqueue.StockLevel{SKU: "sku", Available: 4, Version: 3}))
		_, err = slots.CountBought(ctx, q, admitted.Seq, "ord_"+q, "ann", 1)
		must(t, "count bought", err)
		_, err = slots.Release(ctx, q, admitted.Seq, "ord_"+q)
		must(t, "release", err)
		recs := orders.NewRecords(rdb)
		must(t, "put order record", recs.Put(ctx, orders.Record{ID: "ord_" + q, Owner: "ann", Fingerprint: "fp", Queue: q, SKU: "sku", Quantity: 1, Status: orders.Paid}))
		must(t, "count outcome", recs.CountOutcome(ctx, q, "ord_"+q, orders.Paid))
		_, err = recs.Kept(ctx)
		must(t, "are the order records kept", err)
		must(t, "put order records back", recs.PutAll(ctx, []orders.Record{{ID: "ord_b" + q, Owner: "bo", Fingerprint: "fp", Queue: q, SKU: "sku", Quantity: 1, Status: orders.Paid}}))
		mark, err := recs.BeginPutBack(ctx)
		must(t, "begin a put-back", err)
		_, err = recs.MarkKept(ctx, mark)
		must(t, "mark them kept", err)
		br := paybreaker.New(rdb)
		must(t, "open the breaker", br.MarkOpen(ctx, time.Second))
		must(t, "close the breaker", br.MarkClosed(ctx))
	})
	t.Run("usherctl", func(t *testing.T) {
		_, c := client(t, redisacl.Usherctl)
		rebuild := projection.New(c)
		_, err := rebuild.Existing(ctx, q, []uint64{1, 2, 3})
		must(t, "existing", err)
		_, err = rebuild.RestoreDraw(ctx, testenv.Name(t), waitqueue.Drawing{Drawn: true, Entries: 1, Cursor: 7, Digest: "d"})
		must(t, "restore a draw", err)
		_, err = rebuild.Restore(ctx, testenv.Name(t), []waitqueue.Record{{Seq: 7, Status: waitqueue.Waiting, User: "cat"}})
		must(t, "restore", err)
	})
	if d := a.denials(t); len(d) > 0 {
		t.Errorf("the server denied usher's own work: %q", d)
	}
}

// What no usher user may do, and what none may do but the ones that must.
func TestUsersAreRefusedWhatTheyMustNotDo(t *testing.T) {
	a := startACL(t)
	ctx := context.Background()
	q := testenv.Name(t)
	anyone := [][]any{
		{"FLUSHALL"}, {"FLUSHDB"}, {"CONFIG", "GET", "*"}, {"CONFIG", "SET", "appendonly", "no"},
		{"KEYS", "*"}, {"ACL", "LIST"}, {"ACL", "SETUSER", "x", "on"}, {"INFO"}, {"SLOWLOG", "GET"},
		{"SHUTDOWN"}, {"MONITOR"}, {"SCRIPT", "FLUSH"}, {"FUNCTION", "FLUSH"}, {"CLIENT", "LIST"},
		{"REPLICAOF", "NO", "ONE"}, {"MODULE", "LIST"}, {"SAVE"}, {"MIGRATE", "h", "1", "k", "0", "1"},
		{"PUBLISH", "usher", "x"}, {"SUBSCRIBE", "usher"},
		{"SET", "other:key", "1"}, {"GET", "session:42"}, {"DEL", "usher:{" + q + "}:waiting"},
		{"EVAL", "return redis.call('SET', KEYS[1], 1)", 1, "other:key"},
		{"EVAL", "return redis.call('FLUSHALL')", 0},
		{"EVAL", "return redis.call('SET', 'outside', 1)", 0},
	}
	for _, u := range redisacl.Users() {
		if u.All {
			continue
		}
		rdb := a.connect(t, u.Name)
		for _, cmd := range anyone {
			if cmd[0] == "SUBSCRIBE" {
				ps := rdb.Subscribe(ctx, "usher")
				if _, err := ps.Receive(ctx); !refusedErr(err) {
					t.Errorf("%s: SUBSCRIBE = %v, want refused", u.Name, err)
				}
				ps.Close()
				continue
			}
			if err := rdb.Do(ctx, cmd...).Err(); !refusedErr(err) {
				t.Errorf("%s: %v = %v, want refused", u.Name, cmd, err)
			}
		}
	}

	tests := []struct {
		name string
		user string
		cmd  []any
	}{
		{"the notifier writes nothing, directly", redisacl.UserOf(redisacl.Notifier), []any{"HSET", "usher:{" + q + "}:stats", "rate", "1"}},
		{"the notifier writes nothing, through a script", redisacl.UserOf(redisacl.Notifier), []any{"EVAL", "return redis.call('ZADD', KEYS[1], 1, 'x')", 1, "usher:{" + q + "}:waiting"}},
		{"the notifier writes only presence", redisacl.UserOf(redisacl.Notifier), []any{"ZADD", "usher:{" + q + "}:waiting", 1, "x"}},
		{"the notifier runs no transaction", redisacl.UserOf(redisacl.Notifier), []any{"MULTI"}},
		{"the gateway only reads the breaker", redisacl.UserOf(redisacl.Gateway), []any{"SET", "usher:breaker:payment", "open"}},
		{"the admitter only reads the breaker", redisacl.UserOf(redisacl.Admitter), []any{"SET", "usher:breaker:payment", "open"}},
		{"the admitter touches no order record", redisacl.UserOf(redisacl.Admitter), []any{"HSET", "usher:order:{ord_x}", "status", "PAID"}},
		{"the gateway scans nothing", redisacl.UserOf(redisacl.Gateway), []any{"SCAN", "0"}},
		{"the gateway deletes nothing", redisacl.UserOf(redisacl.Gateway), []any{"DEL", "usher:order:{ord_x}"}},
		{"the order worker deletes only the breaker", redisacl.UserOf(redisacl.OrderWorker), []any{"DEL", "usher:order:{ord_x}"}},
		{"usherctl touches no order record", redisacl.UserOf(redisacl.Usherctl), []any{"HGET", "usher:order:{ord_x}", "status"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := a.connect(t, tt.user).Do(ctx, tt.cmd...).Err(); !refusedErr(err) {
				t.Errorf("%s: %v = %v, want refused", tt.user, tt.cmd, err)
			}
		})
	}
}

// refusedErr reports an ACL refusal, directly or from inside a script.
func refusedErr(err error) bool {
	return err != nil && (strings.HasPrefix(err.Error(), "NOPERM") || strings.Contains(err.Error(), "can't run this command") ||
		strings.Contains(err.Error(), "can't access at least one of the keys") || strings.Contains(err.Error(), "no permissions"))
}

// Without a password, with a wrong one, or as the default user, nobody
// gets in.
func TestNoPasswordNoEntry(t *testing.T) {
	a := startACL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gw := redisacl.UserOf(redisacl.Gateway)
	other, err := os.ReadFile(redisacl.PasswordFile(a.dir, redisacl.UserOf(redisacl.Notifier)))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		s    waitqueue.Settings
	}{
		{"no credentials: the default user, which is off", waitqueue.Settings{URL: a.url, Pool: 1}},
		{"a user without its password", waitqueue.Settings{URL: a.url, Pool: 1, User: gw, Password: waitqueue.PasswordValue("guess")}},
		{"a user with another user's password", waitqueue.Settings{URL: a.url, Pool: 1, User: gw, Password: waitqueue.PasswordValue(strings.TrimSpace(string(other)))}},
		{"the default user by name", waitqueue.Settings{URL: a.url, Pool: 1, User: "default", Password: waitqueue.PasswordValue("x")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rdb, err := waitqueue.Connect(ctx, tt.s)
			if err == nil {
				rdb.Close()
				t.Fatal("Connect = nil error, want refused")
			}
			if !strings.Contains(err.Error(), "refused user") {
				t.Errorf("Connect = %v, want a refusal", err)
			}
		})
	}
}

// A service started as make run starts it — no Redis settings, the data
// folder holding its password file — connects as its own user; with no
// password file it connects as before, as the default user.
func TestServicesFindTheirPasswordInTheDataFolder(t *testing.T) {
	a := startACL(t)
	data := t.TempDir()
	if _, err := redisacl.Write(waitqueue.DefaultPasswordDir(data)); err != nil {
		t.Fatal(err)
	}
	// The passwords of this data folder, on the test's server.
	for _, u := range redisacl.Users() {
		b, _ := os.ReadFile(redisacl.PasswordFile(waitqueue.DefaultPasswordDir(data), u.Name))
		if err := a.admin.Do(context.Background(), "ACL", "SETUSER", u.Name, ">"+strings.TrimSpace(string(b))).Err(); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"USHER_REDIS_URL": a.url, "USHER_DATA_DIR": data}
	e := config.New(func(k string) string { return env[k] })
	s := waitqueue.LoadSettings(e, 2)
	if err := e.Err(); err != nil {
		t.Fatal(err)
	}
	// The default user is off: connecting at all is connecting as the
	// notifier's user.
	rdb, err := waitqueue.Connect(context.Background(), s.As(redisacl.Notifier))
	if err != nil {
		t.Fatal(err)
	}
	rdb.Close()
	if got := s.As(redisacl.Notifier).User; got != redisacl.UserOf(redisacl.Notifier) {
		t.Errorf("As(notifier).User = %q, want %q", got, redisacl.UserOf(redisacl.Notifier))
	}
	if got := s.As("nobody").User; got != "" {
		t.Errorf("As(nobody).User = %q: a role without a password file must connect as before", got)
	}
	explicit := s
	explicit.User, explicit.Password = "someone", waitqueue.PasswordValue("x")
	if got := explicit.As(redisacl.Notifier).User; got != "someone" {
		t.Errorf("As over explicit settings = %q, want them kept", got)
	}
}
