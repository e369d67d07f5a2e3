package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"usher/internal/bus"
	"usher/internal/catalog"
	"usher/internal/event"
	"usher/internal/testenv"
	"usher/internal/ticket"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/linetest"
	"usher/internal/waitqueue/roles"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Stop()
	if code == 0 {
		// No goroutine of a stream, the hub or run outlives its test.
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// world is one queue on a real JetStream server and a real Redis, and the
// files a notifier and a gateway share.
type world struct {
	t       testing.TB
	env     map[string]string
	js      jetstream.JetStream
	queues  *catalog.Catalog
	line    *roles.All
	tickets *ticket.Signer
	queue   string
	epoch   string // the entries stream's identity
}

func newWorld(t testing.TB) *world {
	t.Helper()
	dir := t.TempDir()
	w := &world{t: t, queue: testenv.Name(t), env: map[string]string{
		"USHER_NATS_URL":                   testenv.NATS(t),
		"USHER_REDIS_URL":                  testenv.RedisURL(t),
		"USHER_DATA_DIR":                   dir,
		"USHER_NOTIFIER_ADDR":              "127.0.0.1:0",
		"USHER_LOG_LEVEL":                  "info",
		"USHER_NOTIFIER_POSITION_INTERVAL": "50ms",
		"USHER_SHUTDOWN_TIMEOUT":           "2s",
	}}
	ctx, cancel := context.WithCancel(context.Background()) // ends the catalog's watch
	t.Cleanup(cancel)
	nc, js, err := bus.Open(ctx, bus.Settings{URLs: []string{w.env["USHER_NATS_URL"]}, Replicas: 1}, "notifier-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	w.js = js
	if w.epoch, err = bus.StreamID(ctx, js, event.StreamEntries); err != nil {
		t.Fatal(err)
	}
	if w.queues, err = catalog.Open(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	w.line = roles.New(testenv.Redis(t))
	if w.tickets, err = ticket.LoadOrCreateSigner(filepath.Join(dir, "ticket.secret")); err != nil {
		t.Fatal(err)
	}
	w.configure(func(c *catalog.Config) {})
	return w
}

// configure changes the queue's configuration.
func (w *world) configure(change func(*catalog.Config)) {
	w.t.Helper()
	cfg, ok := w.queues.Get(w.queue)
	if !ok {
		cfg = catalog.Defaults(w.queue)
	}
	change(&cfg)
	if _, err := w.queues.Put(context.Background(), cfg); err != nil {
		w.t.Fatal(err)
	}
}

// notifier is one running notifier.
type notifier struct {
	addr string
	logs *testenv.Buffer
	stop func()
}

// start runs a notifier with the world's environment plus extra, and waits
// for its listening line.
func (w *world) start(extra ...string) *notifier {
	w.t.Helper()
	env := map[string]string{}
	for k, v := range w.env {
		env[k] = v
	}
	for i := 0; i+1 < len(extra); i += 2 {
		env[extra[i]] = extra[i+1]
	}
	logs := &testenv.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, func(k string) string { return env[k] }, logs) }()
	n := &notifier{logs: logs}
	var once sync.Once
	n.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				w.t.Errorf("notifier run: %v", err)
			}
		})
	}
	w.t.Cleanup(n.stop)
	testenv.Eventually(w.t, 10*time.Second, func() bool {
		select {
		case err := <-done:
			w.t.Fatalf("notifier stopped at start: %v\n%s", err, logs.String())
		default:
		}
		n.addr = logField(logs, "notifier listening", "addr")
		return n.addr != ""
	}, "no listening line in the notifier's log:\n%s", logs.String())
	return n
}

// url is the stream of tkt.
func (n *notifier) url(q, tkt string) string {
	return "http://" + n.addr + "/v1/queues/" + q + "/tickets/" + tkt + "/events"
}

// join puts a shopper at seq in line and returns their ticket.
func (w *world) join(seq uint64, user string) string {
	w.t.Helper()
	if _, err := w.line.Ingest(context.Background(), w.queue, w.epoch, seq, user, 0); err != nil {
		w.t.Fatal(err)
	}
	return w.tickets.Issue(ticket.Ticket{Queue: w.queue, User: user, Epoch: w.epoch, Seq: seq})
}

// tick runs one admission tick (on Redis time) for up to n shoppers whose
// tokens live ttl, their readyAt spread over tickLen, as the admitter does
// once its follower has applied every join.
func (w *world) tick(n int, ttl, tickLen time.Duration) waitqueue.TickResult {
	w.t.Helper()
	testenv.Applied(w.t, w.line, w.queue, w.epoch, 1<<40)
	return testenv.Tick(w.t, w.line, w.queue, waitqueue.Tick{Epoch: w.epoch, TargetActive: n, TickLength: tickLen, TokenTTL: ttl})
}

// admit runs one admission tick for up to n shoppers (300 s tokens, ready
// within tickLen) and publishes the admissions as the admitter does. It
// returns them.
func (w *world) admit(n int, tickLen time.Duration) []waitqueue.Admission {
	w.t.Helper()
	w.tick(n, 300*time.Second, tickLen)
	return w.announce()
}

// announce publishes the outbox, as the admitter does after a tick.
func (w *world) announce() []waitqueue.Admission {
	w.t.Helper()
	ctx := context.Background()
	out, err := w.line.Outbox(ctx, w.queue, 100000)
	if err != nil {
		w.t.Fatal(err)
	}
	var seqs []uint64
	for _, a := range out {
		body, err := event.Marshal(a.TokenID, event.TypeAdmitted, a.User, a.ReadyAt, event.Admitted{
			Queue: a.Queue, User: a.User, Seq: a.Seq, TokenID: a.TokenID,
			ReadyAt: a.ReadyAt.UTC(), ExpiresAt: a.ExpiresAt.UTC(),
		})
		if err != nil {
			w.t.Fatal(err)
		}
		if _, err := w.js.PublishAsync(event.AdmittedSubject(w.queue), body, jetstream.WithMsgID(a.TokenID)); err != nil {
			w.t.Fatal(err)
		}
		seqs = append(seqs, a.Seq)
	}
	select {
	case <-w.js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		w.t.Fatal("admissions not acknowledged")
	}
	if err := w.line.Announced(ctx, w.queue, seqs); err != nil {
		w.t.Fatal(err)
	}
	return out
}

// leave takes the shopper at seq out as the gateway's DELETE does: it
// publishes the leave on the entries stream, then writes it to the line,
// after lag (a slow round trip).
func (w *world) leave(seq uint64, user string, lag time.Duration) {
	w.t.Helper()
	id := "leave/" + w.queue + "/" + fmt.Sprint(seq)
	body, err := event.Marshal(id, event.TypeLeft, user, time.Now(), event.Left{Queue: w.queue, User: user, Seq: seq})
	if err != nil {
		w.t.Fatal(err)
	}
	if _, err := w.js.Publish(context.Background(), event.LeaveSubject(w.queue), body, jetstream.WithMsgID(id)); err != nil {
		w.t.Fatal(err)
	}
	time.Sleep(lag)
	if _, err := linetest.Leave(context.Background(), w.line, w.queue, seq, user); err != nil {
		w.t.Fatal(err)
	}
}

// logField returns the field of the first JSON log line with message msg.
func logField(logs *testenv.Buffer, msg, key string) string {
	for _, line := range strings.Split(logs.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == msg {
			s, _ := rec[key].(string)
			return s
		}
	}
	return ""
}

// sub is a client reading one stream the way a browser does.
type sub struct {
	t      testing.TB
	res    *http.Response
	events chan sseEvent
	done   chan struct{}
	cancel context.CancelFunc
}

// open connects to url with lastID as Last-Event-ID (when not empty) and
// parses the stream in the background.
func open(t testing.TB, url, lastID string) *sub {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("GET %s: %v", url, err)
	}
	checkStream(t, res) // against the API contract (contract_test.go)
	return parse(t, res, cancel)
}

// parse reads res's stream in the background; cancel ends the request.
func parse(t testing.TB, res *http.Response, cancel context.CancelFunc) *sub {
	ctx := res.Request.Context()
	s := &sub{t: t, res: res, events: make(chan sseEvent, 64), done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(s.done)
		defer close(s.events)
		p := newSSEParser(bufio.NewReader(res.Body))
		for {
			ev, err := p.next()
			if err != nil {
				return
			}
			select {
			case s.events <- ev:
			case <-ctx.Done(): // closed by the test: nobody reads any more
				return
			}
		}
	}()
	t.Cleanup(s.close)
	return s
}

func (s *sub) close() {
	s.cancel()
	s.res.Body.Close()
	<-s.done
}

// next returns the next event, failing the test after within.
func (s *sub) next(within time.Duration) sseEvent {
	s.t.Helper()
	select {
	case ev, ok := <-s.events:
		if !ok {
			s.t.Fatal("stream ended, want another event")
		}
		checkEvent(s.t, ev) // against the API contract (contract_test.go)
		return ev
	case <-time.After(within):
		s.t.Fatalf("no event within %v", within)
	}
	return sseEvent{}
}

// until returns the first event of type typ, skipping others.
func (s *sub) until(typ string, within time.Duration) sseEvent {
	s.t.Helper()
	deadline := time.Now().Add(within)
	for {
		ev := s.next(time.Until(deadline))
		if ev.typ == typ {
			return ev
		}
	}
}

// decode reads an event's JSON data.
func decode[T any](t testing.TB, ev sseEvent) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(ev.data), &v); err != nil {
		t.Fatalf("event %s data %q: %v", ev.typ, ev.data, err)
	}
	return v
}
