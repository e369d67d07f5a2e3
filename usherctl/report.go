package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"usher/internal/catalog"
	"usher/internal/event"
	"usher/internal/orders"
)

const reportSynopsis = `usherctl report --queue Q [--since DURATION|RFC3339] [--out report.html] [--json report.json]

Writes one self-contained HTML report of queue Q's drop, from the event
streams alone (no Redis, no PostgreSQL), and with --json the same numbers
as JSON:
  - arrivals (joins) per second, admissions (READY) per second, and the
    line's length over time, reconstructed from the joins, leaves and
    admissions as the line's scripts applied them (a duplicate join is an
    arrival, not a second place; a pre-queued shopper is in line from the
    join; everyone still waiting when the queue closed as sold out leaves
    the line then);
  - time in line (join, or for a pre-queue join the opening, to readyAt),
    READY to order and order to final status: count, p50, p90, p99
    (nearest rank), mean and max;
  - what the admitted did: paid, rejected and failed by reason, pending,
    tokens expired unused, left, still holding a valid token;
  - the sold-out time (the config change that closed the queue with
    reason sold_out) and the lottery draw of a scheduled drop, if any.
--since limits the report to what happened from then on (a duration
before now, e.g. 2h, or an RFC 3339 time); the line's length then still
counts everyone who joined before it. The charts are SVG, drawn and
inlined by usherctl: the file works offline and loads nothing.`

func (c *cli) report(ctx context.Context, args []string) error {
	fs := newFlags("report", reportSynopsis)
	q := fs.String("queue", "", "the queue to report on (required)")
	sinceArg := fs.String("since", "", "report from this time on: a duration before now (2h) or an RFC 3339 time")
	out := fs.String("out", "report.html", "write the HTML report here")
	jsonOut := fs.String("json", "", "also write the report's numbers as JSON here")
	pos, err := c.parse(fs, args)
	if err != nil {
		return done(err)
	}
	switch {
	case len(pos) > 0:
		return usagef("report: unexpected arguments %q", pos)
	case *q == "":
		return usagef("report: --queue is required")
	case !catalog.ValidName(*q):
		return usagef("report: --queue %q is not a queue name", *q)
	case *out == "":
		return usagef("report: --out must name a file")
	}
	now := c.now()
	since, err := parseSince(*sinceArg, now)
	if err != nil {
		return usagef("report: --since %q: %v", *sinceArg, err)
	}
	nc, js, err := c.jetStream(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	h, err := loadHistory(ctx, js, *q, parts{orders: true})
	if err != nil {
		return err
	}
	if err := loadDrop(ctx, js, h); err != nil {
		return err
	}
	if err := h.unknownQueue(ctx, js, "report"); err != nil {
		return err
	}
	closes, err := loadCloses(ctx, js, *q)
	if err != nil {
		return err
	}
	r := buildReport(h, closes, since, now)
	if *jsonOut != "" {
		b, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	page, err := renderReport(r)
	if err != nil {
		return err
	}
	if err := os.WriteFile(*out, page, 0o644); err != nil {
		return err
	}
	r.summary(c.stdout)
	fmt.Fprintf(c.stdout, "wrote %s", *out)
	if *jsonOut != "" {
		fmt.Fprintf(c.stdout, " and %s", *jsonOut)
	}
	fmt.Fprintln(c.stdout)
	return nil
}

// parseSince reads --since: empty (everything), a duration before now, or
// an RFC 3339 time.
func parseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, errors.New("a duration before now must be positive")
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, errors.New("want a duration (90m) or an RFC 3339 time (2026-11-27T09:00:00Z)")
	}
	return t, nil
}

// closeEvent is a config change that closed the queue.
type closeEvent struct {
	at     time.Time // when USHER_OPS stored it
	by     string
	reason string // the closedReason: sold_out, or "" for an operator's close
}

// loadCloses reads the config changes of queue q that closed it (from
// another state) from USHER_OPS.
func loadCloses(ctx context.Context, js jetstream.JetStream, q string) ([]closeEvent, error) {
	var out []closeEvent
	err := readStream(ctx, js, window{stream: event.StreamOps, filters: []string{event.ConfigChangedSubject}}, func(m storedMsg) error {
		var e struct {
			Type string `json:"type"`
			Data struct {
				Queue  string `json:"queue"`
				By     string `json:"by"`
				Config *struct {
					State        string `json:"state"`
					ClosedReason string `json:"closedReason"`
				} `json:"config"`
				Previous *struct {
					State string `json:"state"`
				} `json:"previous"`
			} `json:"data"`
		}
		if json.Unmarshal(m.Data, &e) != nil || e.Type != event.TypeConfigChanged || e.Data.Queue != q || e.Data.Config == nil {
			return nil
		}
		if e.Data.Config.State != catalog.StateClosed || (e.Data.Previous != nil && e.Data.Previous.State == catalog.StateClosed) {
			return nil
		}
		out = append(out, closeEvent{at: m.Stored, by: e.Data.By, reason: e.Data.Config.ClosedReason})
		return nil
	})
	if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, err
	}
	return out, nil
}

// dropReport is what usherctl report writes: the HTML shows it, --json
// writes it as it is. Times are UTC; durations and rates are in seconds.
type dropReport struct {
	Queue       string    `json:"queue"`
	GeneratedAt time.Time `json:"generatedAt"`
	// From and To bound what the report covers: --since (or the first
	// event) to the last event.
	From   time.Time    `json:"from"`
	To     time.Time    `json:"to"`
	Totals reportTotals `json:"totals"`
	// Timeline is per bucket of BucketSeconds from Start: arrivals and
	// admissions per second (the bucket's count over its length) and the
	// line's length at the bucket's end (at To for the last).
	Timeline timeline `json:"timeline"`
	// PeakLineLength is the longest the line was, and when it first was.
	PeakLineLength peak `json:"peakLineLength"`
	// TimeInLine is of the shoppers admitted in the window, ReadyToOrder
	// of their orders, OrderToFinal of those orders that are final.
	TimeInLine   durations `json:"timeInLine"`
	ReadyToOrder durations `json:"readyToOrder"`
	OrderToFinal durations `json:"orderToFinal"`
	// TimeInLineHistogram counts the shoppers admitted by time in line,
	// per bucket of upper bound Le seconds ("+Inf": the rest).
	TimeInLineHistogram []bucket `json:"timeInLineHistogram"`
	Outcomes            outcomes `json:"outcomes"`
	SoldOut             *soldOut `json:"soldOut"`
	Lottery             *draw    `json:"lottery"`
	// Malformed counts events the streams hold that could not be read.
	Malformed int `json:"malformed,omitempty"`
}

type reportTotals struct {
	Joins            int `json:"joins"`            // join events (a duplicate join too)
	Shoppers         int `json:"shoppers"`         // places in line they made (duplicates resolve to the first)
	Leaves           int `json:"leaves"`           // leave events
	LeftWhileWaiting int `json:"leftWhileWaiting"` // shoppers who left before they were admitted
	Admissions       int `json:"admissions"`       // shoppers admitted (READY)
	Orders           int `json:"orders"`           // orders requested
}

type timeline struct {
	Start         time.Time `json:"start"`
	BucketSeconds int       `json:"bucketSeconds"`
	Arrivals      []float64 `json:"arrivalsPerSecond"`
	Admissions    []float64 `json:"admissionsPerSecond"`
	LineLength    []int     `json:"lineLength"`
}

type peak struct {
	Value int        `json:"value"`
	At    *time.Time `json:"at,omitempty"`
}

// durations summarises a set of durations in seconds (rounded to the
// millisecond); percentiles are nearest-rank.
type durations struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	Mean  float64 `json:"mean"`
	Max   float64 `json:"max"`
}

type bucket struct {
	Le    string `json:"le"`
	Count int    `json:"count"`
}

// outcomes says what each shopper admitted in the window did: exactly one
// of them each, so they add up to Admitted.
type outcomes struct {
	Admitted int            `json:"admitted"`
	Paid     int            `json:"paid"`
	Rejected map[string]int `json:"rejected"` // by reason
	Failed   map[string]int `json:"failed"`   // by reason
	Pending  int            `json:"pending"`  // ordered, not final yet
	Expired  int            `json:"expired"`  // the token expired unused
	Left     int            `json:"left"`     // gave the slot up before ordering
	Active   int            `json:"active"`   // holds a valid token, no order yet
}

type soldOut struct {
	At time.Time `json:"at"`
	By string    `json:"by"`
	// AfterSeconds is how long after the opening (a scheduled drop) or the
	// first arrival of the window it came.
	AfterSeconds float64 `json:"afterSeconds"`
	// Waiting is how many were still in line, told sold_out.
	Waiting int `json:"waiting"`
}

type draw struct {
	DrawnAt       time.Time `json:"drawnAt"`
	OpensAt       time.Time `json:"opensAt"`
	Entries       int       `json:"entries"`
	EntriesCursor uint64    `json:"entriesCursor"`
	Seed          string    `json:"seed"`
	Commitment    string    `json:"commitment"`
	OrderDigest   string    `json:"orderDigest"`
}

// inLineBounds are the time-in-line histogram's upper bounds in seconds.
var inLineBounds = []float64{1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600}

// maxBuckets bounds the timeline's length: the bucket grows with the span.
const maxBuckets = 720

var bucketSteps = []int{1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400}

// buildReport computes the report of a history from since (zero: all of
// it) as of now.
func buildReport(h *history, closes []closeEvent, since, now time.Time) *dropReport {
	w := reportWindow{since: since, now: now}
	r := &dropReport{Queue: h.queue, GeneratedAt: now.UTC(), Malformed: h.malformed,
		Lottery: lastDraw(h.draws, w), SoldOut: firstSoldOut(closes, w)}
	// The opening a draw placed: a pre-queue join waits from it.
	var opensAt, soldAt time.Time
	if r.Lottery != nil {
		opensAt = r.Lottery.OpensAt
	}
	if r.SoldOut != nil {
		soldAt = r.SoldOut.At
	}

	l := project(h)
	arrivals, leaves := entriesIn(h.entries, w)
	adm := admissionsIn(l, indexOrders(h.orders), opensAt, w)
	lengths := lineLengthsOf(l, soldAt)
	r.Totals = reportTotals{Joins: len(arrivals), Leaves: leaves, Admissions: len(adm.readyAt), Orders: ordersIn(h.orders, w)}
	r.Totals.Shoppers, r.Totals.LeftWhileWaiting = placesIn(l, w)
	r.Outcomes = adm.outcomes
	r.TimeInLine, r.ReadyToOrder, r.OrderToFinal = summarize(adm.inLine), summarize(adm.toOrder), summarize(adm.toFinal)
	r.TimeInLineHistogram = histogram(adm.inLine)

	seen := eventSpan(h, w, soldAt, adm.readyAt)
	r.From, r.To = seen.bounds()
	if r.SoldOut != nil {
		start := seen.first
		if !opensAt.IsZero() && w.in(opensAt) {
			start = opensAt
		}
		r.SoldOut.AfterSeconds = round3(soldAt.Sub(start).Seconds())
		r.SoldOut.Waiting = lengths.at(soldAt.Add(-time.Nanosecond))
	}
	r.Timeline = timelineOf(r.From, r.To, arrivals, adm.readyAt, lengths)
	r.PeakLineLength = lengths.peak(r.From, r.To, w)
	return r
}

// reportWindow is what a report covers: events from since (zero: all of
// them) to now.
type reportWindow struct{ since, now time.Time }

func (w reportWindow) in(t time.Time) bool { return !t.Before(w.since) && !t.After(w.now) }

// lastDraw is the last lottery draw in the window (any, without --since).
func lastDraw(draws []drawEvent, w reportWindow) *draw {
	for i := len(draws) - 1; i >= 0; i-- {
		if d := draws[i]; w.in(d.stored) || w.since.IsZero() {
			return &draw{DrawnAt: d.stored.UTC(), OpensAt: d.OpensAt.UTC(), Entries: d.Entries, EntriesCursor: d.EntriesCursor,
				Seed: d.Seed, Commitment: d.Commitment, OrderDigest: d.OrderDigest}
		}
	}
	return nil
}

// firstSoldOut is the first close in the window for sold out.
func firstSoldOut(closes []closeEvent, w reportWindow) *soldOut {
	for _, c := range closes {
		if c.reason == catalog.ReasonSoldOut && w.in(c.at) {
			return &soldOut{At: c.at.UTC(), By: c.by}
		}
	}
	return nil
}

// entriesIn is when the window's joins came (a duplicate join is an
// arrival too), and how many leaves it holds.
func entriesIn(entries []entryEvent, w reportWindow) (arrivals []time.Time, leaves int) {
	for _, ev := range entries {
		switch {
		case !w.in(ev.stored):
		case ev.leave:
			leaves++
		default:
			arrivals = append(arrivals, ev.stored)
		}
	}
	return arrivals, leaves
}

// ordersIn counts the orders requested in the window.
func ordersIn(orders []orderEvent, w reportWindow) int {
	n := 0
	for _, o := range orders {
		if o.typ == event.TypeOrderRequested && w.in(o.at) {
			n++
		}
	}
	return n
}

// isPlace reports whether e made a place in line: not a duplicate join,
// not a leave whose join the streams no longer hold.
func isPlace(e *entry) bool { return e.alias == 0 && !e.orphan }

// placesIn counts the places made in the window, and those that left the
// line in it before they were admitted.
func placesIn(l *line, w reportWindow) (made, leftWaiting int) {
	for _, e := range l.entries {
		if !isPlace(e) {
			continue
		}
		if w.in(e.joined) {
			made++
		}
		if e.adm == nil && !e.leftAt.IsZero() && w.in(e.leftAt) {
			leftWaiting++
		}
	}
	return made, leftWaiting
}

// span is the first and last event of a window.
type span struct {
	w           reportWindow
	first, last time.Time
}

func (s *span) see(t time.Time) {
	if !s.w.in(t) {
		return
	}
	if s.first.IsZero() || t.Before(s.first) {
		s.first = t
	}
	if t.After(s.last) {
		s.last = t
	}
}

// eventSpan is the span of the window's joins, leaves, orders,
// admissions and sold-out close.
func eventSpan(h *history, w reportWindow, soldAt time.Time, admitted []time.Time) span {
	s := span{w: w}
	for _, ev := range h.entries {
		s.see(ev.stored)
	}
	for _, o := range h.orders {
		s.see(o.at)
	}
	if !soldAt.IsZero() {
		s.see(soldAt)
	}
	for _, t := range admitted {
		s.see(t)
	}
	return s
}

// bounds is what the report covers, in UTC: from --since (or the first
// event) to the last event; now when nothing happened.
func (s span) bounds() (from, to time.Time) {
	from, to = s.w.since, s.last
	if s.w.since.IsZero() {
		from = s.first
	}
	if from.IsZero() {
		from = s.w.now
	}
	if to.Before(from) {
		to = from
	}
	return from.UTC(), to.UTC()
}

// tokenOrders are, per admitted token, its first order request and its
// first final order (the one that used it).
type tokenOrders struct {
	requested, final map[string]orderEvent
}

func indexOrders(orders []orderEvent) tokenOrders {
	t := tokenOrders{requested: map[string]orderEvent{}, final: map[string]orderEvent{}}
	for _, o := range orders {
		switch o.typ {
		case event.TypeOrderRequested:
			if _, ok := t.requested[o.tokenID]; !ok {
				if o.requestedAt.IsZero() {
					o.requestedAt = o.at
				}
				t.requested[o.tokenID] = o
			}
		case event.TypeOrderCompleted, event.TypeOrderFailed:
			if f, ok := t.final[o.tokenID]; !ok || o.at.Before(f.at) {
				t.final[o.tokenID] = o
			}
		}
	}
	return t
}

// admissions are the places admitted (READY) in a window: when, how long
// each waited in seconds, and what each did.
type admissions struct {
	readyAt                  []time.Time
	inLine, toOrder, toFinal []float64
	outcomes                 outcomes
}

// admissionsIn collects the places of l admitted in the window. A place
// joined before the opening (the pre-queue) waits from the opening.
func admissionsIn(l *line, orders tokenOrders, opensAt time.Time, w reportWindow) admissions {
	a := admissions{outcomes: outcomes{Rejected: map[string]int{}, Failed: map[string]int{}}}
	for _, e := range l.entries {
		if !isPlace(e) || e.adm == nil || !w.in(e.adm.ReadyAt) {
			continue
		}
		ready := e.adm.ReadyAt
		a.readyAt = append(a.readyAt, ready)
		start := e.joined
		if !opensAt.IsZero() && start.Before(opensAt) && !opensAt.After(ready) {
			start = opensAt
		}
		a.inLine = append(a.inLine, max(ready.Sub(start), 0).Seconds())
		req, ordered := orders.requested[e.adm.TokenID]
		if ordered {
			a.toOrder = append(a.toOrder, max(req.requestedAt.Sub(ready), 0).Seconds())
		}
		f, final := orders.final[e.adm.TokenID]
		if final && ordered {
			a.toFinal = append(a.toFinal, max(f.at.Sub(req.requestedAt), 0).Seconds())
		}
		a.outcomes.add(e, ordered, f, final, w.now)
	}
	return a
}

// add files an admitted place under what became of it: its final order
// (final), an order not final yet (ordered), a leave, its token's expiry
// by now, or a token it still holds.
func (o *outcomes) add(e *entry, ordered bool, f orderEvent, final bool, now time.Time) {
	o.Admitted++
	switch {
	case final && (f.status == string(orders.Paid) || (f.status == "" && f.typ == event.TypeOrderCompleted)):
		o.Paid++
	case final && f.status == string(orders.Rejected):
		o.Rejected[reasonOf(f)]++
	case final:
		o.Failed[reasonOf(f)]++
	case ordered:
		o.Pending++
	case !e.leftAt.IsZero():
		o.Left++
	case !e.adm.ExpiresAt.After(now):
		o.Expired++
	default:
		o.Active++
	}
}

// lineLengths are the places' joins and ends, sorted, to count the line
// at any time.
type lineLengths struct{ joins, ends []time.Time }

// lineLengthsOf holds each place from its join until its admission
// (READY), its leave, or a sold-out close that found it waiting.
func lineLengthsOf(l *line, soldAt time.Time) lineLengths {
	var ll lineLengths
	for _, e := range l.entries {
		if !isPlace(e) {
			continue
		}
		ll.joins = append(ll.joins, e.joined)
		if end := placeEnd(e, soldAt); !end.IsZero() {
			ll.ends = append(ll.ends, end)
		}
	}
	sort.Slice(ll.joins, func(i, j int) bool { return ll.joins[i].Before(ll.joins[j]) })
	sort.Slice(ll.ends, func(i, j int) bool { return ll.ends[i].Before(ll.ends[j]) })
	return ll
}

// placeEnd is when e's place in line ended, or zero while it waits.
func placeEnd(e *entry, soldAt time.Time) time.Time {
	var end time.Time
	switch {
	case e.adm != nil:
		end = e.adm.ReadyAt
	case !e.leftAt.IsZero():
		end = e.leftAt
	}
	if !soldAt.IsZero() && e.adm == nil && !e.joined.After(soldAt) && (end.IsZero() || end.After(soldAt)) {
		end = soldAt
	}
	return end
}

// at is the line's length at t.
func (ll lineLengths) at(t time.Time) int {
	return sort.Search(len(ll.joins), func(i int) bool { return ll.joins[i].After(t) }) -
		sort.Search(len(ll.ends), func(i int) bool { return ll.ends[i].After(t) })
}

// peak is the longest the line was from from to to, and when it first
// was: at from, or at a join or end in the window.
func (ll lineLengths) peak(from, to time.Time, w reportWindow) peak {
	p := peak{Value: ll.at(from)}
	if p.Value > 0 {
		at := from
		p.At = &at
	}
	for _, t := range append(append([]time.Time{}, ll.joins...), ll.ends...) {
		if !w.in(t) || t.After(to) {
			continue
		}
		if v := ll.at(t); v > p.Value || (v == p.Value && p.At != nil && t.Before(*p.At)) {
			at := t.UTC()
			p = peak{Value: v, At: &at}
		}
	}
	return p
}

// timelineOf buckets from to to by a step that keeps at most maxBuckets:
// arrivals and admissions per second, and the line's length at each
// bucket's end (at to for the last).
func timelineOf(from, to time.Time, arrivals, admitted []time.Time, lengths lineLengths) timeline {
	step := bucketSteps[len(bucketSteps)-1]
	for _, s := range bucketSteps {
		if to.Sub(from) < time.Duration(s*maxBuckets)*time.Second {
			step = s
			break
		}
	}
	d := time.Duration(step) * time.Second
	start := from.Truncate(d)
	n := int(to.Sub(start)/d) + 1
	tl := timeline{Start: start, BucketSeconds: step, Arrivals: make([]float64, n), Admissions: make([]float64, n), LineLength: make([]int, n)}
	for _, t := range arrivals {
		tl.Arrivals[int(t.Sub(start)/d)]++
	}
	for _, t := range admitted {
		tl.Admissions[int(t.Sub(start)/d)]++
	}
	for i := range n {
		tl.Arrivals[i] /= float64(step)
		tl.Admissions[i] /= float64(step)
		end := start.Add(time.Duration(i+1) * d).Add(-time.Nanosecond)
		if end.After(to) {
			end = to
		}
		tl.LineLength[i] = lengths.at(end)
	}
	return tl
}

func reasonOf(o orderEvent) string {
	if o.reason == "" {
		return "unknown"
	}
	return o.reason
}

// summarize is count, nearest-rank percentiles, mean and max of xs.
func summarize(xs []float64) durations {
	if len(xs) == 0 {
		return durations{}
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	rank := func(p float64) float64 {
		i := int(math.Ceil(p/100*float64(len(s)))) - 1
		return round3(s[max(i, 0)])
	}
	var sum float64
	for _, x := range s {
		sum += x
	}
	return durations{Count: len(s), P50: rank(50), P90: rank(90), P99: rank(99), Mean: round3(sum / float64(len(s))), Max: round3(s[len(s)-1])}
}

func histogram(xs []float64) []bucket {
	out := make([]bucket, len(inLineBounds)+1)
	for i, b := range inLineBounds {
		out[i].Le = fmt.Sprint(b)
	}
	out[len(inLineBounds)].Le = "+Inf"
	for _, x := range xs {
		out[sort.SearchFloat64s(inLineBounds, x)].Count++
	}
	return out
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

// summary prints the report's headline figures.
func (r *dropReport) summary(w io.Writer) {
	fmt.Fprintf(w, "report of queue %s from the streams, %s to %s\n", r.Queue, stamp(r.From), stamp(r.To))
	t := r.Totals
	fmt.Fprintf(w, "  %d joins (%d places), %d leaves (%d while waiting), %d admitted, %d orders; longest line %d\n",
		t.Joins, t.Shoppers, t.Leaves, t.LeftWhileWaiting, t.Admissions, t.Orders, r.PeakLineLength.Value)
	for _, d := range []struct {
		name string
		d    durations
	}{{"time in line", r.TimeInLine}, {"READY to order", r.ReadyToOrder}, {"order to final", r.OrderToFinal}} {
		if d.d.Count > 0 {
			fmt.Fprintf(w, "  %-15s p50 %s  p90 %s  p99 %s  max %s (%d)\n", d.name,
				secs(d.d.P50), secs(d.d.P90), secs(d.d.P99), secs(d.d.Max), d.d.Count)
		}
	}
	o := r.Outcomes
	fmt.Fprintf(w, "  admitted %d: paid %d, rejected %d%s, failed %d%s, pending %d, expired %d, left %d, active %d\n",
		o.Admitted, o.Paid, total(o.Rejected), reasons(o.Rejected), total(o.Failed), reasons(o.Failed), o.Pending, o.Expired, o.Left, o.Active)
	if s := r.SoldOut; s != nil {
		fmt.Fprintf(w, "  sold out at %s (%s after the start), %d still in line\n", stamp(s.At), secs(s.AfterSeconds), s.Waiting)
	}
	if d := r.Lottery; d != nil {
		fmt.Fprintf(w, "  lottery drawn at %s: %d pre-queued, order digest %s\n", stamp(d.DrawnAt), d.Entries, d.OrderDigest)
	}
}

func secs(s float64) string { return (time.Duration(s*1000) * time.Millisecond).String() }

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// reasons is " (reason n, …)" by count, or "" when empty.
func reasons(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return " (" + strings.Join(parts, ", ") + ")"
}
