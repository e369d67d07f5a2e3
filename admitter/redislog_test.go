package main

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"usher/internal/testenv"
)

// asMain, set in the environment, makes the test binary run the admitter's
// main instead of the tests.
const asMain = "ADMITTER_TEST_AS_MAIN"

// admitterProcess starts the admitter's main in a process of its own (the
// test binary re-executed), with env as its whole environment besides
// asMain, writing to stdout and stderr: go-redis's logger is the
// process's, and what it wrote on its own went to the process's stderr.
// The process is killed if it outlives the test.
func admitterProcess(t *testing.T, env map[string]string, stdout, stderr *testenv.Buffer) *exec.Cmd {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), os.Args[0])
	cmd.Env = []string{asMain + "=1", "HOME=" + t.TempDir()}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// goRedisPlain is the start of a line go-redis's own logger prints:
// "redis: 2026/12/03 21:04:05 pool.go:770: …".
var goRedisPlain = regexp.MustCompile(`(?m)^redis: \d{4}/\d\d/\d\d \d\d:\d\d:\d\d `)

// With Redis unreachable, what go-redis logs itself (its failed dials) is
// a line of the service's JSON log on stdout, with its level, and nothing
// reaches stderr in go-redis's plain format: the process's stderr holds
// the admitter's own error alone. Every service opens Redis through
// service.Open, which routes go-redis's logger; this is one of them, run
// as its own process.
func TestGoRedisLogsJoinTheJSONLog(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "redis://" + ln.Addr().String() + "/0" // nothing listens there once closed
	ln.Close()
	var stdout, stderr testenv.Buffer
	cmd := admitterProcess(t, map[string]string{
		"USHER_NATS_URL": testenv.NATS(t), "USHER_REDIS_URL": down, "USHER_LOG_LEVEL": "debug",
		"USHER_ADMITTER_ADDR": "127.0.0.1:0", "USHER_DATA_DIR": t.TempDir(),
	}, &stdout, &stderr)
	// go-redis has logged a failed dial once either holds it.
	testenv.Eventually(t, 20*time.Second, func() bool {
		return strings.Contains(stdout.String(), `"from":"go-redis"`) || goRedisPlain.MatchString(stderr.String())
	}, "go-redis logged no failed dial, on stdout or stderr")
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait() // it fails: Redis never answered

	var fromRedis []map[string]any
	for _, line := range strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil || rec["level"] == nil || rec["msg"] == nil {
			t.Errorf("stdout line %q is not a JSON log line with a level and a message", line)
			continue
		}
		if rec["from"] == "go-redis" {
			fromRedis = append(fromRedis, rec)
		}
	}
	if goRedisPlain.MatchString(stderr.String()) {
		t.Errorf("stderr holds go-redis's plain lines:\n%s", stderr.String())
	}
	if len(fromRedis) == 0 {
		t.Fatalf("no go-redis line in the admitter's log:\n%s", stdout.String())
	}
	if got := fromRedis[0]; got["level"] != "DEBUG" || !strings.Contains(got["msg"].(string), "connection refused") {
		t.Errorf("go-redis's line = %v, want level DEBUG and the refused dial in msg", got)
	}
	for _, line := range strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n") {
		if line != "" && !strings.HasPrefix(line, "admitter: ") {
			t.Errorf("stderr line %q is not the admitter's own error", line)
		}
	}
}
