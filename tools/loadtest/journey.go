package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// shopper walks one shopper's journey: join, wait (polling at the
// pollAfterMs the gateway asks for), order, wait for the order's outcome.
type shopper struct {
	c    *client
	q    string
	sku  string
	user string
}

// journeyTimes is what one journey measured.
type journeyTimes struct {
	tokenWait  time.Duration // join (or start) → READY seen
	orderTime  time.Duration // order submitted → final status seen
	status     string
	orderID    string
	readyLagMs float64 // READY seen − readyAt
}

type place struct {
	Ticket      string    `json:"ticket"`
	Status      string    `json:"status"`
	Position    int64     `json:"position"`
	PollAfterMs int64     `json:"pollAfterMs"`
	Token       string    `json:"token"`
	ReadyAt     time.Time `json:"readyAt"`
}

type orderView struct {
	OrderID string `json:"orderId"`
	Status  string `json:"status"`
	Reason  string `json:"reason"`
}

func (s shopper) join() (place, error) {
	var p place
	code, err := s.c.do("POST", "/v1/queues/"+s.q+"/tickets", map[string]string{"X-User-Id": s.user}, nil, &p)
	if err == nil && code >= 300 {
		err = fmt.Errorf("join: status %d", code)
	}
	return p, err
}

// waitReady polls at the pace the gateway asks for until READY.
func (s shopper) waitReady(ctx context.Context, p place) (place, error) {
	for p.Status != "READY" {
		if p.Status != "WAITING" {
			return p, fmt.Errorf("ticket %s", p.Status)
		}
		d := time.Duration(max(p.PollAfterMs, 50)) * time.Millisecond
		select {
		case <-ctx.Done():
			return p, ctx.Err()
		case <-time.After(d):
		}
		code, err := s.c.do("GET", "/v1/queues/"+s.q+"/tickets/"+p.Ticket, nil, nil, &p)
		if err != nil || code != 200 {
			return p, fmt.Errorf("poll: %d %v", code, err)
		}
	}
	return p, nil
}

// waitReadySSE listens on the ticket's event stream until READY and returns
// the place with the pushed token.
func (s shopper) waitReadySSE(ctx context.Context, notifier string, p place) (place, error) {
	if p.Status == "READY" {
		return p, nil
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", notifier+"/v1/queues/"+s.q+"/tickets/"+p.Ticket+"/events", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return p, err
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		return p, fmt.Errorf("events: status %d", res.StatusCode)
	}
	var stop error
	err = readEvents(res.Body, func(event, data string) bool {
		switch event {
		case "ready":
			var r struct {
				Token   string    `json:"token"`
				ReadyAt time.Time `json:"readyAt"`
			}
			if stop = json.Unmarshal([]byte(data), &r); stop == nil {
				p.Status, p.Token, p.ReadyAt = "READY", r.Token, r.ReadyAt
			}
			return false
		case "expired", "closed":
			stop = fmt.Errorf("stream says %s", event)
			return false
		}
		return true
	})
	switch {
	case stop != nil:
		return p, stop
	case p.Status == "READY":
		return p, nil
	}
	return p, fmt.Errorf("stream ended before READY: %v", err)
}

// order submits the order and polls it until it is final.
func (s shopper) order(ctx context.Context, token string) (orderView, error) {
	body, _ := json.Marshal(map[string]any{"sku": s.sku, "quantity": 1})
	var o orderView
	code, err := s.c.do("POST", "/v1/orders", map[string]string{"X-User-Id": s.user, "Authorization": "Bearer " + token}, body, &o)
	if err != nil || code >= 300 {
		return o, fmt.Errorf("order: %d %v", code, err)
	}
	for o.Status == "PENDING" {
		select {
		case <-ctx.Done():
			return o, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if code, err := s.c.do("GET", "/v1/orders/"+o.OrderID, map[string]string{"X-User-Id": s.user}, nil, &o); err != nil || code != 200 {
			return o, fmt.Errorf("order status: %d %v", code, err)
		}
	}
	return o, nil
}

// journeyStats gathers the journeys of a run.
type journeyStats struct {
	mu       sync.Mutex
	wait     *recorder
	order    *recorder
	statuses map[string]int64
	orderIDs map[string]bool
	dupes    int64
	errors   int64
	timeline *timeline // nil: no timeline
}

func newJourneyStats() *journeyStats {
	return &journeyStats{wait: newRecorder(), order: newRecorder(), statuses: map[string]int64{}, orderIDs: map[string]bool{}}
}

func (js *journeyStats) add(t journeyTimes, err error) {
	js.mu.Lock()
	defer js.mu.Unlock()
	if err != nil {
		js.errors++
		return
	}
	js.wait.add(t.tokenWait, 200, nil)
	js.order.add(t.orderTime, 200, nil)
	js.timeline.add(t)
	js.statuses[t.status]++
	if js.orderIDs[t.orderID] {
		js.dupes++
	}
	js.orderIDs[t.orderID] = true
}

// journey is the seed's k6 flow: vus virtual users, each walking journeys
// back to back for the run's duration.
func journey(ctx context.Context, c *client, o options, progress io.Writer) (result, error) {
	res := result{Scenario: "journey, waiting by " + o.wait, Started: time.Now(), Figures: map[string]float64{}, Invariants: map[string]int64{}}
	if err := setupSale(c, o, o.withAdaptive(map[string]any{"targetActive": o.targetActive, "maxAdmitPerTick": o.maxAdmitPerTick, "sku": o.sku})); err != nil {
		return res, err
	}
	if o.adaptive != "" {
		res.Scenario += fmt.Sprintf(", adaptive %s from %d", o.adaptive, o.targetActive)
	} else {
		res.Scenario += fmt.Sprintf(", targetActive %d", o.targetActive)
	}
	if len(o.schedule) > 0 {
		res.Scenario += ", " + describe(o.schedule)
	}
	before, _ := scrape(o.orderworkerMetrics)
	samples := startSampler(ctx, c, o.queue, 250*time.Millisecond)
	stats := newJourneyStats()
	start := time.Now()
	stats.timeline = newTimeline(start)
	stopSchedule := runSchedule(ctx, o, o.schedule, start, progress)
	stop := start.Add(o.duration)
	var n atomic.Int64
	var wg sync.WaitGroup
	for v := range o.vus {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) && ctx.Err() == nil {
				s := shopper{c: c, q: o.queue, sku: o.sku, user: fmt.Sprintf("vu%d-%d-%d", v, n.Add(1), start.UnixNano()%1e6)}
				stats.add(s.walk(ctx, o))
			}
		}()
	}
	ticker := time.NewTicker(time.Second)
	go func() {
		for range ticker.C {
			stats.mu.Lock()
			fmt.Fprintf(progress, "\rjourney %4.0fs  done %6d  errors %d ", time.Since(start).Seconds(), len(stats.orderIDs), stats.errors)
			stats.mu.Unlock()
		}
	}()
	wg.Wait()
	ticker.Stop()
	stopSchedule()
	fmt.Fprintln(progress)
	elapsed := time.Since(start)
	res.Samples = samples.Stop()
	res.Timeline = stats.timeline.points(res.Samples)
	res.Steps = []step{stats.wait.summary("token wait (join → READY)", elapsed), stats.order.summary("order (submit → final)", elapsed)}
	after, _ := scrape(o.orderworkerMetrics)
	addOrderFigures(&res, before, after, stats, elapsed)
	addAdmissionInvariant(&res)
	return res, nil
}

// walk is one journey.
func (s shopper) walk(ctx context.Context, o options) (journeyTimes, error) {
	var t journeyTimes
	start := time.Now()
	p, err := s.join()
	if err != nil {
		return t, err
	}
	if o.wait == "sse" {
		p, err = s.waitReadySSE(ctx, o.notifier, p)
	} else {
		p, err = s.waitReady(ctx, p)
	}
	if err != nil {
		return t, err
	}
	t.tokenWait = time.Since(start)
	ordered := time.Now()
	ov, err := s.order(ctx, p.Token)
	if err != nil {
		return t, err
	}
	t.orderTime, t.status, t.orderID = time.Since(ordered), ov.Status, ov.OrderID
	return t, nil
}

// setupSale creates the run's queue (paused until the caller opens it,
// unless open is in cfg) and stocks its SKU.
func setupSale(c *client, o options, cfg map[string]any) error {
	if err := c.admin("PUT", "/v1/admin/stock/"+o.sku, map[string]any{"available": o.stock}, nil); err != nil {
		return fmt.Errorf("stock %s: %w", o.sku, err)
	}
	return c.admin("PUT", "/v1/admin/queues/"+o.queue, o.queueConfig(cfg), nil)
}

func addOrderFigures(res *result, before, after metricsSnapshot, stats *journeyStats, elapsed time.Duration) {
	stats.mu.Lock()
	defer stats.mu.Unlock()
	for st, n := range stats.statuses {
		res.Figures["orders "+st] = float64(n)
	}
	res.Figures["orders per second"] = float64(len(stats.orderIDs)) / elapsed.Seconds()
	if after != nil {
		h := histogram(before, after, "usher_db_connection_hold_seconds")
		res.Figures["DB connection hold mean ms"] = h.mean() * 1000
		res.Figures["DB connection hold p99 ms (bucket bound)"] = h.quantile(0.99) * 1000
		res.Figures["DB connection hold max ms (bucket bound)"] = h.quantile(1) * 1000
		res.Figures["DB connection holds"] = h.count
		prev := 0.0
		for _, b := range h.buckets {
			if !math.IsInf(b.le, 1) {
				res.DBHold = append(res.DBHold, holdBucket{LeMs: b.le * 1000, Count: b.count - prev})
			}
			prev = b.count
		}
	}
	res.Invariants["failed orders"] = stats.statuses["FAILED"]
	res.Invariants["double orders"] = stats.dupes
	res.Invariants["journeys that errored"] = stats.errors
}

// addAdmissionInvariant checks the sampled active count never exceeded
// targetActive.
func addAdmissionInvariant(res *result) {
	res.Invariants["over-admission (sampled)"] = overAdmission(res.Samples)
}

// batch is the second seed's experiment: the same shoppers, all in line
// before the doors open, admitted maxAdmitPerTick at a time; each orders as
// soon as it is READY. Bigger batches shorten the wait and load the order
// path harder.
func batch(ctx context.Context, c *client, o options, progress io.Writer) (result, error) {
	res := result{Scenario: fmt.Sprintf("batch %d per tick, waiting by %s", o.maxAdmitPerTick, o.wait), Started: time.Now(), Figures: map[string]float64{}, Invariants: map[string]int64{}}
	if err := setupSale(c, o, map[string]any{"targetActive": o.targetActive, "maxAdmitPerTick": o.maxAdmitPerTick, "sku": o.sku, "state": "paused"}); err != nil {
		return res, err
	}
	shoppers := make([]shopper, o.shoppers)
	places := make([]place, o.shoppers)
	for i := range shoppers {
		shoppers[i] = shopper{c: c, q: o.queue, sku: o.sku, user: fmt.Sprintf("b%d-%s", i, strconv.FormatInt(time.Now().UnixNano()%1e9, 36))}
		p, err := shoppers[i].join()
		if err != nil {
			return res, err
		}
		places[i] = p
	}
	fmt.Fprintf(progress, "%d shoppers in line; opening with maxAdmitPerTick %d\n", o.shoppers, o.maxAdmitPerTick)
	before, _ := scrape(o.orderworkerMetrics)
	samples := startSampler(ctx, c, o.queue, 100*time.Millisecond)
	open := time.Now()
	if err := c.admin("PUT", "/v1/admin/queues/"+o.queue, o.queueConfig(map[string]any{"targetActive": o.targetActive, "maxAdmitPerTick": o.maxAdmitPerTick, "sku": o.sku, "state": "open"}), nil); err != nil {
		return res, err
	}
	stats := newJourneyStats()
	var wg sync.WaitGroup
	for i := range shoppers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var t journeyTimes
			var p place
			var err error
			if o.wait == "sse" {
				p, err = shoppers[i].waitReadySSE(ctx, o.notifier, places[i])
			} else {
				p, err = shoppers[i].waitReady(ctx, places[i])
			}
			if err == nil {
				t.tokenWait = time.Since(open)
				ordered := time.Now()
				var ov orderView
				ov, err = shoppers[i].order(ctx, p.Token)
				t.orderTime, t.status, t.orderID = time.Since(ordered), ov.Status, ov.OrderID
			}
			stats.add(t, err)
		}()
	}
	wg.Wait()
	elapsed := time.Since(open)
	res.Samples = samples.Stop()
	res.Steps = []step{stats.wait.summary("token wait (open → READY)", elapsed), stats.order.summary("order (submit → final)", elapsed)}
	after, _ := scrape(o.orderworkerMetrics)
	addOrderFigures(&res, before, after, stats, elapsed)
	addAdmissionInvariant(&res)
	return res, nil
}
