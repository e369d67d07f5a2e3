package e2e

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"usher/internal/testenv"
)

// shop is the whole of usher with the order path: every service as its
// binary, on real NATS, Redis and PostgreSQL, and pgsim.
type shop struct {
	t        *testing.T
	base     string
	admin    map[string]string
	queue    string
	adm      string // the admitter's address
	nt       string // the notifier's
	admitter *service
	env      map[string]string   // every service's environment
	running  map[string]*service // the services started, by name
}

// with is s reporting to t (a subtest's).
func (s *shop) with(t *testing.T) *shop {
	c := *s
	c.t = t
	return &c
}

func newShop(t *testing.T, extra ...string) *shop {
	t.Helper()
	return newShopOf(t, []string{"pgsim", "gateway", "admitter", "notifier", "orderworker"}, extra...)
}

// newShopOf is newShop running only the services named (the others can be
// started later with start(t, name, s.env)).
func newShopOf(t *testing.T, names []string, extra ...string) *shop {
	t.Helper()
	return startShop(t, stackEnv(t, append([]string{"PGSIM_LATENCY_MEAN_MS", "5"}, extra...)...), names)
}

// startShop starts the services named on env (stackEnv's) and waits until
// they are ready.
func startShop(t *testing.T, env map[string]string, names []string) *shop {
	t.Helper()
	s := &shop{t: t, base: "http://" + env["USHER_GATEWAY_ADDR"], admin: map[string]string{"Authorization": "Bearer e2e-admin"},
		queue: testenv.Name(t), adm: env["USHER_ADMITTER_ADDR"], nt: env["USHER_NOTIFIER_ADDR"], env: env,
		running: map[string]*service{}}
	var ready []string
	for _, name := range names {
		svc := start(t, name, env)
		if name == "admitter" {
			s.admitter = svc
		}
		s.running[name] = svc
		if a, ok := env["USHER_"+strings.ToUpper(name)+"_ADDR"]; ok {
			ready = append(ready, "http://"+a)
		}
	}
	waitReady(t, 30*time.Second, ready...)
	return s
}

// stock sets a SKU's units and returns the answer.
func (s *shop) stock(sku string, n int) map[string]any {
	s.t.Helper()
	code, body := call(s.t, "PUT", s.base+"/v1/admin/stock/"+sku, fmt.Sprintf(`{"available": %d}`, n), s.admin)
	if code != 200 {
		s.t.Fatalf("stock %s = %d %v", sku, code, body)
	}
	return body
}

func (s *shop) configure(cfg string) {
	s.t.Helper()
	if code, body := call(s.t, "PUT", s.base+"/v1/admin/queues/"+s.queue, cfg, s.admin); code >= 300 {
		s.t.Fatalf("configure %s = %d %v", s.queue, code, body)
	}
}

func (s *shop) join(user string) (int, map[string]any) {
	s.t.Helper()
	return call(s.t, "POST", s.base+"/v1/queues/"+s.queue+"/tickets", "", map[string]string{"X-User-Id": user})
}

func (s *shop) mustJoin(user string) string {
	s.t.Helper()
	code, body := s.join(user)
	if code != 202 {
		s.t.Fatalf("join %s = %d %v", user, code, body)
	}
	return body["ticket"].(string)
}

func (s *shop) poll(tk string) map[string]any {
	s.t.Helper()
	_, body := call(s.t, "GET", s.base+"/v1/queues/"+s.queue+"/tickets/"+tk, "", nil)
	return body
}

// ready waits until the ticket is READY and returns its token.
func (s *shop) ready(tk, who string) string {
	s.t.Helper()
	var tok string
	testenv.Eventually(s.t, 15*time.Second, func() error {
		body := s.poll(tk)
		if tok, _ = body["token"].(string); body["status"] != "READY" {
			return fmt.Errorf("%v", body)
		}
		return nil
	}, "%s READY", who)
	return tok
}

func (s *shop) order(user, tok, body string) (int, map[string]any) {
	s.t.Helper()
	return call(s.t, "POST", s.base+"/v1/orders", body, map[string]string{"X-User-Id": user, "Authorization": "Bearer " + tok})
}

// final waits until the order is final and returns it.
func (s *shop) final(user, id string) map[string]any {
	s.t.Helper()
	var out map[string]any
	testenv.Eventually(s.t, 20*time.Second, func() error {
		_, out = call(s.t, "GET", s.base+"/v1/orders/"+id, "", map[string]string{"X-User-Id": user})
		if st := out["status"]; st == "PENDING" || st == nil {
			return fmt.Errorf("%v", out)
		}
		return nil
	}, "order %s final", id)
	return out
}

// buy orders with the token and waits for the outcome.
func (s *shop) buy(user, tok, body string) map[string]any {
	s.t.Helper()
	code, o := s.order(user, tok, body)
	if code != 202 {
		s.t.Fatalf("order of %s = %d %v", user, code, o)
	}
	return s.final(user, o["orderId"].(string))
}

// waitStatus waits until the ticket's poll answers status (and stock, when
// given).
func (s *shop) waitStatus(tk, status, stock string) map[string]any {
	s.t.Helper()
	var body map[string]any
	testenv.Eventually(s.t, 10*time.Second, func() error {
		body = s.poll(tk)
		if body["status"] != status || (stock != "" && body["stock"] != stock) {
			return fmt.Errorf("%v", body)
		}
		return nil
	}, "ticket %s… %s %s", tk[:12], status, stock)
	return body
}

// Two units, one slot, three shoppers. The first two
// buy the two units; the third, still waiting, is never admitted: the line
// closes as sold out the moment the last unit is paid, she is told so, and
// new joins get 410.
func TestSoldOutClosesTheLineAtOnce(t *testing.T) {
	t.Parallel()
	s := newShop(t)
	sku := "sku-" + s.queue
	s.stock(sku, 2)
	s.configure(fmt.Sprintf(`{"targetActive": 1, "tickMs": 20, "sku": %q}`, sku))
	ann, ben, cal := s.mustJoin("ann"), s.mustJoin("ben"), s.mustJoin("cal")
	if o := s.buy("ann", s.ready(ann, "ann"), fmt.Sprintf(`{"sku": %q}`, sku)); o["status"] != "PAID" {
		t.Fatalf("ann's order = %v", o)
	}
	benTok := s.ready(ben, "ben")
	// One unit left and it is ben's: cal waits with the stock held, not
	// admitted, although the slot count would let her in.
	s.waitStatus(cal, "WAITING", "held")
	if o := s.buy("ben", benTok, fmt.Sprintf(`{"sku": %q}`, sku)); o["status"] != "PAID" {
		t.Fatalf("ben's order = %v", o)
	}
	body := s.waitStatus(cal, "CLOSED", "")
	if body["reason"] != "sold_out" || body["token"] != nil {
		t.Fatalf("cal = %v, want CLOSED sold_out and never a token", body)
	}
	if code, body := s.join("dan"); code != 410 || body["reason"] != "sold_out" {
		t.Fatalf("join after sold out = %d %v, want 410 with reason sold_out", code, body)
	}
	// Ops see it per SKU: nothing available, held or pending; two sold.
	_, q := call(t, "GET", s.base+"/v1/admin/queues/"+s.queue, "", s.admin)
	stock, _ := q["stock"].(map[string]any)
	skus, _ := stock["skus"].([]any)
	if stock["state"] != "sold_out" || len(skus) != 1 {
		t.Fatalf("admin view stock = %v, want sold_out with one SKU", q["stock"])
	}
	if k := skus[0].(map[string]any); k["available"] != 0.0 || k["held"] != 0.0 || k["pending"] != 0.0 || k["sold"] != 2.0 {
		t.Fatalf("SKU figures = %v, want 0 available, held, pending and 2 sold", k)
	}
}

// Held is not gone: a unit comes back when a token expires unused or a
// shopper leaves, and the next shopper in line is admitted for it; a
// restock while held admits more.
func TestHeldUnitsComeBackToTheNextInLine(t *testing.T) {
	t.Parallel()
	s := newShop(t)
	sku := "sku-" + s.queue
	s.stock(sku, 1)
	s.configure(fmt.Sprintf(`{"targetActive": 5, "tickMs": 20, "tokenTtlSeconds": 2, "sku": %q}`, sku))
	ann, ben, cal := s.mustJoin("ann"), s.mustJoin("ben"), s.mustJoin("cal")
	s.ready(ann, "ann")
	s.waitStatus(ben, "WAITING", "held")
	// ann lets her token expire: the unit comes back, ben gets it.
	s.waitStatus(ann, "EXPIRED", "")
	s.ready(ben, "ben")
	s.waitStatus(cal, "WAITING", "held")
	// ben leaves: the unit comes back, cal gets it.
	if code, _ := call(t, "DELETE", s.base+"/v1/queues/"+s.queue+"/tickets/"+ben, "", nil); code != 204 {
		t.Fatalf("leave = %d", code)
	}
	calTok := s.ready(cal, "cal")
	// Restocked while held: the next shoppers are admitted at once. The
	// answer to a join is the view a poll gives: the last unit is held
	// (for eve, second in line, too: her answer comes from the ingest
	// alone, which did not read the line's figures).
	dan := s.mustJoin("dan")
	code, joined := s.join("eve")
	if code != 202 || joined["status"] != "WAITING" || joined["position"] != 2.0 || joined["stock"] != "held" {
		t.Fatalf("eve's join = %d %v, want 202 WAITING second in line with stock held", code, joined)
	}
	s.waitStatus(dan, "WAITING", "held")
	s.stock(sku, 3) // cal holds one of them
	s.ready(dan, "dan")
	if o := s.buy("cal", calTok, fmt.Sprintf(`{"sku": %q}`, sku)); o["status"] != "PAID" {
		t.Fatalf("cal's order = %v", o)
	}
}

// A stock-aware queue whose SKU the store has no stock for admits nobody —
// it cannot know whether a unit is left — and the admitter says so once,
// naming the SKU, rather than leaving the operators to wonder why the line
// does not move. Setting the stock starts it.
func TestAQueueOfAnUnstockedSKUWaitsAndSaysWhy(t *testing.T) {
	t.Parallel()
	s := newShop(t)
	sku := "sku-" + s.queue
	s.configure(fmt.Sprintf(`{"targetActive": 5, "tickMs": 20, "sku": %q}`, sku))
	ann := s.mustJoin("ann")
	testenv.Eventually(t, 10*time.Second, func() error {
		out := s.admitter.output()
		if !strings.Contains(out, "SKUs without stock") || !strings.Contains(out, sku) {
			return fmt.Errorf("admitter said nothing of %s yet", sku)
		}
		return nil
	}, "the admitter names the SKU without stock")
	if body := s.poll(ann); body["status"] != "WAITING" {
		t.Fatalf("ann = %v; want WAITING: nobody is admitted while the stock is unknown", body)
	}
	s.stock(sku, 1)
	s.ready(ann, "ann")
	if n := strings.Count(s.admitter.output(), "SKUs without stock"); n != 1 {
		t.Errorf("the admitter said it %d times; want once", n)
	}
}

// A queue closed because it sold out reopens when its SKU is restocked:
// the shoppers who were in line are admitted first.
func TestARestockReopensASoldOutQueue(t *testing.T) {
	t.Parallel()
	s := newShop(t)
	sku := "sku-" + s.queue
	s.stock(sku, 1)
	s.configure(fmt.Sprintf(`{"targetActive": 1, "tickMs": 20, "sku": %q}`, sku))
	ann, ben := s.mustJoin("ann"), s.mustJoin("ben")
	s.buy("ann", s.ready(ann, "ann"), fmt.Sprintf(`{"sku": %q}`, sku))
	s.waitStatus(ben, "CLOSED", "")
	if body := s.stock(sku, 1); fmt.Sprint(body["reopened"]) != "["+s.queue+"]" {
		t.Fatalf("restock = %v, want the queue reopened", body)
	}
	eve := s.mustJoin("eve") // joins after the reopening: behind ben
	s.ready(ben, "ben")
	if body := s.poll(eve); body["status"] != "WAITING" {
		t.Fatalf("eve = %v, want WAITING behind ben", body)
	}
}

// Quantities: an order for more units than remain is REJECTED
// insufficient_stock and the line stays open while units remain; a user
// who bought maxPerUser units is refused at join (403 already-purchased).
func TestQuantitiesAndTheLimitPerUser(t *testing.T) {
	t.Parallel()
	s := newShop(t)
	sku := "sku-" + s.queue
	// Three units: ann's two leave one, so the queue stays open and her
	// second join meets the limit per user, not a sold-out queue (410
	// comes first when both hold).
	s.stock(sku, 3)
	s.configure(fmt.Sprintf(`{"targetActive": 1, "tickMs": 20, "sku": %q, "maxQuantity": 3, "maxPerUser": 2}`, sku))
	ann := s.mustJoin("ann")
	o := s.buy("ann", s.ready(ann, "ann"), fmt.Sprintf(`{"sku": %q, "quantity": 2}`, sku))
	if o["status"] != "PAID" {
		t.Fatalf("ann's order of 2 = %v", o)
	}
	if code, body := s.join("ann"); code != 403 || !strings.Contains(fmt.Sprint(body["type"]), "already-purchased") {
		t.Fatalf("ann joining again = %d %v, want 403 already-purchased", code, body)
	}
	s.configure(fmt.Sprintf(`{"targetActive": 1, "tickMs": 20, "sku": %q, "maxQuantity": 3, "maxPerUser": 5}`, sku))
	s.stock(sku, 2)
	ben := s.mustJoin("ben")
	o = s.buy("ben", s.ready(ben, "ben"), fmt.Sprintf(`{"sku": %q, "quantity": 3}`, sku))
	if o["status"] != "REJECTED" || o["reason"] != "insufficient_stock" {
		t.Fatalf("ben's order of 3 with 2 left = %v, want REJECTED insufficient_stock", o)
	}
	cal := s.mustJoin("cal")
	if code, _ := s.join("dan"); code != 202 {
		t.Fatalf("a join after the insufficient order = %d, want the line still open", code)
	}
	s.ready(cal, "cal")
}

// Two shoppers order the last unit at once: one is PAID, the other is
// REJECTED sold_out, and nobody is charged twice or for nothing.
func TestTwoShoppersOrderingTheLastUnit(t *testing.T) {
	t.Parallel()
	s := newShop(t)
	sku := "sku-" + s.queue
	s.stock(sku, 2)
	s.configure(fmt.Sprintf(`{"targetActive": 2, "tickMs": 20, "sku": %q}`, sku))
	ann, ben := s.mustJoin("ann"), s.mustJoin("ben")
	toks := map[string]string{"ann": s.ready(ann, "ann"), "ben": s.ready(ben, "ben")}
	s.stock(sku, 1) // an operator takes one unit away
	var wg sync.WaitGroup
	outcomes := map[string]map[string]any{}
	var mu sync.Mutex
	for user, tok := range toks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := s.buy(user, tok, fmt.Sprintf(`{"sku": %q}`, sku))
			mu.Lock()
			outcomes[user] = o
			mu.Unlock()
		}()
	}
	wg.Wait()
	paid, rejected := 0, 0
	for _, o := range outcomes {
		switch {
		case o["status"] == "PAID":
			paid++
		case o["status"] == "REJECTED" && o["reason"] == "sold_out":
			rejected++
		}
	}
	if paid != 1 || rejected != 1 {
		t.Fatalf("outcomes = %v, want one PAID and one REJECTED sold_out", outcomes)
	}
}

// A token that expires while its order is on its way (the payment gateway
// is slow) is judged at the order's request: the order is PAID, and the
// slot stays held meanwhile (nobody is admitted for the unit).
func TestATokenExpiringWhileItsShopperOrders(t *testing.T) {
	t.Parallel()
	s := newShop(t, "PGSIM_LATENCY_MEAN_MS", "1500", "PGSIM_LATENCY_TAIL", "0")
	sku := "sku-" + s.queue
	s.stock(sku, 1)
	s.configure(fmt.Sprintf(`{"targetActive": 1, "tickMs": 20, "tokenTtlSeconds": 1, "sku": %q}`, sku))
	ann, ben := s.mustJoin("ann"), s.mustJoin("ben")
	o := s.buy("ann", s.ready(ann, "ann"), fmt.Sprintf(`{"sku": %q}`, sku))
	if o["status"] != "PAID" {
		t.Fatalf("ann's order = %v, want PAID although her token expired while it was paid", o)
	}
	if body := s.waitStatus(ben, "CLOSED", ""); body["reason"] != "sold_out" {
		t.Fatalf("ben = %v, want CLOSED sold_out, never admitted for the unit ann held", body)
	}
}

// Two queues selling one SKU share its units, through the real services:
// ten in the store, fifteen shoppers in each line, and ten READY between
// both queues — never more — where each queue admitted ten on its own
// count (twenty READY, ten of them bound to end REJECTED sold_out).
func TestTwoQueuesSellingOneSKUShareItsUnits(t *testing.T) {
	t.Parallel()
	s := newShop(t)
	sku := "sku-" + s.queue
	s.stock(sku, 10)
	other := s.queue + "-2"
	cfg := fmt.Sprintf(`{"targetActive": 20, "tickMs": 20, "sku": %q}`, sku)
	s.configure(cfg)
	if code, body := call(t, "PUT", s.base+"/v1/admin/queues/"+other, cfg, s.admin); code >= 300 {
		t.Fatalf("configure %s = %d %v", other, code, body)
	}
	type ticket struct{ queue, tk string }
	var tickets []ticket
	for i := range 15 {
		for _, q := range []string{s.queue, other} {
			user := fmt.Sprintf("%s-%d", q[len(q)-2:], i)
			code, body := call(t, "POST", s.base+"/v1/queues/"+q+"/tickets", "", map[string]string{"X-User-Id": user})
			if code != 202 {
				t.Fatalf("join %s to %s = %d %v", user, q, code, body)
			}
			tickets = append(tickets, ticket{q, body["ticket"].(string)})
		}
	}
	ready := func() int {
		n := 0
		for _, tk := range tickets {
			_, body := call(t, "GET", s.base+"/v1/queues/"+tk.queue+"/tickets/"+tk.tk, "", nil)
			if body["status"] == "READY" {
				n++
			}
		}
		return n
	}
	testenv.Eventually(t, 15*time.Second, func() error {
		if n := ready(); n > 10 {
			t.Fatalf("%d READY across the two queues for 10 units", n)
		} else if n < 10 {
			return fmt.Errorf("%d READY", n)
		}
		return nil
	}, "ten READY across the two queues")
	// Ticks go on (fifty of them here): nobody more is admitted while the
	// ten hold the units.
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if n := ready(); n != 10 {
			t.Fatalf("%d READY across the two queues, want 10 for 10 units", n)
		}
	}
}
