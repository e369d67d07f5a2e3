package e2e

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"usher/internal/event"
	"usher/internal/testenv"
)

// dropRig is every service as its binary, each of which can be killed and
// started again.
type dropRig struct {
	*shop
	env  map[string]string
	svcs map[string]*service
}

func newDropRig(t *testing.T) *dropRig {
	t.Helper()
	env := stackEnv(t)
	gw := env["USHER_GATEWAY_ADDR"]
	r := &dropRig{env: env, svcs: map[string]*service{}}
	for _, name := range []string{"pgsim", "gateway", "admitter", "notifier", "orderworker"} {
		r.svcs[name] = start(t, name, env)
	}
	r.shop = &shop{t: t, base: "http://" + gw, admin: map[string]string{"Authorization": "Bearer e2e-admin"}, queue: testenv.Name(t)}
	r.ready()
	return r
}

func (r *dropRig) ready() {
	r.t.Helper()
	waitReady(r.t, 30*time.Second, r.base, "http://"+r.env["USHER_ADMITTER_ADDR"], "http://"+r.env["USHER_NOTIFIER_ADDR"],
		"http://"+r.env["USHER_ORDERWORKER_ADDR"])
}

// kill kills every usher service with SIGKILL.
func (r *dropRig) killAll() {
	for _, name := range []string{"gateway", "admitter", "notifier", "orderworker"} {
		r.svcs[name].kill(r.t)
	}
}

func (r *dropRig) startAll() {
	for _, name := range []string{"gateway", "admitter", "notifier", "orderworker"} {
		r.svcs[name] = start(r.t, name, r.env)
	}
	r.ready()
}

// public reads GET /v1/queues/{q}.
func (r *dropRig) public() map[string]any {
	r.t.Helper()
	code, body := call(r.t, "GET", r.base+"/v1/queues/"+r.queue, "", nil)
	if code != 200 {
		r.t.Fatalf("GET /v1/queues/%s = %d %v", r.queue, code, body)
	}
	return body
}

// joinAll joins users concurrently and returns each one's first answer.
func (r *dropRig) joinAll(users []string) map[string]map[string]any {
	r.t.Helper()
	var mu sync.Mutex
	out := make(map[string]map[string]any, len(users))
	work := make(chan string)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for u := range work {
				code, body := r.join(u)
				if code != 202 && code != 200 {
					r.t.Errorf("join %s = %d %v", u, code, body)
					continue
				}
				mu.Lock()
				out[u] = body
				mu.Unlock()
			}
		}()
	}
	for _, u := range users {
		work <- u
	}
	close(work)
	wg.Wait()
	if r.t.Failed() {
		r.t.FailNow()
	}
	return out
}

// independentOrder is the draw recomputed the way docs/events.md tells anyone
// to: HMAC-SHA256(key = seed bytes, message = user id), sorted as
// lowercase hex text.
func independentOrder(t *testing.T, seedHex string, users []string) []string {
	t.Helper()
	seed, err := hex.DecodeString(seedHex)
	if err != nil {
		t.Fatal(err)
	}
	type row struct{ mac, user string }
	rows := make([]row, len(users))
	for i, u := range users {
		m := hmac.New(sha256.New, seed)
		m.Write([]byte(u))
		rows[i] = row{hex.EncodeToString(m.Sum(nil)), u}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].mac < rows[j].mac })
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.user
	}
	return out
}

// jetStreamAt is JetStream on the broker at natsURL, and a context for
// ten seconds of requests; both end with the test.
func jetStreamAt(t *testing.T, natsURL string) (jetstream.JetStream, context.Context) {
	t.Helper()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return js, ctx
}

// lastDraw reads the queue's usher.lottery.drawn.v1 event from USHER_OPS.
func lastDraw(t *testing.T, natsURL, q string) event.LotteryDrawn {
	t.Helper()
	js, ctx := jetStreamAt(t, natsURL)
	s, err := js.Stream(ctx, event.StreamOps)
	if err != nil {
		t.Fatal(err)
	}
	var d event.LotteryDrawn
	testenv.Eventually(t, 10*time.Second, func() error {
		m, err := s.GetLastMsgForSubject(ctx, event.LotteryDrawnSubject)
		if err != nil {
			return err
		}
		if _, err := event.Unmarshal(m.Data, event.TypeLotteryDrawn, &d); err != nil {
			return err
		}
		if d.Queue != q {
			return fmt.Errorf("the last draw is of %s", d.Queue)
		}
		return nil
	}, "the draw of %s on USHER_OPS", q)
	return d
}

// storedBeforeTheDraw is what anyone who follows the catalog, or reads the
// ops stream's audit records, holds of queue q: the catalog's value and
// every record on USHER_OPS, as JSON.
func storedBeforeTheDraw(t *testing.T, natsURL, q string) []string {
	t.Helper()
	js, ctx := jetStreamAt(t, natsURL)
	kv, err := js.KeyValue(ctx, event.BucketQueues)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	out := []string{string(e.Value())}
	c, err := js.OrderedConsumer(ctx, event.StreamOps, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		m, err := c.Next(jetstream.FetchMaxWait(time.Second))
		if err != nil {
			break // read to the end
		}
		out = append(out, string(m.Data()))
	}
	return out
}

// A drop that opens on Friday at 10:00. Ten thousand shoppers arrive early
// and wait in the pre-queue with no place; some refresh, some leave. Every
// usher service is killed before the opening and started after it. At the
// opening each one left gets a place by the lottery — the order an
// independent implementation recomputes from the revealed seed, which
// matches the commitment published before anyone queued — and a shopper
// who arrives after the opening queues behind all of them.
func TestAPreQueueOfTenThousandIsDrawnInTheOrderAnyoneRecomputes(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("10,000 joins")
	}
	r := newDropRig(t)
	const n = 10_000
	// Paused after the draw, so that places can be read before anyone is
	// admitted; scheduled an hour out while the crowd arrives.
	far := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	r.configure(`{"targetActive": 50, "state": "paused", "rateLimit": {"perIpPerSecond": 0, "perUserPerSecond": 0, "ordersPerSecond": 0}, "opensAt": "` + far + `"}`)
	commitment := r.public()["lottery"].(map[string]any)["commitment"].(string)
	if len(commitment) != 64 {
		t.Fatalf("commitment %q", commitment)
	}

	users := make([]string, n)
	for i := range users {
		users[i] = fmt.Sprintf("shopper-%05d@example.com", i)
	}
	first := r.joinAll(users)
	for _, u := range users {
		if b := first[u]; b["status"] != "PRE_QUEUE" || b["position"] != nil || b["opensAt"] == nil {
			t.Fatalf("join of %s = %v; want PRE_QUEUE with opensAt and no position", u, b)
		}
	}
	// Refreshing and rejoining change nothing.
	for _, u := range users[:100] {
		code, b := r.join(u)
		if code != 200 || b["ticket"] != first[u]["ticket"] || b["status"] != "PRE_QUEUE" {
			t.Fatalf("rejoin of %s = %d %v; want 200, the same ticket, PRE_QUEUE", u, code, b)
		}
	}
	// A hundred leave before the opening.
	left := map[string]bool{}
	for _, u := range users[n-100:] {
		code, _ := call(t, "DELETE", r.base+"/v1/queues/"+r.queue+"/tickets/"+first[u]["ticket"].(string), "", nil)
		if code != 200 && code != 204 {
			t.Fatalf("leave %s = %d", u, code)
		}
		left[u] = true
	}
	if v := r.public(); v["preQueue"] != float64(n-100) || v["lottery"].(map[string]any)["seed"] != nil {
		t.Fatalf("public view before the opening = %v; want %d pre-queued, no seed", v, n-100)
	}
	// Nor can anyone who reads the catalog or the audit records: the seed
	// waits in a bucket only admitters read.
	for _, stored := range storedBeforeTheDraw(t, r.env["USHER_NATS_URL"], r.queue) {
		if strings.Contains(stored, `"seed"`) {
			t.Fatalf("the seed is readable before the draw in %s", stored)
		}
	}

	// The opening is moved to two seconds from now: the commitment stays.
	opens := time.Now().Add(2 * time.Second)
	r.configure(`{"targetActive": 50, "state": "paused", "rateLimit": {"perIpPerSecond": 0, "perUserPerSecond": 0, "ordersPerSecond": 0}, "opensAt": "` +
		opens.UTC().Format(time.RFC3339Nano) + `"}`)
	if c := r.public()["lottery"].(map[string]any)["commitment"]; c != commitment {
		t.Fatalf("moving opensAt changed the commitment: %v", c)
	}
	// Every service dies before the opening and comes back after it.
	r.killAll()
	time.Sleep(time.Until(opens) + 500*time.Millisecond)
	r.startAll()

	var lot map[string]any
	testenv.Eventually(t, 30*time.Second, func() error {
		lot = r.public()["lottery"].(map[string]any)
		if lot["seed"] == nil {
			return fmt.Errorf("not drawn: %v", lot)
		}
		return nil
	}, "the draw revealed")
	seedHex := lot["seed"].(string)
	seed, _ := hex.DecodeString(seedHex)
	if sum := sha256.Sum256(seed); hex.EncodeToString(sum[:]) != commitment {
		t.Fatalf("the revealed seed %s does not match the commitment %s", seedHex, commitment)
	}
	var stayed []string
	for _, u := range users {
		if !left[u] {
			stayed = append(stayed, u)
		}
	}
	want := independentOrder(t, seedHex, stayed)
	if lot["entries"] != float64(len(want)) {
		t.Fatalf("drawn entries %v, want %d", lot["entries"], len(want))
	}
	d := lastDraw(t, r.env["USHER_NATS_URL"], r.queue)
	sum := sha256.Sum256([]byte(strings.Join(want, "\n") + "\n"))
	if d.Seed != seedHex || d.Commitment != commitment || d.Entries != len(want) || d.OrderDigest != hex.EncodeToString(sum[:]) {
		t.Fatalf("draw event = %+v; want the seed, the commitment, %d entries and the digest of the recomputed order", d, len(want))
	}

	// A shopper arriving after the opening queues behind everyone drawn.
	late := r.mustJoin("late-comer")
	if p := r.poll(late); p["status"] != "WAITING" || p["position"] != float64(len(want)+1) {
		t.Fatalf("late join = %v; want WAITING at %d", p, len(want)+1)
	}
	// Everyone's place is their place in the recomputed order.
	var wrong []string
	var mu sync.Mutex
	work := make(chan int)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				u := want[i]
				p := r.poll(first[u]["ticket"].(string))
				if p["status"] != "WAITING" || p["position"] != float64(i+1) {
					mu.Lock()
					wrong = append(wrong, fmt.Sprintf("%s: %v %v, want WAITING at %d", u, p["status"], p["position"], i+1))
					mu.Unlock()
				}
			}
		}()
	}
	for i := range want {
		work <- i
	}
	close(work)
	wg.Wait()
	if len(wrong) > 0 {
		sort.Strings(wrong)
		t.Fatalf("%d of %d places differ from the recomputed draw, e.g. %v", len(wrong), len(want), wrong[:min(5, len(wrong))])
	}
	// Opened for admission, the first fifty in the draw are admitted first.
	r.configure(`{"targetActive": 50, "state": "open", "rateLimit": {"perIpPerSecond": 0, "perUserPerSecond": 0, "ordersPerSecond": 0}, "opensAt": "` +
		opens.UTC().Format(time.RFC3339Nano) + `"}`)
	for _, u := range want[:50] {
		r.shop.ready(first[u]["ticket"].(string), u)
	}
	if p := r.poll(first[want[50]]["ticket"].(string)); p["status"] != "WAITING" || p["position"] != float64(1) {
		t.Fatalf("51st in the draw = %v; want WAITING at 1", p)
	}
}

// Every mode over HTTP with every service running.
func TestQueueModesWithEveryService(t *testing.T) {
	t.Parallel()
	r := newDropRig(t)
	noLimits := `"rateLimit": {"perIpPerSecond": 0, "perUserPerSecond": 0, "ordersPerSecond": 0}`

	t.Run("no crowd, no wait: the join's own answer is READY with the token", func(t *testing.T) {
		r.queue = testenv.Name(t)
		r.configure(`{"targetActive": 2, ` + noLimits + `}`)
		r.waitTicking()
		for _, u := range []string{"a", "b"} {
			code, b := r.join(u)
			if code != 202 || b["status"] != "READY" || b["token"] == nil {
				t.Fatalf("join of %s into an empty line with a slot free = %d %v; want READY with a token", u, code, b)
			}
		}
		// The slots are taken: the next one waits, and the queue shows.
		if code, b := r.join("c"); code != 202 || b["status"] != "WAITING" || b["position"] != float64(1) {
			t.Fatalf("join with no slot free = %d %v; want WAITING at 1", code, b)
		}
	})

	t.Run("passthrough: everyone READY at once, everything counted", func(t *testing.T) {
		r.queue = testenv.Name(t)
		r.configure(`{"targetActive": 1, "mode": "passthrough", ` + noLimits + `}`)
		r.waitTicking()
		for i := range 20 {
			code, b := r.join(fmt.Sprintf("p%d", i))
			if code != 202 || b["status"] != "READY" || b["token"] == nil {
				t.Fatalf("passthrough join %d = %d %v; want READY with a token", i, code, b)
			}
		}
		code, v := call(t, "GET", r.base+"/v1/admin/queues/"+r.queue, "", r.admin)
		if code != 200 || v["admittedTotal"] != float64(20) || v["active"] != float64(20) {
			t.Fatalf("admin view = %d %v; want 20 admitted and active (counted as if queued, no cap)", code, v)
		}
	})

	t.Run("reject: maintenance", func(t *testing.T) {
		r.queue = testenv.Name(t)
		r.configure(`{"targetActive": 1, "mode": "reject", ` + noLimits + `}`)
		req, _ := http.NewRequest("POST", r.base+"/v1/queues/"+r.queue+"/tickets", nil)
		req.Header.Set("X-User-Id", "m")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var b map[string]any
		_ = json.NewDecoder(res.Body).Decode(&b)
		res.Body.Close()
		if res.StatusCode != 503 || res.Header.Get("Retry-After") == "" || res.Header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("join in maintenance = %d %v %v; want 503 problem with Retry-After", res.StatusCode, res.Header, b)
		}
	})

	t.Run("an invite passes the line into the next free slot", func(t *testing.T) {
		r.queue = testenv.Name(t)
		r.configure(`{"targetActive": 1, "tokenTtlSeconds": 2, ` + noLimits + `}`)
		r.waitTicking()
		holder := r.mustJoinAny("holder") // READY at once: the one slot
		_ = holder
		w1, w2 := r.mustJoin("w1"), r.mustJoin("w2")
		code, inv := call(t, "POST", r.base+"/v1/admin/queues/"+r.queue+"/invites", `{"count": 1}`, r.admin)
		if code != 201 {
			t.Fatalf("invites = %d %v", code, inv)
		}
		codeStr := inv["codes"].([]any)[0].(string)
		code, b := call(t, "POST", r.base+"/v1/queues/"+r.queue+"/tickets", "", map[string]string{"X-User-Id": "guest", "Usher-Invite": codeStr})
		if code != 202 || b["position"] != float64(1) {
			t.Fatalf("join with the invite = %d %v; want WAITING at 1, ahead of w1 and w2", code, b)
		}
		// The holder's token expires: the guest gets the slot, then w1.
		r.shop.ready(b["ticket"].(string), "guest")
		if p := r.poll(w1); p["status"] != "WAITING" || p["position"] != float64(1) {
			t.Fatalf("w1 = %v; want still waiting at 1", p)
		}
		_ = w2
		code, b = call(t, "POST", r.base+"/v1/queues/"+r.queue+"/tickets", "", map[string]string{"X-User-Id": "guest2", "Usher-Invite": codeStr})
		if code != 403 {
			t.Fatalf("the invite used again = %d %v; want 403", code, b)
		}
	})
}

// waitTicking waits until the admitter ticks the current queue (a new
// queue's first tick follows its catalog entry within a moment).
func (r *dropRig) waitTicking() {
	r.t.Helper()
	testenv.Eventually(r.t, 10*time.Second, func() error {
		code, v := call(r.t, "GET", r.base+"/v1/admin/queues/"+r.queue, "", r.admin)
		if code != 200 {
			return fmt.Errorf("%d %v", code, v)
		}
		if _, ok := v["lastTickAt"]; !ok {
			return fmt.Errorf("no tick yet: %v", v)
		}
		return nil
	}, "queue %s ticking", r.queue)
}

// mustJoinAny joins and returns the ticket, whatever the status.
func (r *dropRig) mustJoinAny(user string) string {
	r.t.Helper()
	code, body := r.join(user)
	if code != 202 {
		r.t.Fatalf("join %s = %d %v", user, code, body)
	}
	return body["ticket"].(string)
}
