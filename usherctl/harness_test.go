package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"usher/internal/bus"
	"usher/internal/event"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
)

func TestMain(m *testing.M) {
	if os.Getenv(asMain) == "1" { // re-executed by usherctlProcess
		main()
	}
	code := m.Run()
	testenv.Stop()
	os.Exit(code)
}

// asMain, set in the environment, makes the test binary run usherctl's
// main with its command line instead of the tests.
const asMain = "USHERCTL_TEST_AS_MAIN"

// usherctlProcess runs usherctl's main in a process of its own, with env as
// its environment besides asMain, and returns what it printed and its exit
// status: what an operator sees in a terminal, the process's stderr
// included, which libraries write to on their own.
func usherctlProcess(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), os.Args[0], args...)
	cmd.Env = []string{asMain + "=1", "HOME=" + t.TempDir()}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("usherctl %v: %v", args, err)
	}
	return result{stdout: out.String(), stderr: errb.String(), code: cmd.ProcessState.ExitCode(), err: err}
}

// world is a NATS JetStream server with usher's streams, and optionally a
// private Redis, for one test.
type world struct {
	t        testing.TB
	natsURL  string
	redisURL string
	nc       *nats.Conn
	js       jetstream.JetStream
	epoch    string // the entries stream's identity, as token ids carry it
}

func newWorld(t testing.TB) *world {
	t.Helper()
	w := &world{t: t, natsURL: testenv.NATS(t)}
	nc, js, err := bus.Open(context.Background(), bus.Settings{URLs: []string{w.natsURL}, Replicas: 1}, "usherctl-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	w.nc, w.js = nc, js
	if w.epoch, err = bus.StreamID(context.Background(), js, event.StreamEntries); err != nil {
		t.Fatal(err)
	}
	return w
}

// result is what one usherctl invocation printed and how it exited.
type result struct {
	stdout, stderr string
	code           int
	err            error
}

// invocation configures one usherctl run beyond its arguments.
type invocation struct {
	stdin string
	now   time.Time // zero: the real clock
	ctx   context.Context
	edit  func(*cli)
}

// usherctl runs the command line as main does, against this world.
func (w *world) usherctl(args ...string) result {
	w.t.Helper()
	return w.run(invocation{}, args...)
}

func (w *world) run(inv invocation, args ...string) result {
	w.t.Helper()
	env := map[string]string{"USHER_NATS_URL": w.natsURL, "USHER_REDIS_URL": w.redisURL, "USER": "tester"}
	var out, errb bytes.Buffer
	c := &cli{getenv: func(k string) string { return env[k] }, stdin: strings.NewReader(inv.stdin),
		stdout: &out, stderr: &errb, now: time.Now}
	if !inv.now.IsZero() {
		c.now = func() time.Time { return inv.now }
	}
	if inv.edit != nil {
		inv.edit(c)
	}
	ctx := inv.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	err := c.run(ctx, args)
	return result{stdout: out.String(), stderr: errb.String(), code: exitCode(err), err: err}
}

// usherctlWith runs the command line as main does, with env as its whole
// environment: no world, no clock but the real one.
func usherctlWith(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(t.Context(), args, func(k string) string { return env[k] }, strings.NewReader(""), &out, &errb)
	return result{stdout: out.String(), stderr: errb.String(), code: exitCode(err), err: err}
}

// publish stores an event as the services do (event.Marshal, Nats-Msg-Id =
// the envelope id) and returns its stream sequence.
func (w *world) publish(subject, id, typ string, at time.Time, data any) uint64 {
	w.t.Helper()
	body, err := event.Marshal(id, typ, "", at, data)
	if err != nil {
		w.t.Fatal(err)
	}
	ack, err := w.js.Publish(context.Background(), subject, body, jetstream.WithMsgID(id))
	if err != nil {
		w.t.Fatal(err)
	}
	return ack.Sequence
}

// join publishes a join of user to q as the gateway does.
func (w *world) join(q, user string) uint64 {
	w.t.Helper()
	id := fmt.Sprintf("%s/%s/%d", q, user, time.Now().UnixNano())
	return w.publish(event.EnterSubject(q), id, event.TypeJoined, time.Now(), event.Joined{Queue: q, User: user, JoinedAt: time.Now().UTC()})
}

// leave publishes a leave of entry seq as the gateway does.
func (w *world) leave(q string, seq uint64, user string) uint64 {
	w.t.Helper()
	return w.publish(event.LeaveSubject(q), fmt.Sprintf("leave/%s/%d", q, seq), event.TypeLeft, time.Now(), event.Left{Queue: q, User: user, Seq: seq})
}

// admit publishes an admission as the admitter announces its outbox.
func (w *world) admit(q string, seq uint64, user string, readyAt, expiresAt time.Time) uint64 {
	w.t.Helper()
	tok := waitqueue.TokenID(q, w.epoch, seq)
	return w.publish(event.AdmittedSubject(q), tok, event.TypeAdmitted, readyAt, event.Admitted{
		Queue: q, User: user, Seq: seq, TokenID: tok, ReadyAt: readyAt.UTC(), ExpiresAt: expiresAt.UTC()})
}

// order publishes an order event for a token, as the order path will.
func (w *world) order(typ, q, tokenID, orderID string, at time.Time) uint64 {
	w.t.Helper()
	subj := "usher.order." + strings.TrimSuffix(strings.TrimPrefix(typ, "usher.order."), ".v1") + "." + q
	data := map[string]any{"queue": q, "tokenId": tokenID, "orderId": orderID}
	return w.publish(subj, fmt.Sprintf("%s/%s/%d", typ, orderID, time.Now().UnixNano()), typ, at, data)
}

// configured publishes a config change as the gateway's admin API does.
func (w *world) configured(q string, target, previous int) {
	w.t.Helper()
	change := map[string]any{"queue": q, "by": "tester", "config": map[string]any{"name": q, "targetActive": target}}
	if previous > 0 {
		change["previous"] = map[string]any{"name": q, "targetActive": previous}
	}
	w.publish(event.ConfigChangedSubject, fmt.Sprintf("config/%s/%d", q, time.Now().UnixNano()), event.TypeConfigChanged, time.Now(), change)
}
