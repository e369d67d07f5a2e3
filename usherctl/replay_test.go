package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"usher/internal/bus"
	"usher/internal/catalog"
	"usher/internal/event"
	"usher/internal/testenv"
)

// replayed parses replay's json output.
func replayed(t *testing.T, out string) []replayLine {
	t.Helper()
	var lines []replayLine
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var l replayLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("replay line %q: %v", sc.Text(), err)
		}
		lines = append(lines, l)
	}
	return lines
}

func seqsOf(lines []replayLine) []uint64 {
	out := []uint64{}
	for _, l := range lines {
		out = append(out, l.Seq)
	}
	return out
}

func TestReplayReturnsExactlyThePublishedEventsForEachFilter(t *testing.T) {
	w := newWorld(t)
	q, other := testenv.Name(t), testenv.Name(t)
	var entries []uint64 // every event of q in USHER_ENTRIES, in order
	for i := range 6 {
		entries = append(entries, w.join(q, fmt.Sprintf("u%d", i)))
		w.join(other, fmt.Sprintf("o%d", i)) // another queue, interleaved
	}
	entries = append(entries, w.leave(q, entries[2], "u2"))
	now := time.Now()
	adm1 := w.admit(q, entries[0], "u0", now, now.Add(time.Minute))
	w.admit(other, 2, "o0", now, now.Add(time.Minute))
	adm2 := w.admit(q, entries[1], "u1", now, now.Add(time.Minute))
	ord := w.order(event.TypeOrderCompleted, q, q+":1", "order-1", now)
	w.order(event.TypeOrderCompleted, other, other+":2", "order-2", now)

	stored := func(stream string, seq uint64) time.Time {
		s, err := w.js.Stream(context.Background(), stream)
		if err != nil {
			t.Fatal(err)
		}
		m, err := s.GetMsg(context.Background(), seq)
		if err != nil {
			t.Fatal(err)
		}
		return m.Time
	}
	third := stored(event.StreamEntries, entries[3])
	fifth := stored(event.StreamEntries, entries[5])

	tests := []struct {
		name string
		now  time.Time // the clock usherctl sees, for --since
		args []string
		want []uint64
	}{
		{"whole stream of the queue", time.Time{}, []string{"--stream", "entries"}, entries},
		{"from a sequence", time.Time{}, []string{"--stream", "entries", "--from-seq", fmt.Sprint(entries[3])}, entries[3:]},
		{"from a time until a time", time.Time{}, []string{"--stream", "entries",
			"--from-time", third.Format(time.RFC3339Nano), "--until", fifth.Format(time.RFC3339Nano)}, entries[3:6]},
		{"until a sequence", time.Time{}, []string{"--stream", "entries", "--until", fmt.Sprint(entries[2])}, entries[:3]},
		{"since a duration ago", third.Add(10 * time.Minute), []string{"--stream", "entries", "--since", "10m"}, entries[3:]},
		{"past the end", time.Time{}, []string{"--stream", "entries", "--from-seq", "100000"}, []uint64{}},
		{"at most --max", time.Time{}, []string{"--stream", "entries", "--max", "2"}, entries[:2]},
		{"admissions", time.Time{}, []string{"--stream", "admissions"}, []uint64{adm1, adm2}},
		{"orders of the queue only", time.Time{}, []string{"--stream", "orders"}, []uint64{ord}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := w.run(invocation{now: tt.now}, append([]string{"replay", "--queue", q}, tt.args...)...)
			if r.err != nil {
				t.Fatalf("replay: %v\n%s", r.err, r.stderr)
			}
			lines := replayed(t, r.stdout)
			if got := seqsOf(lines); fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("replay %v = seqs %v, want %v", tt.args, got, tt.want)
			}
			// Each line carries the envelope exactly as stored.
			for _, l := range lines {
				s, _ := w.js.Stream(context.Background(), l.Stream)
				m, err := s.GetMsg(context.Background(), l.Seq)
				if err != nil {
					t.Fatal(err)
				}
				if string(l.Event) != string(m.Data) || l.Subject != m.Subject {
					t.Errorf("line %d = %s on %s, want %s on %s", l.Seq, l.Event, l.Subject, m.Data, m.Subject)
				}
			}
		})
	}
}

func TestReplayTableFormatHasOneRowPerEvent(t *testing.T) {
	w := newWorld(t)
	q := testenv.Name(t)
	w.join(q, "alice")
	w.join(q, "bob")
	r := w.usherctl("replay", "--stream", "entries", "--queue", q, "--format", "table")
	rows := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.err != nil || len(rows) != 2 || !strings.Contains(rows[1], "usher.joined.v1") || !strings.Contains(rows[1], "user=bob") {
		t.Fatalf("replay --format table = %q, %v; want two rows, the second bob's join", r.stdout, r.err)
	}
}

func TestReplayFollowPrintsNewEventsUntilInterrupted(t *testing.T) {
	w := newWorld(t)
	q := testenv.Name(t)
	first := w.join(q, "alice")
	ctx, cancel := context.WithCancel(context.Background())
	out := &testenv.Buffer{}
	done := make(chan error, 1)
	go func() {
		c := &cli{getenv: func(k string) string { return map[string]string{"USHER_NATS_URL": w.natsURL}[k] },
			stdin: strings.NewReader(""), stdout: out, stderr: out, now: time.Now}
		done <- c.run(ctx, []string{"replay", "--stream", "entries", "--queue", q, "--follow"})
	}()
	testenv.Eventually(t, 5*time.Second, func() bool { return strings.Contains(out.String(), fmt.Sprintf(`"seq":%d`, first)) }, "the first join printed")
	second := w.join(q, "bob")
	testenv.Eventually(t, 5*time.Second, func() bool { return strings.Contains(out.String(), fmt.Sprintf(`"seq":%d`, second)) }, "the join made while following printed")
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("replay --follow after interrupt = %v, want nil", err)
	}
}

func TestRepublishSendsTheEventsAfterConfirmation(t *testing.T) {
	w := newWorld(t)
	q := testenv.Name(t)
	var want []string
	for i := range 3 {
		seq := w.join(q, fmt.Sprintf("u%d", i))
		want = append(want, fmt.Sprint(seq))
	}
	subject := "downstream.replay." + q
	sub, err := w.nc.SubscribeSync(subject)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		stdin  string
		args   []string
		wantN  int
		wantIn string
	}{
		{"answered no", "n\n", nil, 0, "nothing republished"},
		{"answered yes", "y\n", nil, 3, "republished 3 events"},
		{"--yes and --max", "", []string{"--yes", "--max", "2"}, 2, "republished 2 events"},
	}
	for _, tt := range tests {
		args := append([]string{"replay", "--stream", "entries", "--queue", q, "--republish", subject}, tt.args...)
		r := w.run(invocation{stdin: tt.stdin}, args...)
		if r.err != nil {
			t.Fatalf("%s: %v", tt.name, r.err)
		}
		if !strings.Contains(r.stdout+r.stderr, tt.wantIn) {
			t.Errorf("%s: printed %q, want %q", tt.name, r.stdout+r.stderr, tt.wantIn)
		}
		for i := range tt.wantN {
			m, err := sub.NextMsg(5 * time.Second)
			if err != nil {
				t.Fatalf("%s: message %d: %v", tt.name, i, err)
			}
			if got := m.Header.Get("Usher-Replay-Seq"); got != want[i] {
				t.Errorf("%s: message %d has Usher-Replay-Seq %s, want %s", tt.name, i, got, want[i])
			}
		}
		if m, err := sub.NextMsg(50 * time.Millisecond); err != nats.ErrTimeout {
			t.Errorf("%s: an extra message %v (%v)", tt.name, m, err)
		}
	}
}

// A start after the queue's newest event replays nothing and ends: the
// newest event, never delivered, kept a replay without --follow waiting for
// it forever (--since 1s on a quiet queue, --from-time in the future).
func TestReplayFromAfterTheNewestEventEnds(t *testing.T) {
	w := newWorld(t)
	q := testenv.Name(t)
	w.join(q, "alice")
	time.Sleep(1100 * time.Millisecond)
	for _, args := range [][]string{
		{"--since", "1s"},
		{"--from-time", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		r := w.run(invocation{ctx: ctx}, append([]string{"replay", "--stream", "entries", "--queue", q}, args...)...)
		cancel()
		if r.code != 0 || r.stdout != "" {
			t.Errorf("replay %v after the newest event = exit %d, %v, %q; want nothing and exit 0", args, r.code, r.err, r.stdout)
		}
	}
}

// A republish the broker refuses is a failure, not "republished N events":
// on make run's broker usherctl may publish only under replay.>, and a core
// publish to anything else was dropped by the server while usherctl printed
// its success and exited 0.
func TestARepublishTheBrokerRefusesFails(t *testing.T) {
	data := t.TempDir()
	natsDir := filepath.Join(data, "nats")
	if r := usherctlWith(t, nil, "nats-auth", "--dir", natsDir); r.err != nil {
		t.Fatalf("nats-auth: %v\n%s%s", r.err, r.stdout, r.stderr)
	}
	url := testenv.NATSFromConfig(t, filepath.Join(natsDir, bus.AuthFile), nil).ClientURL()
	abandonedLeave(t, url, data)
	env := map[string]string{"USHER_NATS_URL": url, "USHER_DATA_DIR": data}
	replay := []string{"replay", "--stream", "entries", "--queue", "q1", "--yes", "--republish"}

	if r := usherctlWith(t, env, append(replay, "replay.crm.q1")...); r.err != nil || !strings.Contains(r.stdout, "republished 1 events") {
		t.Fatalf("republish to replay.crm.q1 = %v (exit %d)\n%s%s, want it republished", r.err, r.code, r.stdout, r.stderr)
	}
	r := usherctlWith(t, env, append(replay, "crm.q1")...)
	if r.code != exitFailure || r.err == nil || !strings.Contains(r.err.Error(), `Permissions Violation for Publish to "crm.q1"`) ||
		!strings.Contains(r.err.Error(), "replay.>") {
		t.Errorf("republish to crm.q1 = %v (exit %d), want a failure naming the broker's refusal and replay.>", r.err, r.code)
	}
	if strings.Contains(r.stdout, "republished") {
		t.Errorf("republish to crm.q1 printed %q although the broker refused it", r.stdout)
	}
}

// A queue nothing knows of (a typo) is no quiet queue: replay printed
// nothing and exited 0 for it, as audit did before it refused one. A queue
// the catalog or any stream knows replays an empty window with exit 0.
func TestReplayOfAQueueNothingKnowsFails(t *testing.T) {
	w := newWorld(t)
	queues, err := catalog.Open(context.Background(), w.js, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--stream", "entries"},
		{"--stream", "ops", "--since", "1h"},
		{"--stream", "admissions", "--republish", "replay.crm.x", "--yes"},
		{"--stream", "ops", "--republish", "replay.crm.x", "--yes"},
	} {
		r := w.usherctl(append([]string{"replay", "--queue", testenv.Name(t)}, args...)...)
		if r.code != exitFailure || r.err == nil || !strings.Contains(r.err.Error(), "no queue") || strings.Contains(r.stdout, "republished") {
			t.Errorf("replay %v of an unknown queue = exit %d, %v\n%s; want exit 1 saying there is no such queue", args, r.code, r.err, r.stdout)
		}
	}

	joined, configured, cataloged := testenv.Name(t)+"-j", testenv.Name(t)+"-c", testenv.Name(t)+"-k"
	w.join(joined, "alice")
	w.configured(configured, 5, 0)
	if _, err := queues.Put(context.Background(), catalog.Defaults(cataloged)); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{joined, configured, cataloged} {
		for _, stream := range []string{"entries", "admissions", "orders", "ops"} {
			r := w.usherctl("replay", "--stream", stream, "--queue", q, "--from-seq", "1000000")
			if r.err != nil || r.stdout != "" {
				t.Errorf("replay --stream %s of %s (known, nothing in the window) = %v\n%s; want nothing and exit 0", stream, q, r.err, r.stdout)
			}
		}
	}
}

// A republish to a subject another stream stores goes out as a JetStream
// publish and waits for the stream's ack. When the broker refuses the
// publish (usherctl may publish only under replay.>) no ack ever comes:
// the republish must fail at once, naming the refusal, not wait for an
// ack until it is stopped (here: its context's deadline, which a failure
// that names the refusal did not reach). When the stream itself refuses
// it (here: full, discarding new messages), its answer names why.
func TestARepublishToAnotherStreamTheBrokerRefusesFailsFast(t *testing.T) {
	data := t.TempDir()
	natsDir := filepath.Join(data, "nats")
	if r := usherctlWith(t, nil, "nats-auth", "--dir", natsDir); r.err != nil {
		t.Fatalf("nats-auth: %v\n%s%s", r.err, r.stdout, r.stderr)
	}
	// The broker also serves a downstream service whose operators declare
	// streams of its own (user crm, no usher role).
	conf := filepath.Join(natsDir, bus.AuthFile)
	b, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	b = bytes.Replace(b, []byte("users = ["), []byte("users = [\n    {user: crm, password: crm}"), 1)
	if err := os.WriteFile(conf, b, 0o600); err != nil {
		t.Fatal(err)
	}
	url := testenv.NATSFromConfig(t, conf, nil).ClientURL()
	abandonedLeave(t, url, data)
	crm, err := nats.Connect(url, nats.UserInfo("crm", "crm"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(crm.Close)
	cjs, err := jetstream.New(crm)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := cjs.CreateStream(ctx, jetstream.StreamConfig{Name: "CRM", Subjects: []string{"crm.>"}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	if _, err := cjs.CreateStream(ctx, jetstream.StreamConfig{Name: "CRM_REPLAY", Subjects: []string{"replay.crm.>"},
		Storage: jetstream.MemoryStorage, MaxBytes: 1, Discard: jetstream.DiscardNew}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"USHER_NATS_URL": url, "USHER_DATA_DIR": data}
	replay := []string{"replay", "--stream", "entries", "--queue", "q1", "--yes", "--republish"}

	republish := func(subj string) result {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		var out, errb bytes.Buffer
		err := run(ctx, append(replay, subj), func(k string) string { return env[k] }, strings.NewReader(""), &out, &errb)
		return result{stdout: out.String(), stderr: errb.String(), code: exitCode(err), err: err}
	}
	r := republish("crm.q1")
	if r.code != exitFailure || r.err == nil || !strings.Contains(r.err.Error(), `Permissions Violation for Publish to "crm.q1"`) ||
		!strings.Contains(r.err.Error(), "replay.>") {
		t.Errorf("republish to crm.q1 (stored by CRM) = %v (exit %d), want a failure naming the broker's refusal and replay.>", r.err, r.code)
	}
	if strings.Contains(r.stdout, "republished") {
		t.Errorf("republish to crm.q1 printed %q although the broker refused it", r.stdout)
	}

	r = republish("replay.crm.q1")
	if r.code != exitFailure || r.err == nil || !strings.Contains(r.err.Error(), "CRM_REPLAY") ||
		!strings.Contains(r.err.Error(), "maximum bytes exceeded") {
		t.Errorf("republish to replay.crm.q1 (a full CRM_REPLAY) = %v (exit %d), want a failure naming the stream and why", r.err, r.code)
	}
}

// abandonedLeave records alice's abandoned leave of q1 on the broker at
// url as the admitter (it declares the streams and may record a leave),
// with the keys nats-auth wrote under data.
func abandonedLeave(t *testing.T, url, data string) {
	t.Helper()
	nc, js, err := bus.Open(context.Background(), bus.Settings{URLs: []string{url}, Replicas: 1, Role: bus.Admitter,
		NKeyFile: bus.DefaultKeyFile(data, bus.Admitter)}, "usherctl-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	body, err := event.Marshal("abandoned/q1/e/1", event.TypeLeft, "alice", time.Now(), event.Left{Queue: "q1", User: "alice", Seq: 1, Reason: "abandoned"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(context.Background(), event.LeaveSubject("q1"), body); err != nil {
		t.Fatal(err)
	}
}
