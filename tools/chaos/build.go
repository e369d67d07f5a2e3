package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// binaries are the programs a run starts: usher's own, built once per run
// from this checkout, and the servers it runs on.
type binaries struct {
	service     map[string]string // kind → path
	pgsim       string
	usherctl    string
	natsServer  string
	redisServer string
	redisCLI    string
	pgBin       string // PostgreSQL's bin folder
	// previous is the previous release's build (version-skew), if built;
	// source names what a build's services came from.
	previous *binaries
	source   string
}

// moduleRoot finds the folder of usher's go.mod from the working directory
// up, so the harness runs from the repository root (go run ./tools/chaos) and
// from its own folder (go test).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module usher\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of module usher above the working directory")
		}
		dir = parent
	}
}

// build compiles every service, pgsim, usherctl and nats-server into dir
// and finds redis-server, redis-cli and PostgreSQL. The services come from
// the working tree, or from the git revision rev when it is set (a
// checkout others are editing may not build; a commit does).
//
// From the working tree the programs are linked in the module's
// .usher/chaos-bin, kept from run to run, where go build relinks only the
// ones whose sources changed (nats-server, the longest to link, hardly
// ever), and then hard-linked into dir. A relink writes a new file, so the
// binaries of a run stay what they were if another run relinks meanwhile;
// a lock keeps two runs from building there at once.
func build(ctx context.Context, dir, rev string) (*binaries, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	into := dir // where go build writes
	if rev == "" {
		into = filepath.Join(root, ".usher", "chaos-bin")
		if err := os.MkdirAll(into, 0o755); err != nil {
			return nil, err
		}
		unlock, err := lockFile(ctx, filepath.Join(into, ".lock"))
		if err != nil {
			return nil, err
		}
		defer unlock()
	} else {
		src := filepath.Join(dir, "src")
		if err := os.MkdirAll(src, 0o755); err != nil {
			return nil, err
		}
		archive := exec.CommandContext(ctx, "sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", root, rev, src)
		if out, err := archive.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("git archive %s: %v: %s", rev, err, out)
		}
		root = src
	}
	// One go build for all (nats-server is named after its module, not
	// v2). Without DWARF (-w) the links take about half as long; panics
	// and profiles still name every function.
	pkgs := []string{"./gateway", "./admitter", "./notifier", "./orderworker", "./tools/pgsim", "./usherctl", "github.com/nats-io/nats-server/v2"}
	cmd := exec.CommandContext(ctx, "go", append([]string{"build", "-trimpath", "-ldflags=-w", "-o", into + "/"}, pkgs...)...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build: %v: %s", err, out)
	}
	if into != dir {
		for _, name := range append(append([]string(nil), serviceKinds...), "pgsim", "usherctl", "nats-server") {
			if err := linkOrCopy(filepath.Join(into, name), filepath.Join(dir, name)); err != nil {
				return nil, err
			}
		}
	}
	b := &binaries{service: map[string]string{}, pgsim: filepath.Join(dir, "pgsim"),
		usherctl: filepath.Join(dir, "usherctl"), natsServer: filepath.Join(dir, "nats-server")}
	for _, k := range serviceKinds {
		b.service[k] = filepath.Join(dir, k)
	}
	if b.redisServer, err = exec.LookPath("redis-server"); err != nil {
		return nil, fmt.Errorf("redis-server not found (make deps installs it): %w", err)
	}
	if b.redisCLI, err = exec.LookPath("redis-cli"); err != nil {
		return nil, fmt.Errorf("redis-cli not found (make deps installs it): %w", err)
	}
	if b.pgBin, err = postgresBin(); err != nil {
		return nil, err
	}
	return b, nil
}

// lockFile takes an exclusive lock on path (created if need be), waiting
// for it as long as ctx lets; unlock releases it.
func lockFile(ctx context.Context, path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil // closing releases the lock
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for the lock %s (another chaos run building): %w", path, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// linkOrCopy hard-links src to dst, or copies it where a link cannot be
// made (another file system).
func linkOrCopy(src, dst string) error {
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// postgresBin returns the bin folder of the newest installed PostgreSQL.
func postgresBin() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	major := func(d string) int { n, _ := strconv.Atoi(filepath.Base(filepath.Dir(d))); return n }
	sort.Slice(dirs, func(i, j int) bool { return major(dirs[i]) < major(dirs[j]) })
	if len(dirs) > 0 {
		return dirs[len(dirs)-1], nil
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", fmt.Errorf("no PostgreSQL in /usr/lib/postgresql/*/bin or on PATH (make deps installs it)")
}

// describeSource names what the services were built from: a revision, or
// the working tree at its HEAD (noting uncommitted changes).
func describeSource(ctx context.Context, rev string) string {
	root, err := moduleRoot()
	if err != nil {
		return "unknown"
	}
	git := func(args ...string) string {
		out, err := exec.CommandContext(ctx, "git", append([]string{"-C", root}, args...)...).Output()
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(out))
	}
	if rev != "" {
		return "commit " + git("rev-parse", "--short", rev+"^{commit}")
	}
	desc := "the working tree at " + git("rev-parse", "--short", "HEAD")
	if git("status", "--porcelain", "--untracked-files=no") != "" {
		desc += " with uncommitted changes"
	}
	return desc
}
