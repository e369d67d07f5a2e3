package waitqueue_test

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"usher/internal/testenv"
	"usher/internal/waitqueue"
)

// A USHER_REDIS_URL no connection can be made with stops the start naming
// the variable, before anything is dialled: a list of redis://host:port/0
// URLs (the single server's spelling, copied for a cluster) was dialled
// for 30 s as "lookup tcp/6379/0: unknown port", and a URL of another
// scheme surfaced only once NATS was reached.
func TestLoadSettingsRefusesARedisURLThatCannotBeDialled(t *testing.T) {
	tests := []struct {
		url  string
		want string // in the error; "" = taken
	}{
		{"", ""},
		{"redis://127.0.0.1:6379/0", ""},
		{"rediss://redis.internal:6380/2", ""},
		{"127.0.0.1:6379", ""},
		{"127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002", ""},
		{"rediss://10.0.0.1:6379, rediss://10.0.0.2:6379", ""},
		{"redis://127.0.0.1:7000/0,redis://127.0.0.1:7001/0", `USHER_REDIS_URL: "127.0.0.1:7000/0" in the cluster's list is not host:port`},
		{"10.0.0.1,10.0.0.2", `USHER_REDIS_URL: "10.0.0.1" in the cluster's list is not host:port`},
		{"redis://u:s3cret-url@10.0.0.1:7000/0,10.0.0.2:7000", `USHER_REDIS_URL: "***@10.0.0.1:7000/0"`},
		{"http://127.0.0.1:6379", "USHER_REDIS_URL=http://127.0.0.1:6379: redis: invalid URL scheme: http"},
		{"redis://127.0.0.1:6379/zero", "USHER_REDIS_URL=redis://127.0.0.1:6379/zero: "},
		{"redis://127.0.0.1:6379/-1", "USHER_REDIS_URL=redis://127.0.0.1:6379/-1: no database -1"},
		{"redis://127.0.0.1:6379/0?db=-2", "USHER_REDIS_URL=redis://127.0.0.1:6379/0?db=-2: no database -2"},
	}
	for _, tt := range tests {
		_, err := load(map[string]string{"USHER_REDIS_URL": tt.url})
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("USHER_REDIS_URL=%q: LoadSettings = %v, want it taken", tt.url, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("USHER_REDIS_URL=%q: LoadSettings = %v, want an error saying %q", tt.url, err, tt.want)
		case err != nil && strings.Contains(err.Error(), "s3cret-url"):
			t.Errorf("USHER_REDIS_URL=%q: the error %q shows the password", tt.url, err)
		}
	}
}

// A database the server does not have (Redis has 16, numbered from 0,
// unless its `databases` setting says otherwise) stops Connect at once,
// naming the variable and the index: SELECT's "ERR DB index is out of
// range" will not get better by waiting, and it was asked again for 30 s,
// then reported as "redis … not ready".
func TestConnectRefusesADatabaseTheServerDoesNotHave(t *testing.T) {
	base := strings.TrimSuffix(testenv.RedisURL(t), "/0")
	tests := []struct {
		url  string
		want string // in the error; "" = connected
	}{
		{base + "/15", ""},
		{base + "/16", "USHER_REDIS_URL=" + base + "/16: redis has no database 16"},
		{base + "/99", "USHER_REDIS_URL=" + base + "/99: redis has no database 99"},
		{base + "/0?db=20", "USHER_REDIS_URL=" + base + "/0?db=20: redis has no database 20"},
	}
	for _, tt := range tests {
		// Long enough to tell a prompt answer from the wait, short enough
		// that the wait does not hold the suite for 30 s a case.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		start := time.Now()
		rdb, err := waitqueue.Connect(ctx, waitqueue.Settings{URL: tt.url, Pool: 1})
		took := time.Since(start)
		cancel()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("Connect(%s) = %v, want connected", tt.url, err)
		case tt.want == "" && err == nil:
			rdb.Close()
		case err == nil:
			rdb.Close()
			t.Errorf("Connect(%s) connected, want an error saying %q", tt.url, tt.want)
		case !strings.Contains(err.Error(), tt.want) || took > 2*time.Second:
			t.Errorf("Connect(%s) = %v after %v, want at once an error saying %q", tt.url, err, took.Round(time.Millisecond), tt.want)
		}
	}
}

// A Redis that is not up yet is waited for, database and all: make run
// starts the services before Redis answers.
func TestConnectWaitsForARedisNotUpYet(t *testing.T) {
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type result struct {
		rdb redis.UniversalClient
		err error
	}
	done := make(chan result, 1)
	go func() {
		rdb, err := waitqueue.Connect(ctx, waitqueue.Settings{URL: fmt.Sprintf("redis://127.0.0.1:%d/3", port), Pool: 1})
		done <- result{rdb, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("Connect with no Redis yet = %v, want it to wait", r.err)
	case <-time.After(500 * time.Millisecond):
	}
	srv := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	r := <-done
	if r.err != nil {
		t.Fatalf("Connect once Redis is up = %v, want connected", r.err)
	}
	defer r.rdb.Close()
	if info, err := r.rdb.Do(ctx, "CLIENT", "INFO").Text(); err != nil || !strings.Contains(info, " db=3 ") {
		t.Errorf("CLIENT INFO = %q, %v; want db=3", info, err)
	}
}
