package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The drop scenario: a flash sale of a few units to many more
// shoppers, on a queue that follows its stock. Every shopper joins while
// the queue is paused and holds a Server-Sent Events stream (polling only
// when the notifier cannot be reached); the queue opens, each shopper who
// becomes READY orders one unit at once and waits for the final status,
// and the scenario measures what the stock-aware line promises: every unit
// sold, nobody admitted to find nothing, and everyone still waiting told
// sold_out within a second of the last unit's PAID. With -stock-aware=false
// the same run is the comparison: the line admits by targetActive alone.

// Drop defaults, taken when the flag is not given.
const (
	dropShoppers = 5000
	dropUnits    = 500
	dropDuration = 3 * time.Minute
	// toldGrace is how long, after the sale is over (every unit PAID, or a
	// first shopper told sold_out), the waiting shoppers get to be told
	// before the scenario stops listening and counts them never told.
	toldGrace = 15 * time.Second
	// orderPollEvery paces the polls of a pending order: the final status
	// the load tool sees is late by at most this plus one request.
	orderPollEvery = 25 * time.Millisecond
)

// dropRecord is one shopper's journal in a drop run. Times are the load
// tool's clock when it received the answer or event.
type dropRecord struct {
	Ready      time.Time `json:"ready,omitzero"`   // READY received (zero: never admitted)
	Status     string    `json:"status,omitempty"` // the order's final status
	Reason     string    `json:"reason,omitempty"`
	Final      time.Time `json:"final,omitzero"` // final status seen
	Told       time.Time `json:"told,omitzero"`  // CLOSED received while waiting (SSE closed, poll CLOSED)
	ToldReason string    `json:"toldReason,omitempty"`
	Ended      string    `json:"ended,omitempty"` // any other end while waiting: expired, left, used
	Polled     bool      `json:"polled,omitempty"`
	Err        string    `json:"err,omitempty"`
}

// dropJournal is a whole drop run as the figures need it.
type dropJournal struct {
	Units   int
	Records []dropRecord
	// LastPaidEvent is the time of the last usher.order.completed.v1 of the
	// queue (the order worker's clock as it published), CloseEvent that of
	// the admitter's sold-out close on USHER_OPS; zero when not read.
	LastPaidEvent time.Time
	CloseEvent    time.Time
}

// dropFigures are what a drop run measured.
type dropFigures struct {
	Sold             int // orders PAID
	Failed           int // orders FAILED (the unit came back)
	RejectedForStock int // READY, then REJECTED sold_out / insufficient_stock
	RejectedOther    int
	ReadyAfterClose  int // READY after the sold-out close, not counted above
	// AdmittedWithNothing is RejectedForStock + ReadyAfterClose: shoppers
	// the line let through to find nothing to buy.
	AdmittedWithNothing int
	Errors              int

	// Reference is what "the last unit's PAID" is: the order.completed
	// event's time when read, else the final status as the load tool saw it.
	Reference    string
	LastPaid     time.Time
	LastPaidSeen time.Time
	Close        time.Time // the close: its event, else the first shopper told sold_out

	// WaitingAtSoldOut is the shoppers not READY at the last PAID; each is
	// told sold_out (Told: its delay from the last PAID), told of another
	// close, learns it from a rejected order (LearnedByRejection: from the
	// last PAID to the rejection seen), or is never told.
	WaitingAtSoldOut   int
	Told               []time.Duration
	ToldOtherReason    int
	LearnedByRejection []time.Duration
	NeverTold          int
	Polled             int
}

// stockReason reports whether an order was rejected because no unit was
// left for it.
func stockReason(reason string) bool { return reason == "sold_out" || reason == "insufficient_stock" }

// summarize turns a drop run's journal into its figures.
func summarize(j dropJournal) dropFigures {
	var f dropFigures
	for _, r := range j.Records {
		switch {
		case r.Status == "PAID":
			f.Sold++
			if r.Final.After(f.LastPaidSeen) {
				f.LastPaidSeen = r.Final
			}
		case r.Status == "FAILED":
			f.Failed++
		case r.Status == "REJECTED" && stockReason(r.Reason):
			f.RejectedForStock++
		case r.Status == "REJECTED":
			f.RejectedOther++
		}
		if r.Err != "" {
			f.Errors++
		}
		if r.Polled {
			f.Polled++
		}
	}
	f.LastPaid, f.Reference = f.LastPaidSeen, "final status seen by the load tool"
	if !j.LastPaidEvent.IsZero() {
		f.LastPaid, f.Reference = j.LastPaidEvent, "order.completed event"
	}
	f.Close = j.CloseEvent
	if f.Close.IsZero() {
		for _, r := range j.Records {
			if r.ToldReason == "sold_out" && (f.Close.IsZero() || r.Told.Before(f.Close)) {
				f.Close = r.Told
			}
		}
	}
	for _, r := range j.Records {
		if !f.Close.IsZero() && r.Ready.After(f.Close) && r.Status != "PAID" &&
			(r.Status != "REJECTED" || !stockReason(r.Reason)) {
			f.ReadyAfterClose++
		}
	}
	f.AdmittedWithNothing = f.RejectedForStock + f.ReadyAfterClose
	if f.LastPaid.IsZero() {
		return f // nothing sold: no sell-out to be told of
	}
	for _, r := range j.Records {
		if !r.Ready.IsZero() && !r.Ready.After(f.LastPaid) {
			continue // admitted before the sell-out
		}
		f.WaitingAtSoldOut++
		switch {
		case !r.Told.IsZero() && r.ToldReason == "sold_out":
			f.Told = append(f.Told, r.Told.Sub(f.LastPaid))
		case !r.Told.IsZero():
			f.ToldOtherReason++
		case r.Status == "REJECTED" && stockReason(r.Reason):
			f.LearnedByRejection = append(f.LearnedByRejection, r.Final.Sub(f.LastPaid))
		default:
			f.NeverTold++
		}
	}
	return f
}

// quantile is the nearest-rank q-quantile of ds (sorted in place), as the
// recorder's summaries take it.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[int(q*float64(len(ds)-1))]
}

// dropRun is one drop run in progress.
type dropRun struct {
	c        *client
	o        options
	users    []string
	places   []place
	recs     []dropRecord
	connSem  chan struct{} // bounds stream connects in flight
	connects atomic.Int64  // streams connected or given up on (first attempt)
	streams  atomic.Int64  // streams connected (first attempt)

	ready, paid, told, finished atomic.Int64
	reconnects                  atomic.Int64
	stockMu                     sync.Mutex
	stockEvents                 map[string]int64 // SSE `stock` events by state
}

// waitEnd is how a waiting shopper's wait ended.
type waitEnd struct {
	kind    string // ready | closed | expired | left | used | dropped | failed
	token   string
	readyAt time.Time // READY: the token's readyAt
	reason  string
	at      time.Time
}

// drop is the scenario.
func drop(ctx context.Context, c *client, o options, progress io.Writer) (result, error) {
	mode := "on"
	if !o.stockAware {
		mode = "off"
	}
	res := result{Scenario: fmt.Sprintf("drop: %d shoppers, %d units, targetActive %d, stock-aware %s", o.shoppers, o.stock, o.targetActive, mode),
		Started: time.Now(), Figures: map[string]float64{}, Invariants: map[string]int64{}}
	runCtx, cancelRun := context.WithTimeout(ctx, o.duration)
	defer cancelRun()
	if err := stockPausedQueue(runCtx, c, o); err != nil {
		return res, err
	}
	d := &dropRun{c: c, o: o, users: make([]string, o.shoppers), recs: make([]dropRecord, o.shoppers),
		connSem: make(chan struct{}, 256), stockEvents: map[string]int64{}}
	tag := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	for i := range d.users {
		d.users[i] = fmt.Sprintf("d%s-%d", tag, i)
	}
	t0 := time.Now()
	var err error
	if d.places, err = joinUsers(runCtx, c, o.queue, d.users); err != nil {
		return res, err
	}
	fmt.Fprintf(progress, "%d shoppers in line (%.1fs); opening their streams\n", o.shoppers, time.Since(t0).Seconds())

	// Waiting ends when told; ordering goes on until the run's deadline.
	waitCtx, stopWaiting := context.WithCancel(runCtx)
	defer stopWaiting()
	var wg sync.WaitGroup
	for i := range d.users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.shop(waitCtx, runCtx, i)
		}()
	}
	for d.connects.Load() < int64(o.shoppers) && runCtx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	res.Figures["streams connected"] = float64(d.streams.Load())
	fmt.Fprintf(progress, "%d streams open, %d polling (%.1fs); opening the sale\n", d.streams.Load(), int64(o.shoppers)-d.streams.Load(), time.Since(t0).Seconds())

	samples := startSampler(runCtx, c, o.queue, 250*time.Millisecond)
	notifierBefore, _ := scrape(o.notifier + "/metrics")
	open := time.Now()
	if err := c.admin("PUT", "/v1/admin/queues/"+o.queue, dropQueueConfig(o, "open"), nil); err != nil {
		stopWaiting()
		cancelRun()
		wg.Wait()
		return res, err
	}
	sale := d.watchSale(runCtx, open, &wg, stopWaiting, progress)
	res.Samples = samples.Stop()
	notifierAfter, _ := scrape(o.notifier + "/metrics")
	addNotifierFigures(&res, notifierBefore, notifierAfter)
	addLoadAverage(&res)

	out := d.afterSale(ctx, res.Started, tag, progress)
	out.sale = sale
	fmt.Fprintf(progress, "late joins and events read (%.1fs)\n", time.Since(t0).Seconds())
	if o.anchor && out.anchorN > 0 {
		out.anchorN = min(out.anchorN, anchorCap())
		out.anchor = measureAnchor(ctx, out.anchorN, progress)
		fmt.Fprintf(progress, "anchor measured (%.1fs)\n", time.Since(t0).Seconds())
	}
	d.report(&res, out)
	return res, nil
}

// dropQueueConfig is the drop queue's configuration in state.
func dropQueueConfig(o options, state string) map[string]any {
	return o.queueConfig(map[string]any{"targetActive": o.targetActive, "maxAdmitPerTick": o.maxAdmitPerTick,
		"tickMs": 100, "tokenTtlSeconds": 300, "sku": o.sku, "maxQuantity": 1, "stockAware": o.stockAware, "state": state})
}

// stockPausedQueue makes the drop's queue, paused, then its stock: a
// stock change reaches the lines of the queues that sell the SKU at once.
// A stock-aware line must see the stock before the sale opens.
func stockPausedQueue(ctx context.Context, c *client, o options) error {
	if err := c.admin("PUT", "/v1/admin/queues/"+o.queue, dropQueueConfig(o, "paused"), nil); err != nil {
		return err
	}
	if err := c.admin("PUT", "/v1/admin/stock/"+o.sku, map[string]any{"available": o.stock}, nil); err != nil {
		return fmt.Errorf("stock %s: %w", o.sku, err)
	}
	if o.stockAware {
		return waitSellable(ctx, c, o.queue, int64(o.stock))
	}
	return nil
}

// watchSale prints the sale's progress each second until every shopper is
// done (or the run's deadline), and returns how long the sale took from
// its opening. Once a shopper is told (or, stock-aware, every unit is
// PAID), the rest have toldGrace to hear it before their waits stop.
func (d *dropRun) watchSale(runCtx context.Context, open time.Time, wg *sync.WaitGroup, stopWaiting context.CancelFunc, progress io.Writer) time.Duration {
	o := d.o
	all := make(chan struct{})
	go func() { wg.Wait(); close(all) }()
	var graceEnds <-chan time.Time
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for over := false; !over; {
		select {
		case <-all:
			over = true
		case <-runCtx.Done():
			stopWaiting()
			<-all
			over = true
		case <-graceEnds:
			fmt.Fprintf(progress, "\n%v after the sale ended some shoppers still wait: they are counted never told\n", toldGrace)
			stopWaiting()
			graceEnds = nil
		case <-tick.C:
			fmt.Fprintf(progress, "\rdrop %4.0fs  ready %5d  paid %4d/%d  told %5d  done %5d/%d ",
				time.Since(open).Seconds(), d.ready.Load(), d.paid.Load(), o.stock, d.told.Load(), d.finished.Load(), o.shoppers)
			if graceEnds == nil && (d.told.Load() > 0 || (o.stockAware && d.paid.Load() >= int64(o.stock))) {
				graceEnds = time.After(toldGrace)
			}
		}
	}
	sale := time.Since(open)
	fmt.Fprintf(progress, "\nsale over after %.1fs\n", sale.Seconds())
	return sale
}

// addLoadAverage records the machine's load as the sale ended: other work
// on the same cores makes every figure slower.
func addLoadAverage(res *result) {
	la, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return
	}
	if v, err := strconv.ParseFloat(strings.Fields(string(la))[0], 64); err == nil {
		res.Figures["machine load average (1 min) at the end of the sale"] = v
	}
}

// afterSale gathers what the drop's figures rest on once the sale is
// over: the admin view, the answers to new shoppers (a closed line
// answers 410), and the events; it closes an unaware line, which nothing
// else closes, so that nobody is left in it.
func (d *dropRun) afterSale(ctx context.Context, started time.Time, tag string, progress io.Writer) dropResults {
	o := d.o
	var out dropResults
	out.view, out.viewErr = adminDropView(d.c, o.queue, o.sku)
	out.late = lateJoins(ctx, d.c, o.queue, o.lateJoins, tag)
	if !o.stockAware {
		_ = d.c.admin("PUT", "/v1/admin/queues/"+o.queue, dropQueueConfig(o, "closed"), nil)
	}
	j := dropJournal{Units: o.stock, Records: d.recs}
	if o.natsURL != "" {
		ev, err := readDropEvents(ctx, o.natsURL, o.natsNKey, o.queue, started)
		if err != nil {
			fmt.Fprintf(progress, "events not read (%v): the last PAID is the final status the load tool saw\n", err)
		} else {
			j.LastPaidEvent, j.CloseEvent = ev.lastPaid, ev.closed
		}
		out.ev = ev
	}
	out.f = summarize(j)
	out.anchorN = out.f.WaitingAtSoldOut
	return out
}

// measureAnchor has a bare SSE server tell n streams one event: the
// anchor the told times compare with.
func measureAnchor(ctx context.Context, n int, progress io.Writer) []time.Duration {
	fmt.Fprintf(progress, "anchor: a bare SSE server telling %d streams one event\n", n)
	anchor, err := sseAnchor(ctx, n, time.Minute)
	if err != nil {
		fmt.Fprintf(progress, "anchor failed: %v\n", err)
	}
	return anchor
}

// dropDetail is what a drop run's figures rest on, for the JSON result.
type dropDetail struct {
	StockAware bool `json:"stockAware"`
	// Reference is what the told times count from: the order.completed
	// event's time, or the final status as the load tool saw it.
	Reference    string         `json:"reference"`
	LastPaid     time.Time      `json:"lastPaid,omitzero"`
	LastPaidSeen time.Time      `json:"lastPaidSeen,omitzero"`
	CloseEvent   time.Time      `json:"closeEvent,omitzero"`
	Close        time.Time      `json:"close,omitzero"` // the close event, else the first shopper told
	LateJoins    map[string]int `json:"lateJoins"`      // answers by status
	QueueState   string         `json:"queueState"`     // the admin view after the sale
	ClosedReason string         `json:"closedReason,omitempty"`
	// Errors counts the shoppers' errors by message (at most 20 kinds).
	Errors map[string]int `json:"errors,omitempty"`
}

// addNotifierFigures is what the notifier did during the sale: events
// written by type, streams it dropped, its CPU.
func addNotifierFigures(res *result, before, after metricsSnapshot) {
	if before == nil || after == nil {
		return
	}
	for _, typ := range []string{"position", "stock", "ready", "closed"} {
		k := `usher_sse_events_sent_total{type="` + typ + `"}`
		res.Figures["notifier events sent during the sale: "+typ] = after[k] - before[k]
	}
	res.Figures["notifier streams dropped during the sale"] = after.value("usher_sse_clients_dropped_total") - before.value("usher_sse_clients_dropped_total")
	res.Figures["notifier CPU seconds during the sale"] = after.value("process_cpu_seconds_total") - before.value("process_cpu_seconds_total")
}

// dropResults is what a drop run's report rests on besides its journal:
// the figures summarized from it, the events, the admin view after the
// sale, the answers to late joins by status, the anchor's times (of
// anchorN streams) and how long the sale took.
type dropResults struct {
	f       dropFigures
	ev      dropEvents
	view    dropView
	viewErr error
	late    map[string]int
	anchor  []time.Duration
	anchorN int
	sale    time.Duration
}

// report writes the figures, the invariants and the one-line summary.
func (d *dropRun) report(res *result, out dropResults) {
	o, f := d.o, out.f
	res.Drop = &dropDetail{StockAware: o.stockAware, Reference: f.Reference, LastPaid: f.LastPaid, LastPaidSeen: f.LastPaidSeen,
		CloseEvent: out.ev.closed, Close: f.Close, LateJoins: out.late, QueueState: out.view.state, ClosedReason: out.view.closedReason,
		Errors: dropErrors(d.recs)}
	for e, n := range res.Drop.Errors {
		res.Notes = append(res.Notes, fmt.Sprintf("error ×%d: %s", n, e))
	}
	d.addSaleFigures(res.Figures, out)
	addToldFigures(res.Figures, f, out.ev)
	rec := newRecorder()
	for _, t := range f.Told {
		rec.add(t, 200, nil)
	}
	res.Steps = append(res.Steps, rec.summary("told sold_out (last PAID → CLOSED received)", out.sale))
	if len(out.anchor) > 0 {
		addAnchor(res, f.Told, out)
	}
	res.Figures["late joins"] = float64(o.lateJoins)
	res.Figures["late joins answered 410"] = float64(out.late["410"])
	d.addInvariants(res, out)
	addAdmissionInvariant(res)
	res.Notes = append(res.Notes, d.summaryLine(out))
}

// dropErrors counts the shoppers' errors by message, at most 20 kinds
// (nil when none erred).
func dropErrors(recs []dropRecord) map[string]int {
	var errs map[string]int
	for _, r := range recs {
		if r.Err == "" {
			continue
		}
		if errs == nil {
			errs = map[string]int{}
		}
		if _, ok := errs[r.Err]; ok || len(errs) < 20 {
			errs[r.Err]++
		}
	}
	return errs
}

func millis(x time.Duration) float64 { return float64(x.Microseconds()) / 1000 }

// addSaleFigures counts what the sale came to: units and orders, the
// shoppers' ways of waiting, the stock events, the admin view.
func (d *dropRun) addSaleFigures(fig map[string]float64, out dropResults) {
	f := out.f
	fig["units"] = float64(d.o.stock)
	fig["units sold (orders PAID)"] = float64(f.Sold)
	fig["orders FAILED"] = float64(f.Failed)
	fig["orders REJECTED for stock"] = float64(f.RejectedForStock)
	fig["orders REJECTED, other reasons"] = float64(f.RejectedOther)
	fig["READY after the close"] = float64(f.ReadyAfterClose)
	fig["sale seconds (open → every shopper done)"] = out.sale.Seconds()
	fig["shoppers polling (no stream)"] = float64(f.Polled)
	fig["stream reconnects"] = float64(d.reconnects.Load())
	for st, n := range d.stockEvents {
		fig["SSE stock events "+st] = float64(n)
	}
	if out.viewErr == nil && out.view.hasStock {
		fig["admin view: sold"] = float64(out.view.sold)
	}
}

// addToldFigures is how the waiting learned of the sell-out: told by
// their stream, or only by a rejected order; and how long after the last
// PAID, by its event and as the load tool saw it.
func addToldFigures(fig map[string]float64, f dropFigures, ev dropEvents) {
	fig["waiting at sold out"] = float64(f.WaitingAtSoldOut)
	fig["told sold_out"] = float64(len(f.Told))
	fig["told of another close"] = float64(f.ToldOtherReason)
	fig["learned only from a rejected order"] = float64(len(f.LearnedByRejection))
	told := slices.Clone(f.Told)
	if len(told) > 0 {
		fig["told p50 ms"], fig["told p99 ms"], fig["told max ms"] = millis(quantile(told, 0.5)), millis(quantile(told, 0.99)), millis(quantile(told, 1))
	}
	if lr := slices.Clone(f.LearnedByRejection); len(lr) > 0 {
		fig["learned by rejection p50 ms"], fig["learned by rejection max ms"] = millis(quantile(lr, 0.5)), millis(quantile(lr, 1))
	}
	if !ev.lastPaid.IsZero() {
		fig["order.completed events"] = float64(ev.paid)
		if !f.LastPaidSeen.IsZero() {
			fig["last PAID seen − its event ms"] = millis(f.LastPaidSeen.Sub(ev.lastPaid))
		}
		if !ev.closed.IsZero() {
			fig["close event − last PAID event ms"] = millis(ev.closed.Sub(ev.lastPaid))
		}
	}
	if len(told) > 0 && !f.LastPaidSeen.IsZero() && f.Reference != "final status seen by the load tool" {
		seen := make([]time.Duration, len(told))
		for i, t := range told {
			seen[i] = t - f.LastPaidSeen.Sub(f.LastPaid)
		}
		fig["told max ms (from the last PAID seen)"] = millis(quantile(seen, 1))
	}
}

// addAnchor sets the told times beside the anchor's: a bare SSE server
// telling as many streams one event.
func addAnchor(res *result, told []time.Duration, out dropResults) {
	fig := res.Figures
	a := newRecorder()
	for _, t := range out.anchor {
		a.add(t, 200, nil)
	}
	res.Steps = append(res.Steps, a.summary(fmt.Sprintf("anchor: bare SSE broadcast to %d streams", len(out.anchor)), out.sale))
	ac := slices.Clone(out.anchor)
	fig["anchor streams"] = float64(out.anchorN)
	fig["anchor p50 ms"], fig["anchor p99 ms"], fig["anchor max ms"] = millis(quantile(ac, 0.5)), millis(quantile(ac, 0.99)), millis(quantile(ac, 1))
	if told := slices.Clone(told); len(told) > 0 {
		fig["told max ÷ anchor max"] = float64(quantile(told, 1)) / float64(max(quantile(ac, 1), time.Microsecond))
		fig["told p50 ÷ anchor p50"] = float64(quantile(told, 0.5)) / float64(max(quantile(ac, 0.5), time.Microsecond))
	}
}

// addInvariants holds the run to its goals: every unit sold, nobody
// erred; and, stock-aware, nobody admitted with nothing to buy, every
// waiting shopper told, late joins refused, the admin view right. An
// unaware line's misses are figures, not violations: they are what it is
// compared for.
func (d *dropRun) addInvariants(res *result, out dropResults) {
	o, f := d.o, out.f
	res.Invariants["shoppers that errored"] = int64(f.Errors)
	res.Invariants["units sold ≠ units"] = int64(abs(f.Sold - o.stock))
	if !o.stockAware {
		res.Figures["admitted with nothing to buy"] = float64(f.AdmittedWithNothing)
		res.Figures["waiting shoppers never told"] = float64(f.NeverTold)
		return
	}
	res.Invariants["admitted with nothing to buy"] = int64(f.AdmittedWithNothing)
	res.Invariants["waiting shoppers never told"] = int64(f.NeverTold + len(f.LearnedByRejection))
	res.Invariants["late joins not answered 410"] = int64(o.lateJoins - out.late["410"])
	if out.viewErr != nil || !out.view.hasStock {
		res.Invariants["admin view without the SKU's sold"] = 1
	} else {
		res.Invariants["admin view sold ≠ units sold"] = int64(abs(int(out.view.sold) - f.Sold))
	}
}

// summaryLine is the run in one line.
func (d *dropRun) summaryLine(out dropResults) string {
	o, f := d.o, out.f
	told := slices.Clone(f.Told)
	line := fmt.Sprintf("drop (stock-aware %v): sold %d/%d", o.stockAware, f.Sold, o.stock)
	if out.viewErr == nil && out.view.hasStock {
		line += fmt.Sprintf(" (admin view %d)", out.view.sold)
	}
	line += fmt.Sprintf(", admitted with nothing %d, waiting at sold out %d", f.AdmittedWithNothing, f.WaitingAtSoldOut)
	if len(told) > 0 {
		line += fmt.Sprintf(": told sold_out %d, p50 %.0f ms, p99 %.0f ms, max %.0f ms after the last PAID (%s)",
			len(told), millis(quantile(told, 0.5)), millis(quantile(told, 0.99)), millis(quantile(told, 1)), f.Reference)
	}
	if lr := slices.Clone(f.LearnedByRejection); len(lr) > 0 {
		line += fmt.Sprintf(", learned from a rejected order %d (the last %.1f s after the last PAID)", len(lr), quantile(lr, 1).Seconds())
	}
	if len(out.anchor) > 0 && len(told) > 0 {
		ac := slices.Clone(out.anchor)
		line += fmt.Sprintf("; anchor (bare SSE broadcast to %d streams) max %.0f ms: %.1f×", len(out.anchor), millis(quantile(ac, 1)),
			float64(quantile(told, 1))/float64(max(quantile(ac, 1), time.Microsecond)))
	}
	line += fmt.Sprintf("; never told %d; late joins 410: %d/%d", f.NeverTold, out.late["410"], o.lateJoins)
	return line
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// shop is one shopper: wait (stream, else polls), order when READY.
func (d *dropRun) shop(waitCtx, orderCtx context.Context, i int) {
	defer d.finished.Add(1)
	r := &d.recs[i]
	end := d.wait(waitCtx, i)
	switch end.kind {
	case "ready":
		r.Ready = end.at
		d.ready.Add(1)
	case "closed":
		r.Told, r.ToldReason = end.at, end.reason
		d.told.Add(1)
		return
	case "failed":
		if waitCtx.Err() == nil {
			r.Err = end.reason
		}
		return
	default:
		r.Ended = end.kind
		return
	}
	sent := time.Now()
	ov, final, err := orderFinal(orderCtx, d.c, d.users[i], d.o.sku, end.token)
	if err != nil {
		r.Err = fmt.Sprintf("%v (readyAt %s, READY received %s, order sent %s)", err,
			end.readyAt.UTC().Format("15:04:05.000000"), end.at.UTC().Format("15:04:05.000000"), sent.UTC().Format("15:04:05.000000"))
		return
	}
	r.Status, r.Reason, r.Final = ov.Status, ov.Reason, final
	if ov.Status == "PAID" {
		d.paid.Add(1)
	}
}

// wait follows the shopper's stream until READY or an end; a stream that
// drops is opened again (the notifier sends the current state at once), and
// a notifier that cannot be reached at all means polling.
func (d *dropRun) wait(ctx context.Context, i int) waitEnd {
	first := true
	for attempt := 0; ; attempt++ {
		end := d.listen(ctx, i, first)
		first = false
		switch {
		case end.kind != "dropped" && end.kind != "failed":
			return end
		case ctx.Err() != nil:
			return waitEnd{kind: "failed", reason: "stopped waiting"}
		case end.kind == "failed" || attempt >= 5:
			d.recs[i].Polled = true
			return d.poll(ctx, i)
		}
		d.reconnects.Add(1)
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// listen reads one stream of the shopper's ticket. Clients spread over
// source addresses 127.0.0.2–9, as in the sse scenario.
func (d *dropRun) listen(ctx context.Context, i int, first bool) waitEnd {
	if first {
		d.connSem <- struct{}{}
	}
	settled := false
	settle := func(ok bool) {
		if first && !settled {
			settled = true
			<-d.connSem
			d.connects.Add(1)
			if ok {
				d.streams.Add(1)
			}
		}
	}
	defer settle(false)
	local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%8))}
	tr := &http.Transport{DialContext: (&net.Dialer{LocalAddr: local, Timeout: 10 * time.Second}).DialContext, DisableCompression: true}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(ctx, "GET", d.o.notifier+"/v1/queues/"+d.o.queue+"/tickets/"+d.places[i].Ticket+"/events", nil)
	res, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return waitEnd{kind: "failed", reason: err.Error()}
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		return waitEnd{kind: "failed", reason: "events: status " + strconv.Itoa(res.StatusCode)}
	}
	settle(true)
	end := waitEnd{kind: "dropped"}
	readEvents(res.Body, func(event, data string) bool {
		now := time.Now()
		switch event {
		case "ready":
			var r struct {
				Token   string
				ReadyAt time.Time
			}
			if json.Unmarshal([]byte(data), &r) == nil && r.Token != "" {
				end = waitEnd{kind: "ready", token: r.Token, readyAt: r.ReadyAt, at: now}
			}
			return false
		case "closed":
			var r struct{ Reason string }
			_ = json.Unmarshal([]byte(data), &r)
			end = waitEnd{kind: "closed", reason: r.Reason, at: now}
			if r.Reason == "used" || r.Reason == "left" {
				end.kind = r.Reason
			}
			return false
		case "expired":
			end = waitEnd{kind: "expired", at: now}
			return false
		case "stock":
			var r struct{ Stock string }
			_ = json.Unmarshal([]byte(data), &r)
			d.stockMu.Lock()
			d.stockEvents[r.Stock]++
			d.stockMu.Unlock()
		}
		return true
	})
	return end
}

// poll waits by polling at the pace the gateway asks for.
func (d *dropRun) poll(ctx context.Context, i int) waitEnd {
	var p place
	var extra struct {
		Reason string `json:"reason"`
	}
	for {
		code, body, err := d.c.raw("GET", "/v1/queues/"+d.o.queue+"/tickets/"+d.places[i].Ticket)
		now := time.Now()
		if err != nil || code != 200 {
			return waitEnd{kind: "failed", reason: fmt.Sprintf("poll: %d %v", code, err)}
		}
		if err := json.Unmarshal([]byte(body), &p); err != nil {
			return waitEnd{kind: "failed", reason: "poll: " + err.Error()}
		}
		_ = json.Unmarshal([]byte(body), &extra)
		switch p.Status {
		case "READY":
			return waitEnd{kind: "ready", token: p.Token, readyAt: p.ReadyAt, at: now}
		case "CLOSED":
			return waitEnd{kind: "closed", reason: extra.Reason, at: now}
		case "WAITING":
		default:
			return waitEnd{kind: map[string]string{"EXPIRED": "expired", "USED": "used", "LEFT": "left"}[p.Status], at: now}
		}
		select {
		case <-ctx.Done():
			return waitEnd{kind: "failed", reason: "stopped waiting"}
		case <-time.After(time.Duration(max(p.PollAfterMs, 50)) * time.Millisecond):
		}
	}
}

// orderFinal orders one unit with the entry token and polls the order
// until it is final; it returns the time the final status was seen.
func orderFinal(ctx context.Context, c *client, user, sku, token string) (orderView, time.Time, error) {
	body, _ := json.Marshal(map[string]any{"sku": sku, "quantity": 1})
	var o orderView
	code, answer, err := c.send("POST", "/v1/orders", map[string]string{"X-User-Id": user, "Authorization": "Bearer " + token}, body)
	if err == nil && code < 300 {
		err = json.Unmarshal(answer, &o)
	}
	if err != nil || code >= 300 {
		return o, time.Time{}, fmt.Errorf("order: %d %v %s", code, err, answer)
	}
	for o.Status == "PENDING" {
		select {
		case <-ctx.Done():
			return o, time.Time{}, ctx.Err()
		case <-time.After(orderPollEvery):
		}
		if code, err := c.do("GET", "/v1/orders/"+o.OrderID, map[string]string{"X-User-Id": user}, nil, &o); err != nil || code != 200 {
			return o, time.Time{}, fmt.Errorf("order status: %d %v", code, err)
		}
	}
	return o, time.Now(), nil
}

// joinUsers puts the users in line, 64 joins at a time.
func joinUsers(ctx context.Context, c *client, q string, users []string) ([]place, error) {
	places := make([]place, len(users))
	var next atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(users) || ctx.Err() != nil || firstErr.Load() != nil {
					return
				}
				p, err := shopper{c: c, q: q, user: users[i]}.join()
				if err != nil {
					firstErr.Store(fmt.Errorf("join %s: %w", users[i], err))
					return
				}
				places[i] = p
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return nil, err
	}
	return places, ctx.Err()
}

// lateJoins sends n joins of new shoppers and counts the answers by status.
func lateJoins(ctx context.Context, c *client, q string, n int, tag string) map[string]int {
	out := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			code, err := c.do("POST", "/v1/queues/"+q+"/tickets", map[string]string{"X-User-Id": fmt.Sprintf("late%s-%d", tag, i)}, nil, nil)
			key := strconv.Itoa(code)
			if err != nil {
				key = "error"
			}
			mu.Lock()
			out[key]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// dropView is what the admin view says of the run's SKU.
type dropView struct {
	hasStock     bool
	sold         int64
	state        string
	closedReason string
}

func adminDropView(c *client, q, sku string) (dropView, error) {
	var v struct {
		State        string `json:"state"`
		ClosedReason string `json:"closedReason"`
		Stock        *struct {
			SKUs []struct {
				SKU  string `json:"sku"`
				Sold int64  `json:"sold"`
			} `json:"skus"`
		} `json:"stock"`
	}
	if err := c.admin("GET", "/v1/admin/queues/"+q, nil, &v); err != nil {
		return dropView{}, err
	}
	out := dropView{state: v.State, closedReason: v.ClosedReason}
	if v.Stock != nil {
		for _, s := range v.Stock.SKUs {
			if s.SKU == sku {
				out.hasStock, out.sold = true, s.Sold
			}
		}
	}
	return out, nil
}

// waitSellable waits until the line follows the SKU's stock: its last
// tick saw units sellable units.
func waitSellable(ctx context.Context, c *client, q string, units int64) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		var v struct {
			Stock *struct {
				State    string `json:"state"`
				Sellable int64  `json:"sellable"`
			} `json:"stock"`
		}
		err := c.admin("GET", "/v1/admin/queues/"+q, nil, &v)
		if err == nil && v.Stock != nil && v.Stock.State == "available" && v.Stock.Sellable == units {
			return nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				b, _ := json.Marshal(v.Stock)
				err = fmt.Errorf("the line's stock is %s, want available with %d sellable", b, units)
			}
			return fmt.Errorf("queue %s never followed its stock: %w", q, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
