package ledger_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"usher/internal/keyspace"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/linetest"
	"usher/internal/waitqueue/roles"
)

// sharing is queues of one Redis that sell some of the same SKUs, each
// with its own stock-aware tick.
type sharing struct {
	t      *testing.T
	rdb    redis.UniversalClient
	s      *roles.All
	queues map[string][]string // queue → its SKUs
	order  []string
}

func newSharing(t *testing.T, rdb redis.UniversalClient) *sharing {
	return &sharing{t: t, rdb: rdb, s: roles.New(rdb), queues: map[string][]string{}}
}

// add is a queue selling skus, with users joined (u1…un at stream
// sequences 1…n).
func (sh *sharing) add(q string, n int, skus ...string) string {
	sh.t.Helper()
	sh.queues[q] = skus
	sh.order = append(sh.order, q)
	linetest.JoinAll(sh.t, sh.s, q, linetest.Users(n)...)
	return q
}

// share is what q's admission shares: its SKUs and every other queue
// selling any of them, as the catalog would say.
func (sh *sharing) share(q string) waitqueue.Share {
	out := waitqueue.Share{SKUs: sh.queues[q]}
	for _, o := range sh.order {
		if o == q {
			continue
		}
		for _, sku := range sh.queues[o] {
			if strings.Contains(","+strings.Join(sh.queues[q], ",")+",", ","+sku+",") {
				out.Peers = append(out.Peers, o)
				break
			}
		}
	}
	return out
}

// stock records the SKUs' units in every queue's line that sells them, as
// the admitter's refresh does (version v).
func (sh *sharing) stock(v int64, units map[string]int64) {
	sh.t.Helper()
	for _, q := range sh.order {
		var levels []waitqueue.StockLevel
		for _, sku := range sh.queues[q] {
			if n, ok := units[sku]; ok {
				levels = append(levels, waitqueue.StockLevel{SKU: sku, Available: n, Version: v})
			}
		}
		if err := sh.s.SetStock(context.Background(), q, false, levels...); err != nil {
			sh.t.Fatal(err)
		}
	}
}

func (sh *sharing) tickOf(q string, target int) waitqueue.Tick {
	return waitqueue.Tick{Epoch: epoch, TargetActive: target, TickLength: 5 * time.Millisecond, TokenTTL: time.Minute,
		StockAware: true, Share: sh.share(q)}
}

// tick runs one stock-aware tick of q at targetActive target.
func (sh *sharing) tick(q string, target int) waitqueue.TickResult {
	sh.t.Helper()
	return testenv.Tick(sh.t, sh.s, q, sh.tickOf(q, target))
}

func (sh *sharing) active(q string) int64 {
	sh.t.Helper()
	n, err := sh.rdb.ZCard(context.Background(), keyspace.Of(q).Active()).Result()
	if err != nil {
		sh.t.Fatal(err)
	}
	return n
}

// claim orders qty units of sku with the token of q's admitted entry seq.
func (sh *sharing) claim(q string, seq uint64, sku string, qty int) {
	sh.t.Helper()
	e, err := sh.s.Poll(context.Background(), q, seq)
	if err != nil || e.Status != waitqueue.Admitted {
		sh.t.Fatalf("%s/%d = %+v, %v; want admitted", q, seq, e, err)
	}
	cl, err := sh.s.Claim(context.Background(), q, seq, waitqueue.Order{ID: fmt.Sprintf("o-%s-%d", q, seq), TokenID: e.TokenID,
		User: e.User, SKU: sku, Quantity: qty}, time.Minute)
	if err != nil || cl.Outcome != waitqueue.Redeemed {
		sh.t.Fatalf("claim of %s/%d = %+v, %v", q, seq, cl, err)
	}
}

// Queues selling one SKU share its units: ten units, fifteen waiting in
// each of two lines, ticks taking turns — ten admitted between them, and
// neither line is told it sold out while the other's shoppers hold units
// (held: they may come back).
func TestQueuesSellingOneSKUShareItsUnits(t *testing.T) {
	sh := newSharing(t, testenv.Redis(t))
	sku := "sku-" + testenv.Name(t)
	a := sh.add(testenv.Name(t)+"-a", 15, sku)
	b := sh.add(testenv.Name(t)+"-b", 15, sku)
	sh.stock(1, map[string]int64{sku: 10})
	for range 5 {
		sh.tick(a, 4)
		sh.tick(b, 4)
		if na, nb := sh.active(a), sh.active(b); na+nb > 10 {
			t.Fatalf("%d + %d admitted for 10 units", na, nb)
		}
	}
	sh.tick(a, 20)
	ra, rb := sh.tick(a, 20), sh.tick(b, 20)
	if na, nb := sh.active(a), sh.active(b); na+nb != 10 || na == 0 || nb == 0 {
		t.Fatalf("%d + %d admitted, want 10 between both lines", na, nb)
	}
	for _, r := range []waitqueue.TickResult{ra, rb} {
		if r.Stock != waitqueue.StockHeld || r.Sellable != 0 {
			t.Fatalf("tick = %+v, want stock held, nothing sellable", r)
		}
	}
}

// Lines waiting for the last units take turns: while another line waits,
// one tick's grant is an even share of what is left (rounded up), so a
// line with one shopper to admit never holds back the other's every unit
// for its step, and none is left over.
func TestWaitingLinesShareWhatIsLeftEvenly(t *testing.T) {
	sh := newSharing(t, testenv.Redis(t))
	sku := "sku-" + testenv.Name(t)
	a := sh.add(testenv.Name(t)+"-a", 10, sku)
	b := sh.add(testenv.Name(t)+"-b", 10, sku)
	sh.stock(1, map[string]int64{sku: 6})
	sh.tick(a, 0) // both report their lines: nobody admitted
	sh.tick(b, 0)
	for i, want := range []int{3, 2, 1, 0} {
		q := []string{a, b}[i%2]
		if r := sh.tick(q, 20); r.Admitted != want {
			t.Fatalf("tick %d (%s) admitted %d, want %d: half of what is left", i, q, r.Admitted, want)
		}
	}
}

// A queue the catalog names as sharing the SKU, which has never reported
// what its line holds, may hold any of it: nobody is admitted until it
// has (its first tick).
func TestAPeerThatNeverReportedHoldsAdmissionBack(t *testing.T) {
	sh := newSharing(t, testenv.Redis(t))
	sku := "sku-" + testenv.Name(t)
	a := sh.add(testenv.Name(t)+"-a", 3, sku)
	b := sh.add(testenv.Name(t)+"-b", 0, sku)
	sh.stock(1, map[string]int64{sku: 10})
	if r := sh.tick(a, 5); r.Admitted != 0 {
		t.Fatalf("a's tick before b ever reported admitted %d, want nobody", r.Admitted)
	}
	sh.tick(b, 5)
	if r := sh.tick(a, 5); r.Admitted != 3 {
		t.Fatalf("a's tick once b reported admitted %d, want 3", r.Admitted)
	}
}

// A claim of several units counts for the queues sharing the SKU at once,
// not at its queue's next tick: five units, ann admitted in a and ordering
// four — b's next tick admits one, not four.
func TestAClaimOfSeveralUnitsCountsForTheOtherQueuesAtOnce(t *testing.T) {
	sh := newSharing(t, testenv.Redis(t))
	sku := "sku-" + testenv.Name(t)
	a := sh.add(testenv.Name(t)+"-a", 1, sku)
	b := sh.add(testenv.Name(t)+"-b", 5, sku)
	sh.stock(1, map[string]int64{sku: 5})
	sh.tick(b, 0)
	if r := sh.tick(a, 5); r.Admitted != 1 {
		t.Fatalf("a admitted %d, want ann", r.Admitted)
	}
	sh.claim(a, 1, sku, 4)
	if r := sh.tick(b, 5); r.Admitted != 1 || r.Stock != waitqueue.StockHeld {
		t.Fatalf("b's tick with 4 of 5 units claimed in a = %+v, want 1 admitted, stock held", r)
	}
}

// A placed order's units leave the store's figure and the line's holdings
// in one step of its queue. The other queue may learn the store's new
// figure first (its admitter's refresh): it then counts the placed units
// twice — gone from the store and still claimed — until the placing
// queue's next report; never the other way round.
func TestAPlacedOrderCountsOnceForTheOtherQueue(t *testing.T) {
	ctx := context.Background()
	sh := newSharing(t, testenv.Redis(t))
	sku := "sku-" + testenv.Name(t)
	a := sh.add(testenv.Name(t)+"-a", 1, sku)
	b := sh.add(testenv.Name(t)+"-b", 10, sku)
	sh.stock(1, map[string]int64{sku: 5})
	sh.tick(b, 0)
	sh.tick(a, 5)
	sh.claim(a, 1, sku, 2)
	if r := sh.tick(b, 1); r.Admitted != 1 || r.Sellable != 2 {
		t.Fatalf("b's tick with ann's 2 claimed = %+v, want 1 admitted, 5 - 2 - 1 = 2 sellable", r)
	}
	// The store places ann's order: 3 left at version 2.
	if err := sh.s.Placed(ctx, a, 1, "o-"+a+"-1", waitqueue.StockLevel{SKU: sku, Available: 3, Version: 2}); err != nil {
		t.Fatal(err)
	}
	if err := sh.s.SetStock(ctx, b, false, waitqueue.StockLevel{SKU: sku, Available: 3, Version: 2}); err != nil {
		t.Fatal(err)
	}
	if r := sh.tick(b, 1); r.Sellable != 0 {
		t.Fatalf("b's tick knowing the placement before a reported it = %+v, want 3 - 2 (still claimed) - 1 = 0", r)
	}
	sh.tick(a, 0) // reports: ann's 2 no longer claimed
	if r := sh.tick(b, 1); r.Sellable != 2 {
		t.Fatalf("b's tick after a reported the placement = %+v, want 3 - 1 = 2", r)
	}
}

// An order the order worker redeemed without the gateway's claim (after a
// Redis loss) names no SKU on the line: it holds a unit of any of its
// queue's SKUs, for the other queues too.
func TestAnOrderRedeemedWithoutAClaimHoldsAUnitForTheOtherQueues(t *testing.T) {
	ctx := context.Background()
	sh := newSharing(t, testenv.Redis(t))
	sku := "sku-" + testenv.Name(t)
	a := sh.add(testenv.Name(t)+"-a", 1, sku)
	b := sh.add(testenv.Name(t)+"-b", 0, sku)
	sh.stock(1, map[string]int64{sku: 2})
	sh.tick(b, 0)
	sh.tick(a, 1)
	e, err := sh.s.Poll(ctx, a, 1)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := sh.s.Redeem(ctx, a, 1, e.TokenID, "o-redeemed", time.Now().Add(time.Minute)); err != nil || r != waitqueue.Redeemed {
		t.Fatalf("Redeem = %v, %v", r, err)
	}
	sh.tick(a, 1) // reports
	linetest.ApplyKind(t, sh.s, b, 0, waitqueue.InLine, 1, 2)
	if r := sh.tick(b, 5); r.Admitted != 1 {
		t.Fatalf("b admitted %d with one of 2 units in a's redeemed order, want 1", r.Admitted)
	}
}

// A queue of variants counts its unordered shoppers against every queue
// sharing any of its SKUs, for they may buy any of its variants: a sells
// x (2) and y (10), b sells x alone. Twelve admitted in a leave b nothing.
func TestAQueueOfVariantsCountsForEveryQueueSharingOne(t *testing.T) {
	sh := newSharing(t, testenv.Redis(t))
	x, y := "x-"+testenv.Name(t), "y-"+testenv.Name(t)
	a := sh.add(testenv.Name(t)+"-a", 12, x, y)
	b := sh.add(testenv.Name(t)+"-b", 0, x)
	sh.stock(1, map[string]int64{x: 2, y: 10})
	sh.tick(b, 0)
	if r := sh.tick(a, 20); r.Admitted != 12 {
		t.Fatalf("a admitted %d, want 12 for 12 units", r.Admitted)
	}
	linetest.ApplyKind(t, sh.s, b, 0, waitqueue.InLine, 1, 2, 3)
	if r := sh.tick(b, 20); r.Admitted != 0 {
		t.Fatalf("b admitted %d with a's 12 shoppers able to buy both units of x, want nobody", r.Admitted)
	}
}

// A tick that reserved units and never used them (its admitter crashed
// between the ledger and the line) keeps them from the other queues only
// until its queue's next report.
func TestAReservationNeverUsedIsReleasedByTheNextReport(t *testing.T) {
	sh := newSharing(t, testenv.Redis(t))
	sku := "sku-" + testenv.Name(t)
	a := sh.add(testenv.Name(t)+"-a", 0, sku)
	b := sh.add(testenv.Name(t)+"-b", 0, sku)
	sh.stock(1, map[string]int64{sku: 4})
	sh.tick(a, 0)
	sh.tick(b, 0)
	if got, err := sh.s.Reserve(context.Background(), a, sh.share(a), 4); err != nil || got.Grant != 4 {
		t.Fatalf("a's reservation = %d, %v; want all 4", got.Grant, err)
	}
	linetest.ApplyKind(t, sh.s, b, 0, waitqueue.InLine, 1, 2, 3, 4)
	if r := sh.tick(b, 4); r.Admitted != 0 {
		t.Fatalf("b admitted %d while a's reservation holds every unit, want nobody", r.Admitted)
	}
	sh.tick(a, 4) // nobody waits in a: it admits nobody, and reports
	if r := sh.tick(b, 4); r.Admitted != 4 {
		t.Fatalf("b admitted %d after a's report, want 4", r.Admitted)
	}
}

// A queue that no longer follows stock leaves the ledger: the queues it
// shared the SKU with no longer count what its line holds.
func TestAQueueNoLongerFollowingStockLeavesTheLedger(t *testing.T) {
	sh := newSharing(t, testenv.Redis(t))
	sku := "sku-" + testenv.Name(t)
	a := sh.add(testenv.Name(t)+"-a", 3, sku)
	b := sh.add(testenv.Name(t)+"-b", 0, sku)
	sh.stock(1, map[string]int64{sku: 3})
	sh.tick(b, 0)
	if r := sh.tick(a, 3); r.Admitted != 3 {
		t.Fatalf("a admitted %d, want 3", r.Admitted)
	}
	linetest.ApplyKind(t, sh.s, b, 0, waitqueue.InLine, 1, 2, 3)
	if r := sh.tick(b, 3); r.Admitted != 0 {
		t.Fatalf("b admitted %d with a holding every unit", r.Admitted)
	}
	off := sh.tickOf(a, 3)
	off.StockAware, off.Share = false, waitqueue.Share{}
	testenv.Tick(t, sh.s, a, off)
	sh.order, sh.queues[a] = sh.order[1:], nil // the catalog no longer names a as sharing the SKU
	if r := sh.tick(b, 3); r.Admitted != 3 {
		t.Fatalf("b admitted %d once a no longer follows stock, want 3", r.Admitted)
	}
}

// The ledger is derived: lost, it is reported anew by the queues' ticks,
// and no queue admits beyond the units meanwhile.
func TestALostLedgerIsReportedAnew(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.OwnRedis(t)
	sh := newSharing(t, rdb)
	sku := "sku-" + testenv.Name(t)
	a := sh.add(testenv.Name(t)+"-a", 10, sku)
	b := sh.add(testenv.Name(t)+"-b", 10, sku)
	sh.stock(1, map[string]int64{sku: 8})
	for range 3 {
		sh.tick(a, 2)
		sh.tick(b, 2)
	}
	keys, err := rdb.Keys(ctx, keyspace.StockLedger+"*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("ledger keys = %v, %v", keys, err)
	}
	if err := rdb.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}
	for range 6 {
		sh.tick(a, 20)
		sh.tick(b, 20)
		if na, nb := sh.active(a), sh.active(b); na+nb > 8 {
			t.Fatalf("%d + %d admitted for 8 units after the ledger was lost", na, nb)
		}
	}
	if na, nb := sh.active(a), sh.active(b); na+nb != 8 {
		t.Fatalf("%d + %d admitted, want all 8 units once the queues reported again", na, nb)
	}
}

// heldAcross counts what every queue's line holds of the stock, in one
// atomic step (one Redis, no cluster: a test's view): unordered shoppers
// one unit each, claims not placed yet their quantity.
var heldAcross = redis.NewScript(`
local held = 0
for _, k in ipairs(KEYS) do
  for _, v in ipairs(redis.call('HVALS', k)) do
    if v == 'a' then held = held + 1
    else
      local kind, q = string.match(v, '^(%a):(%d+):')
      if kind == 'c' then held = held + tonumber(q) end
    end
  end
end
return held
`)

// Three queues selling one SKU, each ticked and admitting at once from
// goroutines of their own, as many admitters and gateways do, and shoppers
// leaving (their units come back): at no moment do the three lines' unordered
// shoppers hold more than the units, and in the end every unit is held.
func TestConcurrentAdmissionsOfQueuesSharingASKUNeverExceedItsUnits(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	sh := newSharing(t, rdb)
	sku := "sku-" + testenv.Name(t)
	var qs, held []string
	for i := range 3 {
		q := sh.add(fmt.Sprintf("%s-%d", testenv.Name(t), i), 60, sku)
		qs, held = append(qs, q), append(held, keyspace.Of(q).Held())
	}
	const units = 25
	sh.stock(1, map[string]int64{sku: units})
	for _, q := range qs {
		sh.tick(q, 0)
	}
	check := func() {
		n, err := heldAcross.Run(ctx, rdb, held).Int()
		if err != nil {
			t.Error(err)
		} else if n > units {
			t.Errorf("%d units held across the lines, for %d", n, units)
		}
	}
	var wg sync.WaitGroup
	stop := time.Now().Add(1500 * time.Millisecond)
	for i, q := range qs {
		tk := sh.tickOf(q, 10)
		at := waitqueue.AtOnce{TokenTTL: time.Minute, TickLength: tk.TickLength, StockAware: true, Share: sh.share(q)}
		wg.Add(3)
		go func() { // the ticks
			defer wg.Done()
			for time.Now().Before(stop) {
				if _, err := sh.s.Admit(ctx, q, tk); err != nil {
					t.Error(err)
					return
				}
				check()
				time.Sleep(time.Millisecond)
			}
		}()
		go func() { // admissions at once
			defer wg.Done()
			for time.Now().Before(stop) {
				if _, err := sh.s.AdmitNow(ctx, q, epoch, at); err != nil && err != waitqueue.ErrNotCurrent {
					t.Error(err)
					return
				}
				check()
			}
		}()
		go func() { // shoppers leaving, their units back for the next in line
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			for time.Now().Before(stop) {
				seq := uint64(1 + rng.IntN(60))
				e, err := sh.s.Poll(ctx, q, seq)
				if err == nil && e.Status == waitqueue.Admitted && rng.IntN(4) == 0 {
					_, err = linetest.Leave(ctx, sh.s, q, seq, e.User)
				}
				if err != nil {
					t.Error(err)
					return
				}
				time.Sleep(3 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	for range 3 {
		for _, q := range qs {
			sh.tick(q, 10)
		}
	}
	if n, err := heldAcross.Run(ctx, rdb, held).Int(); err != nil || n != units {
		t.Fatalf("%d units held across the lines at the end, %v; want all %d", n, err, units)
	}
}

// On a Redis Cluster two queues' lines live on different nodes: the
// ledger's own hash tag keeps every reservation one atomic step on one
// node, and the queues still never admit beyond the SKU's units.
func TestQueuesOnDifferentClusterNodesShareTheirSKU(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node Redis Cluster")
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Skip("redis-cli not found")
	}
	var addrs []string
	for range 3 {
		url, _ := testenv.RedisServerWith(t, "--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(t.TempDir(), "nodes.conf"), "--cluster-node-timeout", "1000")
		addrs = append(addrs, strings.TrimSuffix(strings.TrimPrefix(url, "redis://"), "/0"))
	}
	ctx := context.Background()
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(cctx, cli, append(append([]string{"--cluster", "create"}, addrs...), "--cluster-yes")...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	rdb, err := waitqueue.Dial(waitqueue.Settings{URL: strings.Join(addrs, ","), Pool: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	testenv.Eventually(t, 30*time.Second, func() bool {
		for _, a := range addrs {
			c := redis.NewClient(&redis.Options{Addr: a})
			info, err := c.ClusterInfo(ctx).Result()
			c.Close()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				return false
			}
		}
		return true
	}, "the cluster is not ok")
	// Two queue names whose slots lie on different nodes.
	cc := rdb.(*redis.ClusterClient)
	nodeOf := func(key string) string {
		slot, err := cc.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		slots, err := cc.ClusterSlots(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range slots {
			if int64(s.Start) <= slot && slot <= int64(s.End) {
				return s.Nodes[0].Addr
			}
		}
		return ""
	}
	a := "shared-a"
	b := ""
	for i := range 100 {
		if c := "shared-b" + strconv.Itoa(i); nodeOf(keyspace.Of(c).Stats()) != nodeOf(keyspace.Of(a).Stats()) {
			b = c
			break
		}
	}
	if b == "" {
		t.Fatal("no queue name on another node")
	}
	sh := newSharing(t, rdb)
	sh.add(a, 8, "sku")
	sh.add(b, 8, "sku")
	sh.stock(1, map[string]int64{"sku": 10})
	for range 4 {
		sh.tick(a, 20)
		sh.tick(b, 20)
		if na, nb := sh.active(a), sh.active(b); na+nb > 10 {
			t.Fatalf("%d + %d admitted for 10 units", na, nb)
		}
	}
	if na, nb := sh.active(a), sh.active(b); na+nb != 10 {
		t.Fatalf("%d + %d admitted, want 10", na, nb)
	}
}
