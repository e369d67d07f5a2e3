package bus_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"usher/internal/bus"
	"usher/internal/catalog"
	"usher/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// reader is the downstream reader every test's policy names.
const reader = "reader"

var policy = bus.Policy{Downstream: []string{reader}}

// broker is a NATS server configured as make run configures it: the
// repository's nats.conf including the auth.conf WriteAuth wrote, with
// every role's seed in keys.
type broker struct {
	url  string
	keys string
	log  *testenv.NATSLog
}

func newBroker(t *testing.T) *broker {
	t.Helper()
	dir := t.TempDir()
	if _, err := bus.WriteAuth(policy, dir, func(r bus.Role) string { return keyFile(dir, r) }); err != nil {
		t.Fatal(err)
	}
	conf, err := os.ReadFile("../../nats.conf")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "nats.conf"), conf, 0o600); err != nil {
		t.Fatal(err)
	}
	b := &broker{keys: dir, log: &testenv.NATSLog{}}
	b.url = testenv.NATSFromConfig(t, filepath.Join(dir, "nats.conf"), b.log).ClientURL()
	return b
}

func keyFile(dir string, r bus.Role) string { return filepath.Join(dir, string(r)+".nk") }

func (b *broker) settings(r bus.Role) bus.Settings {
	return bus.Settings{URLs: []string{b.url}, Replicas: 1, Role: r, NKeyFile: keyFile(b.keys, r)}
}

// client is a connection of one role, with the errors the server sent it.
type client struct {
	role bus.Role
	nc   *nats.Conn
	js   jetstream.JetStream
	errs chan error
}

// as connects as role r with its own key.
func (b *broker) as(t *testing.T, r bus.Role) *client {
	t.Helper()
	nc, err := bus.Connect(b.settings(r), "test-"+string(r))
	if err != nil {
		t.Fatalf("connect as %s: %v", r, err)
	}
	t.Cleanup(nc.Close)
	c := &client{role: r, nc: nc, errs: make(chan error, 256)}
	nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case c.errs <- err:
		default:
		}
	})
	if c.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	return c
}

// refused waits for the server to refuse c on subject (a publish or a
// subscription), as it tells the client.
func (c *client) refused(t *testing.T, subject string) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case err := <-c.errs:
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+subject) {
				return
			}
		case <-deadline:
			t.Fatalf("%s on %s: the server did not refuse it", c.role, subject)
		}
	}
}

// quick is a context for a request the server is expected to drop.
func quick(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	t.Cleanup(cancel)
	return ctx
}

// declare has the admitter declare the streams, the catalog and the
// durable consumers, as it does at start-up.
func (b *broker) declare(t *testing.T) *client {
	t.Helper()
	adm := b.as(t, bus.Admitter)
	if err := bus.EnsureStreams(context.Background(), adm.js, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := catalog.Open(t.Context(), adm.js, 1); err != nil {
		t.Fatal(err)
	}
	if err := bus.EnsureDurables(t.Context(), adm.js, policy.Durables(bus.OrderWork{AckWait: time.Hour, MaxAckPending: 1000})); err != nil {
		t.Fatal(err)
	}
	return adm
}

// The server loads exactly the permissions the code derives: auth.conf,
// read back by nats-server's own parser, holds every role's public key
// with Policy.Permissions, allow and deny, publish and subscribe.
func TestAuthConfigHoldsThePolicy(t *testing.T) {
	dir := t.TempDir()
	if _, err := bus.WriteAuth(policy, dir, func(r bus.Role) string { return keyFile(dir, r) }); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(filepath.Join(dir, bus.AuthFile))
	if err != nil {
		t.Fatal(err)
	}
	users := map[string]*server.NkeyUser{}
	for _, u := range opts.Nkeys {
		users[u.Nkey] = u
	}
	if len(users) != len(policy.Roles()) {
		t.Fatalf("auth.conf has %d users, want %d (one per role)", len(users), len(policy.Roles()))
	}
	for _, r := range policy.Roles() {
		pub, err := bus.LoadOrCreateKey(keyFile(dir, r))
		if err != nil {
			t.Fatal(err)
		}
		u := users[pub]
		if u == nil || u.Permissions == nil {
			t.Fatalf("%s: no user with its key %s", r, pub)
		}
		want, _ := policy.Permissions(r)
		got := bus.Permissions{
			Publish:   rulesOf(u.Permissions.Publish),
			Subscribe: rulesOf(u.Permissions.Subscribe),
		}
		if !slices.Equal(got.Publish.Allow, want.Publish.Allow) || !slices.Equal(got.Publish.Deny, want.Publish.Deny) ||
			!slices.Equal(got.Subscribe.Allow, want.Subscribe.Allow) || !slices.Equal(got.Subscribe.Deny, want.Subscribe.Deny) {
			t.Errorf("%s: the server loads\n%+v\nwant\n%+v", r, got, want)
		}
	}
}

func rulesOf(p *server.SubjectPermission) bus.Rules {
	if p == nil {
		return bus.Rules{}
	}
	var r bus.Rules
	if len(p.Allow) > 0 {
		r.Allow = slices.Sorted(slices.Values(p.Allow))
	}
	if len(p.Deny) > 0 {
		r.Deny = slices.Sorted(slices.Values(p.Deny))
	}
	return r
}

// auth.conf is pinned by a golden file (keys derived from the role names):
// a change of any role's permissions shows in review as a diff of the
// server's configuration.
func TestAuthConfigGolden(t *testing.T) {
	keys := map[bus.Role]string{}
	for _, r := range policy.Roles() {
		seed := sha256.Sum256([]byte(r))
		kp, err := nkeys.FromRawSeed(nkeys.PrefixByteUser, seed[:])
		if err != nil {
			t.Fatal(err)
		}
		if keys[r], err = kp.PublicKey(); err != nil {
			t.Fatal(err)
		}
	}
	got, err := policy.AuthConfig(keys)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "auth.conf.golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("auth.conf differs from %s (go test -update rewrites it):\n%s", path, got)
	}
}

// A seed, once written, is the role's identity from then on.
func TestKeysAreCreatedOnceAndKept(t *testing.T) {
	dir := t.TempDir()
	kf := func(r bus.Role) string { return keyFile(dir, r) }
	created, err := bus.WriteAuth(policy, dir, kf)
	if err != nil {
		t.Fatal(err)
	}
	if len(created) != len(policy.Roles()) {
		t.Fatalf("first run created %v, want every role", created)
	}
	first, _ := bus.LoadOrCreateKey(kf(bus.Gateway))
	if created, err = bus.WriteAuth(policy, dir, kf); err != nil || len(created) != 0 {
		t.Fatalf("second run created %v (%v), want none", created, err)
	}
	if again, _ := bus.LoadOrCreateKey(kf(bus.Gateway)); again != first {
		t.Errorf("gateway's key changed from %s to %s", first, again)
	}
	info, err := os.Stat(kf(bus.Gateway))
	if err != nil {
		t.Fatal(err)
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 {
		t.Errorf("seed mode %v, want readable by its owner only", perm)
	}
}

// Bad downstream readers' names never reach the server's configuration.
func TestPolicyRefusesBadReaderNames(t *testing.T) {
	for _, names := range [][]string{{"a.b"}, {"a>"}, {""}, {"x", "x"}, {strings.Repeat("n", 49)}} {
		if err := (bus.Policy{Downstream: names}).Validate(); err == nil {
			t.Errorf("Validate(%q) = nil, want an error", names)
		}
	}
	if _, ok := policy.Permissions(bus.Downstream("stranger")); ok {
		t.Error("Permissions of a reader the policy does not name: ok, want none")
	}
}
