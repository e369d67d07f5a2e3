package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"usher/internal/keyspace"
	"usher/internal/redisacl"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
)

// charges is how many payments pgsim captured under key ("" for all).
func (s *shop) charges(key string) int {
	s.t.Helper()
	u := "http://" + s.env["PGSIM_ADDR"] + "/v1/admin/charges"
	if key != "" {
		u += "?key=" + key
	}
	req, _ := http.NewRequest("GET", u, nil)
	req.Header.Set("Authorization", "Bearer dev-admin-token") // pgsim's default
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer res.Body.Close()
	var out struct{ Charges, Total int }
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		s.t.Fatal(err)
	}
	if key == "" {
		return out.Total
	}
	return out.Charges
}

// mostActive samples the queue's active slots (the admin view) until the
// test ends and returns the most it saw so far.
func (s *shop) mostActive() func() int {
	s.t.Helper()
	var mu sync.Mutex
	most := 0
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			req, _ := http.NewRequestWithContext(ctx, "GET", s.base+"/v1/admin/queues/"+s.queue, nil)
			req.Header.Set("Authorization", s.admin["Authorization"])
			if res, err := http.DefaultClient.Do(req); err == nil {
				var v struct{ Active int }
				_ = json.NewDecoder(res.Body).Decode(&v)
				res.Body.Close()
				mu.Lock()
				most = max(most, v.Active)
				mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	s.t.Cleanup(func() { stop(); <-done })
	return func() int { mu.Lock(); defer mu.Unlock(); return most }
}

// The order workers are down for longer than the order hold (3 s here):
// the two shoppers who ordered meanwhile (202) lose their slots to the next
// two in line when the hold runs out, and when a worker comes back their
// orders are never charged — REJECTED hold_lapsed, which their clients
// read — while the two admitted in their place buy the two units. Never
// more slots held than targetActive, never more sold than the stock.
func TestABacklogLongerThanTheOrderHoldChargesNoSlotGivenAway(t *testing.T) {
	t.Parallel()
	s := newShopOf(t, []string{"pgsim", "gateway", "admitter", "notifier"}, "USHER_ORDER_HOLD", "3s")
	sku := "sku-" + s.queue
	s.stock(sku, 2)
	s.configure(fmt.Sprintf(`{"targetActive": 2, "tickMs": 20, "sku": %q}`, sku))
	most := s.mostActive()
	users := []string{"ann", "ben", "cal", "dan"}
	tickets := map[string]string{}
	for _, u := range users {
		tickets[u] = s.mustJoin(u)
	}
	body := fmt.Sprintf(`{"sku": %q}`, sku)
	backlog := map[string]string{}
	for _, u := range users[:2] {
		code, o := s.order(u, s.ready(tickets[u], u), body)
		if code != 202 {
			t.Fatalf("%s's order with every worker down = %d %v, want 202", u, code, o)
		}
		backlog[u] = o["orderId"].(string)
	}
	// The hold runs out: cal and dan get the slots.
	calTok, danTok := s.ready(tickets["cal"], "cal"), s.ready(tickets["dan"], "dan")

	start(t, "orderworker", s.env)
	waitReady(t, 30*time.Second, "http://"+s.env["USHER_ORDERWORKER_ADDR"])
	for u, tok := range map[string]string{"cal": calTok, "dan": danTok} {
		if o := s.buy(u, tok, body); o["status"] != "PAID" {
			t.Errorf("%s, admitted in a lapsed hold's slot: %v, want PAID", u, o)
		}
	}
	for u, id := range backlog {
		if o := s.final(u, id); o["status"] != "REJECTED" || o["reason"] != "hold_lapsed" {
			t.Errorf("%s's order, taken after its slot was given away: %v, want REJECTED hold_lapsed", u, o)
		}
		if n := s.charges(id); n != 0 {
			t.Errorf("%s was charged %d time(s) for an order on a slot given away", u, n)
		}
	}
	if n := s.charges(""); n != 2 {
		t.Errorf("pgsim captured %d payments, want 2 (cal's and dan's)", n)
	}
	if m := most(); m > 2 {
		t.Errorf("the queue held %d slots at once, targetActive 2", m)
	}
}

// Whoever holds the gateway's Redis password (its ACL user) can write the
// line: make a waiting shopper admitted, whom the gateway then serves a
// token and takes an order from. That skips the line no more: the order
// worker charges only for an admission USHER_ADMISSIONS recorded, so the
// order ends REJECTED token_unconfirmed, nothing charged, and usherctl
// audit lists it.
func TestAStolenGatewayRedisPasswordDoesNotSkipTheLine(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	data := t.TempDir()
	redisDir := waitqueue.DefaultPasswordDir(data)
	if out, err := exec.Command(filepath.Join(bins, "usherctl"), "redis-acl", "--dir", redisDir).CombinedOutput(); err != nil {
		t.Fatalf("usherctl redis-acl: %v\n%s", err, out)
	}
	redisURL, _ := testenv.RedisServerWith(t, "--aclfile", filepath.Join(redisDir, redisacl.AuthFile))
	s := newShopOf(t, []string{"pgsim", "gateway", "admitter", "notifier", "orderworker"},
		"USHER_REDIS_URL", redisURL, "USHER_DATA_DIR", data, "USHER_ORDER_DEADLINE", "3s")
	sku := "sku-" + s.queue
	s.stock(sku, 5)
	s.configure(fmt.Sprintf(`{"targetActive": 1, "tickMs": 20, "sku": %q}`, sku))
	ann := s.mustJoin("ann")
	annTok := s.ready(ann, "ann")
	mallory := s.mustJoin("mallory")
	s.waitStatus(mallory, "WAITING", "")

	// Mallory, with the gateway's password, admits herself.
	stolen := redisacl.UserOf("gateway")
	rdb, err := waitqueue.Connect(ctx, waitqueue.Settings{URL: redisURL, Pool: 1, User: stolen,
		Password: waitqueue.PasswordFile(redisacl.PasswordFile(redisDir, stolen))})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	part := strings.Split(mallory, ".") // t2.<queue>.<user>.<epoch>.<seq>.<mac>
	epoch, seq := part[3], part[4]
	n, _ := strconv.ParseUint(seq, 10, 64)
	k := keyspace.Of(s.queue)
	now := time.Now().UnixMilli()
	if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, k.Entry(n), "status", "admitted", "tokenId", waitqueue.TokenID(s.queue, epoch, n),
			"readyAt", now-1000, "expiresAt", now+300_000)
		p.ZRem(ctx, k.Waiting(), seq)
		p.ZAdd(ctx, k.Active(), redis.Z{Score: float64(now + 300_000), Member: seq})
		p.HSet(ctx, k.Held(), seq, "a")
		return nil
	}); err != nil {
		t.Fatalf("writing the line as %s: %v", stolen, err)
	}
	code, o := s.order("mallory", s.ready(mallory, "mallory"), fmt.Sprintf(`{"sku": %q}`, sku))
	if code != 202 {
		t.Fatalf("mallory's order = %d %v, want 202 (the gateway trusts the line)", code, o)
	}
	id := o["orderId"].(string)
	if o := s.final("mallory", id); o["status"] != "REJECTED" || o["reason"] != "token_unconfirmed" {
		t.Fatalf("mallory's order = %v, want REJECTED token_unconfirmed", o)
	}
	if n := s.charges(id); n != 0 {
		t.Fatalf("mallory was charged %d time(s)", n)
	}
	if o := s.buy("ann", annTok, fmt.Sprintf(`{"sku": %q}`, sku)); o["status"] != "PAID" {
		t.Fatalf("ann's order = %v, want PAID", o)
	}

	audit := exec.Command(filepath.Join(bins, "usherctl"), "audit", "--queue", s.queue)
	audit.Env = []string{"USHER_NATS_URL=" + s.env["USHER_NATS_URL"]}
	out, err := audit.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "VIOLATED every order's token admitted on the stream: 1 exception") ||
		!strings.Contains(string(out), "order "+id+" of mallory") {
		t.Fatalf("usherctl audit = %v\n%s\nwant mallory's order listed", err, out)
	}
}
