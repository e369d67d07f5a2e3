package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"usher/internal/bus"
	"usher/internal/event"
	"usher/internal/redisacl"
	"usher/internal/testenv"
)

// usherctl finds its NATS key in USHER_DATA_DIR, as make run lays it out;
// where there is none it connects anonymously, and a broker that refuses
// that is explained: the error names the file it looked for and
// USHER_DATA_DIR, so an operator who ran it from the wrong folder knows
// what to set.
func TestABrokerRefusingUsherctlWithoutItsKeySaysWhereItLooked(t *testing.T) {
	data := t.TempDir()
	natsDir := filepath.Join(data, "nats")
	if r := usherctlWith(t, nil, "nats-auth", "--dir", natsDir); r.err != nil {
		t.Fatalf("nats-auth: %v\n%s%s", r.err, r.stdout, r.stderr)
	}
	url := testenv.NATSFromConfig(t, filepath.Join(natsDir, bus.AuthFile), nil).ClientURL()
	admitter := bus.Settings{URLs: []string{url}, Replicas: 1, Role: bus.Admitter,
		NKeyFile: bus.DefaultKeyFile(data, bus.Admitter)}
	nc, js, err := bus.Open(context.Background(), admitter, "usherctl-test") // declares the streams
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	// q1 is a queue the streams know (replay refuses a name nothing knows).
	body, err := event.Marshal("abandoned/q1/e/1", event.TypeLeft, "alice", time.Now(), event.Left{Queue: "q1", User: "alice", Seq: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(context.Background(), event.LeaveSubject("q1"), body); err != nil {
		t.Fatal(err)
	}
	replay := []string{"replay", "--stream", "entries", "--queue", "q1"}

	t.Run("USHER_DATA_DIR unset, no .usher in the current directory", func(t *testing.T) {
		err := usherctlWith(t, map[string]string{"USHER_NATS_URL": url}, replay...).err
		want := filepath.Join(".usher", "nats", "usherctl.nk")
		if exitCode(err) != exitFailure || !strings.Contains(err.Error(), "no NATS credentials at "+want) ||
			!strings.Contains(err.Error(), "USHER_DATA_DIR") || !strings.Contains(err.Error(), "Authorization Violation") {
			t.Errorf("replay = %v (exit %d), want a failure naming %s, USHER_DATA_DIR and the broker's refusal", err, exitCode(err), want)
		}
	})
	t.Run("USHER_DATA_DIR a folder without the key", func(t *testing.T) {
		empty := t.TempDir()
		err := usherctlWith(t, map[string]string{"USHER_NATS_URL": url, "USHER_DATA_DIR": empty}, replay...).err
		want := bus.DefaultKeyFile(empty, bus.Usherctl)
		if err == nil || !strings.Contains(err.Error(), "no NATS credentials at "+want+":") {
			t.Errorf("replay = %v, want a failure naming %s", err, want)
		}
	})
	t.Run("USHER_DATA_DIR the folder make run wrote", func(t *testing.T) {
		if r := usherctlWith(t, map[string]string{"USHER_NATS_URL": url, "USHER_DATA_DIR": data}, replay...); r.err != nil {
			t.Errorf("replay = %v\n%s%s, want it to connect with the key it found", r.err, r.stdout, r.stderr)
		}
	})
	t.Run("an explicit key that the broker refuses is not blamed on the data folder", func(t *testing.T) {
		other := t.TempDir()
		if _, err := bus.LoadOrCreateKey(filepath.Join(other, "stranger.nk")); err != nil {
			t.Fatal(err)
		}
		err := usherctlWith(t, map[string]string{"USHER_NATS_URL": url, "USHER_NATS_NKEY_FILE": filepath.Join(other, "stranger.nk")}, replay...).err
		if err == nil || strings.Contains(err.Error(), "USHER_DATA_DIR") {
			t.Errorf("replay with a stranger's key = %v, want the broker's refusal alone", err)
		}
	})
}

// The same for Redis: a server whose default user is off refuses a
// usherctl that found no password file, and the error says where it looked.
func TestARedisRefusingUsherctlWithoutItsPasswordSaysWhereItLooked(t *testing.T) {
	w := newWorld(t) // a broker that authenticates nobody
	data := t.TempDir()
	redisDir := filepath.Join(data, "redis")
	if r := usherctlWith(t, nil, "redis-acl", "--dir", redisDir); r.err != nil {
		t.Fatalf("redis-acl: %v\n%s%s", r.err, r.stdout, r.stderr)
	}
	url, _ := testenv.RedisServerWith(t, "--aclfile", filepath.Join(redisDir, redisacl.AuthFile))
	q := testenv.Name(t)
	w.join(q, "alice") // a queue rebuild knows: it refuses one nothing knows
	rebuild := []string{"rebuild", "--queue", q, "--dry-run"}

	empty := t.TempDir()
	err := usherctlWith(t, map[string]string{"USHER_NATS_URL": w.natsURL, "USHER_REDIS_URL": url, "USHER_DATA_DIR": empty}, rebuild...).err
	want := redisacl.PasswordFile(filepath.Join(empty, "redis"), "usher-usherctl")
	if exitCode(err) != exitFailure || !strings.Contains(err.Error(), "no Redis password of usher-usherctl at "+want+":") ||
		!strings.Contains(err.Error(), "USHER_DATA_DIR") {
		t.Errorf("rebuild without the password file = %v (exit %d), want a failure naming %s and USHER_DATA_DIR", err, exitCode(err), want)
	}

	if r := usherctlWith(t, map[string]string{"USHER_NATS_URL": w.natsURL, "USHER_REDIS_URL": url, "USHER_DATA_DIR": data}, rebuild...); r.err != nil {
		t.Errorf("rebuild with USHER_DATA_DIR the folder make run wrote = %v\n%s%s, want it to connect as usher-usherctl", r.err, r.stdout, r.stderr)
	}
}
