package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"usher/internal/bus"
	"usher/internal/catalog"
	"usher/internal/event"
	"usher/internal/orders"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/roles"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Stop()
	if pgsimBin.dir != "" {
		os.RemoveAll(pgsimBin.dir)
	}
	os.Exit(code)
}

// pgsimBin is the payment-gateway simulator, built once per test binary:
// it is a package main of its own and cannot be imported.
var pgsimBin struct {
	sync.Once
	dir, path string
	err       error
}

const pgsimAdmin = "pgsim-test-admin"

// pgsim runs the simulator on a free port until the test ends and returns
// its base URL; env adds PGSIM_* settings as name, value pairs.
func pgsim(t testing.TB, latencyMs int, env ...string) string {
	t.Helper()
	pgsimBin.Do(func() {
		pgsimBin.dir, pgsimBin.err = os.MkdirTemp("", "usher-pgsim-")
		if pgsimBin.err != nil {
			return
		}
		pgsimBin.path = filepath.Join(pgsimBin.dir, "pgsim")
		// -trimpath as scripts/test.sh builds it first: this build only
		// links (without it, pgsim and the standard library compiled anew).
		out, err := exec.Command("go", "build", "-trimpath", "-o", pgsimBin.path, "usher/tools/pgsim").CombinedOutput()
		if err != nil {
			pgsimBin.err = fmt.Errorf("go build pgsim: %v: %s", err, out)
		}
	})
	if pgsimBin.err != nil {
		t.Fatal(pgsimBin.err)
	}
	cmd := exec.Command(pgsimBin.path)
	cmd.Env = append(os.Environ(), "PGSIM_ADDR=127.0.0.1:0", "PGSIM_ADMIN_TOKEN="+pgsimAdmin,
		fmt.Sprintf("PGSIM_LATENCY_MEAN_MS=%d", latencyMs), "PGSIM_LATENCY_TAIL=0.5")
	for i := 0; i+1 < len(env); i += 2 {
		cmd.Env = append(cmd.Env, env[i]+"="+env[i+1])
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var line struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "listening" {
				addr <- line.Addr
			}
		}
	}()
	select {
	case a := <-addr:
		return "http://" + a
	case <-time.After(30 * time.Second):
		t.Fatal("pgsim did not say it was listening")
	}
	return ""
}

// world is everything an order worker talks to, real and private to one
// test: JetStream, Redis, PostgreSQL and pgsim.
type world struct {
	t        testing.TB
	env      map[string]string
	js       jetstream.JetStream
	rdb      redis.UniversalClient
	line     *roles.All
	db       *orders.Store
	records  *orders.Records
	queues   *catalog.Catalog
	queue    string
	pgsimURL string
	// recorded is every admission record published, by stream sequence.
	recorded map[uint64]event.Admitted
}

// newWorld makes a world whose queue sells stock units of its SKU, its
// pgsim answering after latencyMs on average; pgsimEnv adds PGSIM_*
// settings as name, value pairs.
func newWorld(t testing.TB, cfg catalog.Config, stock int64, latencyMs int, pgsimEnv ...string) *world {
	t.Helper()
	ctx := context.Background()
	natsURL := testenv.NATS(t)
	// Its own Redis: the payment breaker's shared state is one key per
	// deployment, and one test's outage must not pause another's.
	redisURL, _ := testenv.RedisServer(t)
	w := &world{t: t, queue: testenv.Name(t), pgsimURL: pgsim(t, latencyMs, pgsimEnv...)}
	w.env = map[string]string{
		"USHER_NATS_URL": natsURL, "USHER_REDIS_URL": redisURL, "USHER_DATABASE_URL": testenv.PostgresURL(t),
		"USHER_PAYMENT_URL": w.pgsimURL, "USHER_ORDERWORKER_ADDR": "127.0.0.1:0", "USHER_LOG_LEVEL": "error",
		"USHER_ORDER_ACK_WAIT": "1s", "USHER_BREAKER_OPEN": "500ms", "USHER_PAYMENT_TIMEOUT": "500ms",
	}
	nc, js, err := bus.Open(ctx, bus.Settings{URLs: []string{natsURL}, Replicas: 1}, "orderworker-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	w.js = js
	if w.queues, err = catalog.Open(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	qctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	go w.queues.Run(qctx)
	if w.rdb, err = waitqueue.DialURL(redisURL, 16); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.rdb.Close() })
	w.line, w.records = roles.New(w.rdb), orders.NewRecords(w.rdb)
	if w.db, err = orders.Open(w.env["USHER_DATABASE_URL"], orders.Options{MaxConns: 4}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.db.Close)
	if err := w.db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	cfg.Name, cfg.SKU = w.queue, "sku-"+w.queue
	if _, err := w.queues.Put(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := w.db.SetStock(ctx, cfg.SKU, stock); err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *world) sku() string { return "sku-" + w.queue }

// start runs an order worker until the test ends (or a hook crashes it);
// its error comes on the channel.
func (w *world) start(h hooks, env ...string) <-chan error {
	w.t.Helper()
	vars := map[string]string{}
	for k, v := range w.env {
		vars[k] = v
	}
	for i := 0; i+1 < len(env); i += 2 {
		vars[env[i]] = env[i+1]
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var out io.Writer = io.Discard
		if os.Getenv("USHER_TEST_LOG") != "" {
			out, vars["USHER_LOG_LEVEL"] = os.Stderr, os.Getenv("USHER_TEST_LOG")
		}
		errc <- runWith(ctx, func(k string) string { return vars[k] }, out, h)
	}()
	w.t.Cleanup(func() { cancel(); <-done })
	return errc
}

// admit puts n shoppers in line and admits them all, as the admitter
// would — in Redis and on USHER_ADMISSIONS, where its follower finds the
// admission and tells the line where the stream holds it — and returns
// their token ids once every one is past its readyAt.
func (w *world) admit(n int) []string { return w.admitFor(n, 5*time.Minute) }

// admitFor is admit with tokens that live ttl.
func (w *world) admitFor(n int, ttl time.Duration) []string {
	w.t.Helper()
	ids := w.admitInRedis(n, ttl)
	w.record(ids...)
	return ids
}

// record publishes the admissions of the tokens, admitted in Redis, on
// USHER_ADMISSIONS, as the admitter announces them, and applies them to
// the line, as its admissions follower does.
func (w *world) record(tokenIDs ...string) {
	w.t.Helper()
	ctx := context.Background()
	cur, err := w.line.Cursor(ctx, w.queue)
	if err != nil {
		w.t.Fatal(err)
	}
	prev := cur[waitqueue.StreamAdmissions].Seq
	evs := make([]waitqueue.AdmissionEvent, 0, len(tokenIDs))
	for _, tok := range tokenIDs {
		_, _, seq, _ := waitqueue.ParseTokenID(tok)
		e, err := w.line.Poll(ctx, w.queue, seq)
		if err != nil {
			w.t.Fatal(err)
		}
		a := event.Admitted{Queue: w.queue, User: userOf(seq), Seq: seq, TokenID: tok, ReadyAt: e.ReadyAt.UTC(), ExpiresAt: e.ExpiresAt.UTC()}
		body, err := event.Marshal(tok, event.TypeAdmitted, a.User, time.Now(), a)
		if err != nil {
			w.t.Fatal(err)
		}
		ack, err := w.js.Publish(ctx, event.AdmittedSubject(w.queue), body, jetstream.WithMsgID(tok))
		if err != nil {
			w.t.Fatal(err)
		}
		evs = append(evs, waitqueue.AdmissionEvent{StreamSeq: ack.Sequence, Entry: seq, User: a.User, TokenID: tok,
			ReadyAt: a.ReadyAt, ExpiresAt: a.ExpiresAt})
		if w.recorded == nil {
			w.recorded = map[uint64]event.Admitted{}
		}
		w.recorded[ack.Sequence] = a
	}
	if _, err := w.line.ApplyAdmissions(ctx, w.queue, "admissions-test", prev, evs); err != nil {
		w.t.Fatal(err)
	}
}

// admitInRedis is admitFor in Redis alone: the stream never hears of these
// admissions (as when whoever holds a Redis password writes them).
func (w *world) admitInRedis(n int, ttl time.Duration) []string {
	w.t.Helper()
	ctx := context.Background()
	stats, _ := w.line.Stats(ctx, w.queue)
	first := uint64(stats.AdmittedTotal + stats.Waiting + 1)
	for i := range n {
		seq := first + uint64(i)
		if _, err := w.line.Ingest(ctx, w.queue, testenv.Epoch, seq, userOf(seq), 0); err != nil {
			w.t.Fatal(err)
		}
	}
	testenv.Applied(w.t, w.line, w.queue, testenv.Epoch, first+uint64(n))
	testenv.Tick(w.t, w.line, w.queue, waitqueue.Tick{Epoch: testenv.Epoch, TargetActive: 1 << 20,
		TickLength: 10 * time.Millisecond, TokenTTL: ttl})
	time.Sleep(10 * time.Millisecond)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = waitqueue.TokenID(w.queue, testenv.Epoch, first+uint64(i))
	}
	return ids
}

// request takes an order for the token as the gateway does — claims the
// token in the line, then publishes the request (msgID "" means the order
// id, the gateway's dedup) — and returns the order id.
func (w *world) request(tokenID string, msgID string) string {
	w.t.Helper()
	return w.publishRequest(tokenID, msgID, w.redeem(tokenID))
}

// redeem claims the token for its order in Redis, as the gateway does
// before it publishes the request, and returns when (Redis time).
func (w *world) redeem(tokenID string) time.Time { return w.claimFor(tokenID, 6*time.Minute) }

// claimFor is redeem with the gateway's order hold set to hold: how long
// the claim keeps the token's slot.
func (w *world) claimFor(tokenID string, hold time.Duration) time.Time {
	w.t.Helper()
	_, _, seq, _ := waitqueue.ParseTokenID(tokenID)
	cl, err := w.line.Claim(context.Background(), w.queue, seq, waitqueue.Order{ID: orders.ID(tokenID), TokenID: tokenID,
		User: fmt.Sprintf("user-%d", seq), SKU: w.sku(), Quantity: 1}, hold)
	if err != nil || cl.Outcome != waitqueue.Redeemed {
		w.t.Fatalf("Claim(%s) = %+v, %v", tokenID, cl, err)
	}
	return cl.At
}

// publishRequest publishes an order request for the token, claimed or not.
func (w *world) publishRequest(tokenID, msgID string, requestedAt time.Time) string {
	w.t.Helper()
	id, msgID, body := w.requestEvent(tokenID, msgID, requestedAt)
	if _, err := w.js.Publish(context.Background(), event.OrderRequestedSubject(w.queue), body, jetstream.WithMsgID(msgID)); err != nil {
		w.t.Fatal(err)
	}
	return id
}

// requestEvent is the order request for the token: its order id, its
// message id (msgID, or the order id when empty) and its body.
func (w *world) requestEvent(tokenID, msgID string, requestedAt time.Time) (id, mid string, body []byte) {
	_, _, seq, _ := waitqueue.ParseTokenID(tokenID)
	id = orders.ID(tokenID)
	if msgID == "" {
		msgID = id
	}
	body, _ = event.Marshal(msgID, event.TypeOrderRequested, "", requestedAt, event.OrderRequested{
		OrderID: id, TokenID: tokenID, Queue: w.queue, User: fmt.Sprintf("user-%d", seq), SKU: w.sku(), Quantity: 1,
		TokenExpiresAt: time.Now().Add(5 * time.Minute), TokenReadyAt: w.readyAt(tokenID), RequestedAt: requestedAt,
	})
	return id, msgID, body
}

func (w *world) order(id string) orders.Order {
	w.t.Helper()
	o, _, err := w.db.Get(context.Background(), id)
	if err != nil {
		w.t.Fatal(err)
	}
	return o
}

// waitFinal waits until every order is final and its slot is free.
func (w *world) waitFinal(within time.Duration, ids ...string) {
	w.t.Helper()
	done := 0 // ids[:done] are final: a final order stays final, so each is read final once
	testenv.Eventually(w.t, within, func() bool {
		for ; done < len(ids); done++ {
			if !w.order(ids[done]).Status.Final() {
				return false
			}
		}
		st, _ := w.line.Stats(context.Background(), w.queue)
		return st.Active == 0
	}, "%d orders final and their slots free", len(ids))
}

func (w *world) stock() int64 {
	w.t.Helper()
	n, _, err := w.db.Stock(context.Background(), w.sku())
	if err != nil {
		w.t.Fatal(err)
	}
	return n
}

// charges is how often pgsim charged the key ("" for the total).
func (w *world) charges(key string) int {
	w.t.Helper()
	u := w.pgsimURL + "/v1/admin/charges"
	if key != "" {
		u += "?key=" + key
	}
	var out struct{ Charges, Total int }
	w.pgsimDo("GET", u, "", &out)
	if key == "" {
		return out.Total
	}
	return out.Charges
}

func (w *world) setMode(mode string, slowMs int) {
	w.t.Helper()
	w.pgsimDo("PUT", w.pgsimURL+"/v1/admin/mode", fmt.Sprintf(`{"mode": %q, "slowMs": %d}`, mode, slowMs), nil)
}

func (w *world) pgsimDo(method, url, body string, out any) {
	w.t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+pgsimAdmin)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		b, _ := io.ReadAll(res.Body)
		w.t.Fatalf("%s %s = %d %s", method, url, res.StatusCode, b)
	}
	if out != nil {
		json.NewDecoder(res.Body).Decode(out)
	}
}

// finished reads the order outcome events of the world's queue.
func (w *world) finished() map[string]event.OrderFinished {
	w.t.Helper()
	cons, err := w.js.OrderedConsumer(context.Background(), event.StreamOrders, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{event.OrderCompletedSubject(w.queue), event.OrderFailedSubject(w.queue)},
	})
	if err != nil {
		w.t.Fatal(err)
	}
	out := map[string]event.OrderFinished{}
	for {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(200*time.Millisecond))
		if err != nil {
			w.t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			var env event.Envelope
			json.Unmarshal(m.Data(), &env)
			var f event.OrderFinished
			json.Unmarshal(env.Data, &f)
			out[f.OrderID] = f
			n++
		}
		if n == 0 {
			return out
		}
	}
}
