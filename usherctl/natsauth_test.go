package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func natsAuthRun(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errb strings.Builder
	err := run(context.Background(), append([]string{"nats-auth"}, args...), func(string) string { return "" },
		strings.NewReader(""), &out, &errb)
	return out.String() + errb.String(), err
}

// nats-auth lays out what a broker with authentication needs: the server's
// part in --dir, each role's seed in its own folder with --key-dirs (so a
// deployment mounts each service only its own), created once.
func TestNatsAuthWritesTheServerConfigAndAKeyPerRole(t *testing.T) {
	dir := t.TempDir()
	server, keys := filepath.Join(dir, "server"), filepath.Join(dir, "keys")
	args := []string{"--dir", server, "--base", "../nats.conf", "--keys", keys, "--key-dirs", "--downstream", "crm,ledger"}
	out, err := natsAuthRun(t, args...)
	if err != nil {
		t.Fatalf("nats-auth: %v\n%s", err, out)
	}
	for _, f := range []string{"server/auth.conf", "server/nats.conf", "keys/gateway/gateway.nk", "keys/admitter/admitter.nk",
		"keys/notifier/notifier.nk", "keys/orderworker/orderworker.nk", "keys/usherctl/usherctl.nk",
		"keys/downstream-crm/downstream-crm.nk", "keys/downstream-ledger/downstream-ledger.nk"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	if !strings.Contains(out, "created the NKey of admitter") {
		t.Errorf("first run printed %q, want the keys it created", out)
	}
	if out, err = natsAuthRun(t, args...); err != nil || strings.Contains(out, "created") {
		t.Errorf("second run: %v, printed %q: want no key created again", err, out)
	}
}

// Without --downstream the readers are USHER_DOWNSTREAM_READERS, the
// setting the admitter declares their durable consumers from.
func TestNatsAuthNamesTheReadersTheAdmitterDeclares(t *testing.T) {
	dir := t.TempDir()
	var out, errb strings.Builder
	env := func(k string) string { return map[string]string{"USHER_DOWNSTREAM_READERS": "crm, ledger"}[k] }
	if err := run(context.Background(), []string{"nats-auth", "--dir", dir}, env, strings.NewReader(""), &out, &errb); err != nil {
		t.Fatalf("nats-auth: %v\n%s%s", err, out.String(), errb.String())
	}
	for _, r := range []string{"downstream-crm", "downstream-ledger"} {
		if _, err := os.Stat(filepath.Join(dir, r+".nk")); err != nil {
			t.Errorf("the key of %s: %v", r, err)
		}
	}
}

func TestNatsAuthRefusesBadCommandLines(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{nil, "--dir is required"},
		{[]string{"--dir", t.TempDir(), "--downstream", "a.b"}, `downstream reader "a.b"`},
		{[]string{"--dir", t.TempDir(), "stray"}, "unexpected arguments"},
	}
	for _, tt := range tests {
		out, err := natsAuthRun(t, tt.args...)
		if exitCode(err) != exitUsage || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("nats-auth %q = %v (exit %d) %s, want a usage error about %q", tt.args, err, exitCode(err), out, tt.want)
		}
	}
}
