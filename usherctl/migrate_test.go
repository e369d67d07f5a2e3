package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"usher/internal/redisacl"
	"usher/internal/testenv"
)

// runEnv runs a command line with env as the whole environment.
func runEnv(env map[string]string, args ...string) (stdout, stderr string, err error) {
	var out, errb bytes.Buffer
	err = run(context.Background(), args, func(k string) string { return env[k] }, strings.NewReader(""), &out, &errb)
	return out.String(), errb.String(), err
}

// migrate applies the schema as the owner's URL says, and again is
// harmless; the URL's password is not printed.
func TestMigrate(t *testing.T) {
	env := map[string]string{
		"USHER_DATABASE_MIGRATE_URL": testenv.PostgresURL(t),
		"USHER_DATABASE_URL":         "postgres://nobody@127.0.0.1:1/none?sslmode=disable", // the services', not used
	}
	for i := range 2 {
		out, errs, err := runEnv(env, "migrate")
		if err != nil || !strings.Contains(out, "up to date") {
			t.Fatalf("migrate #%d = %v, %q %q", i+1, err, out, errs)
		}
	}
}

// redis-acl writes the ACL file and the passwords once; a second run keeps
// them and creates none.
func TestRedisACL(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "redis")
	out, _, err := runEnv(nil, "redis-acl", "--dir", dir)
	if err != nil || strings.Count(out, "created the password") != len(redisacl.Users()) {
		t.Fatalf("redis-acl = %v, %q", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, redisacl.AuthFile)); err != nil {
		t.Fatal(err)
	}
	out, _, err = runEnv(nil, "redis-acl", "--dir", dir)
	if err != nil || strings.Contains(out, "created") {
		t.Fatalf("second redis-acl = %v, %q; want nothing created", err, out)
	}
	if _, _, err := runEnv(nil, "redis-acl"); exitCode(err) != exitUsage {
		t.Errorf("redis-acl without --dir = %v, want a usage error", err)
	}
}
