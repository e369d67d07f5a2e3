package service

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"usher/internal/config"
	"usher/internal/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Stop()
	os.Exit(code)
}

// Every line a service logs names the service: make run and a log
// collector read the four services' lines together.
func TestEveryLogLineNamesItsService(t *testing.T) {
	env := map[string]string{"USHER_NATS_URL": testenv.NATS(t), "USHER_REDIS_URL": testenv.RedisURL(t)}
	e := config.New(func(k string) string { return env[k] })
	s := Load(e, 1)
	if err := e.Err(); err != nil {
		t.Fatal(err)
	}
	var out testenv.Buffer
	d, err := Open(context.Background(), s, "admitter", &out)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	d.Log.Warn("a line")
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var fields map[string]any
		if err := json.Unmarshal([]byte(line), &fields); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if fields["service"] != "admitter" {
			t.Errorf("log line %s: service %v, want admitter", line, fields["service"])
		}
	}
}
