package testenv

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

var pgOnce struct {
	sync.Once
	url string // the cluster's maintenance database
	err error
}

// PostgresURL returns the URL of a fresh, empty database on a PostgreSQL
// cluster private to this test binary, and drops the database when the test
// ends. The cluster starts on first use (initdb into a temporary folder, a
// free loopback port, fsync off) and is stopped by Stop.
//
// initdb refuses to run as root, so when the tests run as root (CI on a
// fresh machine) the cluster is created and run as the postgres user.
func PostgresURL(t testing.TB) string {
	t.Helper()
	pgOnce.Do(func() { pgOnce.url, pgOnce.err = startPostgres() })
	if pgOnce.err != nil {
		t.Fatalf("postgres: %v", pgOnce.err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgOnce.url)
	if err != nil {
		t.Fatalf("postgres: %v", err)
	}
	defer conn.Close(ctx)
	name := "t_" + strings.ReplaceAll(Name(t), "-", "_")
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, pgOnce.url)
		if err != nil {
			t.Errorf("drop database %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u, _ := url.Parse(pgOnce.url)
	u.Path = "/" + name
	return u.String()
}

// postgresBin returns the bin folder of the newest installed PostgreSQL.
func postgresBin() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgMajor(dirs[i]) < pgMajor(dirs[j]) })
	if len(dirs) > 0 {
		return dirs[len(dirs)-1], nil
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", fmt.Errorf("no PostgreSQL found in /usr/lib/postgresql/*/bin or on PATH (make deps installs it)")
}

func pgMajor(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

func startPostgres() (string, error) {
	bin, err := postgresBin()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "usher-pg-")
	if err != nil {
		return "", err
	}
	// As root, everything runs as postgres, which must own the folder.
	asUser := func(name string, args ...string) *exec.Cmd { return exec.Command(name, args...) }
	if os.Geteuid() == 0 {
		pg, err := user.Lookup("postgres")
		if err != nil {
			return "", fmt.Errorf("running as root needs a postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(pg.Uid)
		gid, _ := strconv.Atoi(pg.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			return "", err
		}
		asUser = func(name string, args ...string) *exec.Cmd {
			return exec.Command("runuser", append([]string{"-u", "postgres", "--", name}, args...)...)
		}
	}
	data := filepath.Join(dir, "data")
	if out, err := asUser(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres",
		"--auth=trust", "--no-sync", "-E", "UTF8").CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("initdb: %v: %s", err, out)
	}
	port, err := FreePort()
	if err != nil {
		return "", err
	}
	opts := fmt.Sprintf("-h 127.0.0.1 -p %d -k %s -c fsync=off -c synchronous_commit=off "+
		"-c full_page_writes=off -c max_connections=300 -c shared_buffers=64MB", port, dir)
	pgctl := filepath.Join(bin, "pg_ctl")
	if out, err := asUser(pgctl, "-D", data, "-l", filepath.Join(dir, "server.log"),
		"-o", opts, "-w", "-t", "60", "start").CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
		os.RemoveAll(dir)
		return "", fmt.Errorf("pg_ctl start: %v: %s %s", err, out, log)
	}
	procs.Lock()
	procs.stops = append(procs.stops, func() {
		_ = asUser(pgctl, "-D", data, "-m", "immediate", "-w", "stop").Run()
		os.RemoveAll(dir)
	})
	procs.Unlock()
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port), nil
}
