// Package testenv starts the real servers usher's tests run against: an
// embedded NATS JetStream server, a redis-server process and a PostgreSQL
// cluster, each private to the test binary that started it and gone when it
// ends.
//
// Tests share one server per binary (starting Redis per test would dominate
// the run time) and isolate themselves by their own queue names, never by
// flushing a server.
package testenv

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/redis/go-redis/v9"
)

// NATS starts an embedded JetStream server on a random port with its store
// in a temporary folder, and returns its client URL. The server stops when
// the test ends.
func NATS(t testing.TB) string {
	t.Helper()
	s := NATSServer(t, t.TempDir())
	return s.ClientURL()
}

// NATSServer starts an embedded JetStream server storing in dir, so a test
// can stop it and start another on the same store.
func NATSServer(t testing.TB, dir string) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir,
		NoLog: true, NoSigs: true,
	})
	if err != nil {
		t.Fatalf("nats server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server: not ready after 10s")
	}
	t.Cleanup(s.Shutdown)
	return s
}

var redisOnce struct {
	sync.Once
	url string
	err error
}

// RedisURL returns the URL of a redis-server started for this test binary
// (on a free loopback port, persistence off). It is stopped by Stop, which a
// TestMain calls; without TestMain it is reaped with the process group.
func RedisURL(t testing.TB) string {
	t.Helper()
	redisOnce.Do(func() { redisOnce.url, _, redisOnce.err = startRedis() })
	if redisOnce.err != nil {
		t.Fatalf("redis: %v", redisOnce.err)
	}
	return redisOnce.url
}

// Redis returns a client of the test binary's redis-server, closed when the
// test ends.
func Redis(t testing.TB) redis.UniversalClient {
	t.Helper()
	return RedisAt(t, RedisURL(t))
}

// RedisAt returns a client of the Redis at url (a server a test started,
// or a stack's), closed when the test ends.
func RedisAt(t testing.TB, url string) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

var procs struct {
	sync.Mutex
	cmds  []*exec.Cmd
	dirs  []string
	stops []func()
}

// Stop ends every process this package started. Call it from TestMain after
// m.Run.
func Stop() {
	procs.Lock()
	defer procs.Unlock()
	for _, c := range procs.cmds {
		_ = c.Process.Kill()
		_ = c.Wait()
	}
	for _, d := range procs.dirs {
		os.RemoveAll(d)
	}
	for _, stop := range procs.stops {
		stop()
	}
	procs.cmds, procs.dirs, procs.stops = nil, nil, nil
}

// RedisServer starts a fresh redis-server and returns its URL and a stop
// function, for tests that kill or flush their own server.
func RedisServer(t testing.TB) (url string, stop func()) {
	t.Helper()
	return RedisServerWith(t)
}

// OwnRedis returns a client of a fresh redis-server of the test's own
// (RedisServer), for a test that counts the server's commands or empties
// its script cache; both are gone when the test ends.
func OwnRedis(t testing.TB) *redis.Client {
	t.Helper()
	url, _ := RedisServer(t)
	return RedisAt(t, url)
}

// RedisServerWith starts a fresh redis-server with extra command-line
// arguments (say --aclfile, or TLS ports and files) and returns its URL and
// a stop function. The server counts as up once it answers, even if only
// to refuse an unauthenticated client.
func RedisServerWith(t testing.TB, args ...string) (url string, stop func()) {
	t.Helper()
	url, cmd, err := startRedis(args...)
	if err != nil {
		t.Fatalf("redis: %v", err)
	}
	stop = func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	t.Cleanup(stop)
	return url, stop
}

func startRedis(extra ...string) (string, *exec.Cmd, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", nil, fmt.Errorf("redis-server not found (the Makefile installs it: make deps): %w", err)
	}
	dir, err := os.MkdirTemp("", "usher-redis-")
	if err != nil {
		return "", nil, err
	}
	port, err := FreePort()
	if err != nil {
		return "", nil, err
	}
	args := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir, "--loglevel", "warning"}, extra...)
	cmd := exec.Command(bin, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("start redis-server: %w", err)
	}
	go func() { // keep the pipe drained
		sc := bufio.NewScanner(out)
		for sc.Scan() {
		}
	}()
	procs.Lock()
	procs.cmds = append(procs.cmds, cmd)
	procs.dirs = append(procs.dirs, dir)
	procs.Unlock()
	url := fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	opt, _ := redis.ParseURL(url)
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := rdb.Ping(context.Background()).Err(); err == nil || isAuthError(err) {
			return url, cmd, nil
		} else if time.Now().After(deadline) {
			return "", nil, fmt.Errorf("redis-server on %d: not answering: %w", port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// isAuthError reports a server that answers but wants credentials.
func isAuthError(err error) bool {
	return strings.HasPrefix(err.Error(), "NOAUTH") || strings.HasPrefix(err.Error(), "WRONGPASS")
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Name returns a name unique to this test run, for queues and keys:
// tests isolate themselves by name instead of flushing shared servers.
func Name(t testing.TB) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	base := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			return r
		case r >= 'A' && r <= 'Z':
			return r + ('a' - 'A')
		}
		return '-'
	}, filepath.Base(t.Name()))
	if len(base) > 40 {
		base = base[:40]
	}
	return base + "-" + hex.EncodeToString(b[:])
}

// Eventually polls cond until it holds or the deadline passes: tests wait
// for asynchronous effects this way, never by sleeping and hoping. cond is
// a func() bool, or a func() error that says why it does not hold yet — the
// last such error is in the failure message, so a test that times out says
// what it was waiting on.
func Eventually[C func() bool | func() error](t testing.TB, within time.Duration, cond C, format string, args ...any) {
	t.Helper()
	check := func() error {
		switch c := any(cond).(type) {
		case func() bool:
			if c() {
				return nil
			}
			return errNotYet
		case func() error:
			return c()
		}
		return nil
	}
	deadline := time.Now().Add(within)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			msg := fmt.Sprintf("after %v: "+format, append([]any{within}, args...)...)
			if err != errNotYet {
				msg += ": last: " + err.Error()
			}
			t.Fatal(msg)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// EndsWith waits up to within for a run's end on ended (a service's run
// returning, say a simulated crash) and fails t unless its error is want.
func EndsWith(t testing.TB, ended <-chan error, within time.Duration, want error) {
	t.Helper()
	select {
	case err := <-ended:
		if !errors.Is(err, want) {
			t.Fatalf("the run ended with %v, want %v", err, want)
		}
	case <-time.After(within):
		t.Fatalf("the run did not end within %v (want %v)", within, want)
	}
}

// errNotYet is a func() bool condition's "no".
var errNotYet = errors.New("not yet")
