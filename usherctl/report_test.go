package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"usher/internal/event"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
)

// storedAt is when stream stored the event with sequence seq.
func (w *world) storedAt(stream string, seq uint64) time.Time {
	w.t.Helper()
	st, err := w.js.Stream(context.Background(), stream)
	if err != nil {
		w.t.Fatal(err)
	}
	m, err := st.GetMsg(context.Background(), seq)
	if err != nil {
		w.t.Fatal(err)
	}
	return m.Time
}

// reportHistory is a drop made with real streams: ten shoppers join (one
// of them twice), one leaves while waiting, eight are admitted, five
// order (paid, rejected twice for sold_out, failed, still pending), one
// leaves with her token, one lets it expire, one still holds it; the last
// one waiting is told sold out when the queue closes; the pre-queue was
// drawn before all of it. Every time the report computes is fixed here
// from the times the streams stored.
type reportHistory struct {
	q                string
	joins            []time.Time // stored, u0..u9, then u1 again
	readyAt          []time.Time // u0..u7
	requestedAt      []time.Time // u0..u4
	finalAt          []time.Time // u0..u3
	leftU9, leftU5   time.Time
	soldOut, drawnAt time.Time
	opensAt          time.Time
	seed, commitment string
}

const reportSeed = "6e2c1f0a9d8b7c6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e"

func makeReportHistory(t *testing.T, w *world) reportHistory {
	t.Helper()
	h := reportHistory{q: testenv.Name(t), seed: reportSeed, commitment: strings.Repeat("ab", 32)}
	h.opensAt = time.Now().Add(-time.Minute).UTC().Truncate(time.Millisecond)
	drawSeq := w.publish(event.LotteryDrawnSubject, "lottery/"+h.q, event.TypeLotteryDrawn, time.Now(), event.LotteryDrawn{
		Queue: h.q, Seed: h.seed, Commitment: h.commitment, OpensAt: h.opensAt, Entries: 0, EntriesCursor: 7, OrderDigest: strings.Repeat("cd", 32)})
	h.drawnAt = w.storedAt(event.StreamOps, drawSeq)
	var seqs []uint64
	for i := range 10 {
		seqs = append(seqs, w.join(h.q, fmt.Sprintf("u%d", i)))
	}
	seqs = append(seqs, w.join(h.q, "u1")) // a double click: the same place
	for _, s := range seqs {
		h.joins = append(h.joins, w.storedAt(event.StreamEntries, s))
	}
	h.leftU9 = w.storedAt(event.StreamEntries, w.leave(h.q, seqs[9], "u9"))
	tok := func(i int) string { return waitqueue.TokenID(h.q, w.epoch, seqs[i]) }
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for i := range 8 { // time in line 0.6 s, 0.7 s, … 1.3 s
		ready := h.joins[i].Add(ms(500 + 100*(i+1)))
		expires := ready.Add(time.Minute)
		if i == 7 {
			expires = ready.Add(3 * time.Hour) // still valid when the report is made
		}
		h.readyAt = append(h.readyAt, ready)
		w.admit(h.q, seqs[i], fmt.Sprintf("u%d", i), ready, expires)
	}
	h.leftU5 = w.storedAt(event.StreamEntries, w.leave(h.q, seqs[5], "u5"))
	for i := range 5 { // READY to order 50 ms, 100 ms, … 250 ms
		h.requestedAt = append(h.requestedAt, h.readyAt[i].Add(ms(50*(i+1))))
	}
	for i := range 4 { // order to final 100 ms, … 400 ms
		h.finalAt = append(h.finalAt, h.requestedAt[i].Add(ms(100*(i+1))))
	}
	// The finals are dated by their event time only once it has passed (a
	// time ahead of when the stream stored it counts as the stored time).
	time.Sleep(time.Until(h.finalAt[3].Add(100 * time.Millisecond)))
	for i := range 5 {
		id := fmt.Sprintf("ord_%d", i)
		w.publish(event.OrderRequestedSubject(h.q), id, event.TypeOrderRequested, h.requestedAt[i], event.OrderRequested{
			OrderID: id, TokenID: tok(i), Queue: h.q, User: fmt.Sprintf("u%d", i), SKU: "sku", Quantity: 1,
			TokenReadyAt: h.readyAt[i], RequestedAt: h.requestedAt[i]})
	}
	finals := []struct{ status, reason string }{{"PAID", ""}, {"REJECTED", "sold_out"}, {"REJECTED", "sold_out"}, {"FAILED", "payment_declined"}}
	for i, f := range finals {
		id := fmt.Sprintf("ord_%d", i)
		subj, typ := event.OrderCompletedSubject(h.q), event.TypeOrderCompleted
		if f.status != "PAID" {
			subj, typ = event.OrderFailedSubject(h.q), event.TypeOrderFailed
		}
		w.publish(subj, "final/"+id, typ, h.finalAt[i], event.OrderFinished{OrderID: id, TokenID: tok(i), Queue: h.q,
			User: fmt.Sprintf("u%d", i), SKU: "sku", Quantity: 1, Status: f.status, Reason: f.reason})
	}
	closed := w.publish(event.ConfigChangedSubject, "config/"+h.q+"/close", event.TypeConfigChanged, time.Now(), event.ConfigChanged{
		Queue: h.q, By: "admitter (sold out)",
		Config:   map[string]any{"name": h.q, "targetActive": 10, "state": "closed", "closedReason": "sold_out"},
		Previous: map[string]any{"name": h.q, "targetActive": 10, "state": "open"}})
	h.soldOut = w.storedAt(event.StreamOps, closed)
	return h
}

// want is the report of the history as of now, computed from its times.
func (h reportHistory) want(now time.Time) *dropReport {
	secs := func(d time.Duration) float64 { return round3(d.Seconds()) }
	from := h.joins[0].UTC()
	to := h.soldOut.UTC()
	start := from.Truncate(time.Second)
	n := int(to.Sub(start)/time.Second) + 1
	tl := timeline{Start: start, BucketSeconds: 1, Arrivals: make([]float64, n), Admissions: make([]float64, n), LineLength: make([]int, n)}
	for _, j := range h.joins {
		tl.Arrivals[int(j.Sub(start)/time.Second)]++
	}
	for _, r := range h.readyAt {
		tl.Admissions[int(r.Sub(start)/time.Second)]++
	}
	// In line: u0..u9 (not the double click) from their joins, until
	// READY (u0..u7), the leave (u9) or the sold-out close (u8).
	ends := append(append([]time.Time{}, h.readyAt...), h.soldOut, h.leftU9)
	lineAt := func(t time.Time) int {
		n := 0
		for _, j := range h.joins[:10] {
			if !j.After(t) {
				n++
			}
		}
		for _, e := range ends {
			if !e.After(t) {
				n--
			}
		}
		return n
	}
	for i := range n {
		end := start.Add(time.Duration(i+1) * time.Second).Add(-time.Nanosecond)
		if end.After(to) {
			end = to
		}
		tl.LineLength[i] = lineAt(end)
	}
	peakAt := h.joins[9].UTC() // everyone in line, before the first READY
	return &dropReport{
		Queue: h.q, GeneratedAt: now.UTC(), From: from, To: to,
		Totals:         reportTotals{Joins: 11, Shoppers: 10, Leaves: 2, LeftWhileWaiting: 1, Admissions: 8, Orders: 5},
		Timeline:       tl,
		PeakLineLength: peak{Value: 10, At: &peakAt},
		TimeInLine:     durations{Count: 8, P50: 0.9, P90: 1.3, P99: 1.3, Mean: 0.95, Max: 1.3},
		ReadyToOrder:   durations{Count: 5, P50: 0.15, P90: 0.25, P99: 0.25, Mean: 0.15, Max: 0.25},
		OrderToFinal:   durations{Count: 4, P50: 0.2, P90: 0.4, P99: 0.4, Mean: 0.25, Max: 0.4},
		TimeInLineHistogram: []bucket{{"1", 5}, {"5", 3}, {"15", 0}, {"30", 0}, {"60", 0}, {"120", 0}, {"300", 0},
			{"600", 0}, {"1800", 0}, {"3600", 0}, {"+Inf", 0}},
		Outcomes: outcomes{Admitted: 8, Paid: 1, Rejected: map[string]int{"sold_out": 2}, Failed: map[string]int{"payment_declined": 1},
			Pending: 1, Expired: 1, Left: 1, Active: 1},
		SoldOut: &soldOut{At: h.soldOut.UTC(), By: "admitter (sold out)", AfterSeconds: secs(h.soldOut.Sub(h.opensAt)), Waiting: 1},
		Lottery: &draw{DrawnAt: h.drawnAt.UTC(), OpensAt: h.opensAt, Entries: 0, EntriesCursor: 7, Seed: h.seed,
			Commitment: h.commitment, OrderDigest: strings.Repeat("cd", 32)},
	}
}

// usherctl report writes, from the streams alone, the numbers of a drop
// — arrivals, admissions and line length per second, the waits'
// percentiles, what every admitted shopper did, the sold-out time, the
// draw — exactly as the history made them, as JSON; and an HTML file that
// parses, holds the four charts as inline SVG, and names no URL.
func TestReportOfADropFromTheStreams(t *testing.T) {
	w := newWorld(t)
	h := makeReportHistory(t, w)
	now := h.soldOut.Add(2 * time.Hour) // u6's token expired, u7's not
	dir := t.TempDir()
	out, jsonOut := filepath.Join(dir, "report.html"), filepath.Join(dir, "report.json")
	res := w.run(invocation{now: now}, "report", "--queue", h.q, "--out", out, "--json", jsonOut)
	if res.code != exitOK {
		t.Fatalf("report exited %d: %v\n%s%s", res.code, res.err, res.stdout, res.stderr)
	}
	for _, want := range []string{"11 joins (10 places), 2 leaves (1 while waiting), 8 admitted, 5 orders; longest line 10",
		"time in line    p50 900ms  p90 1.3s  p99 1.3s  max 1.3s (8)",
		"admitted 8: paid 1, rejected 2 (sold_out 2), failed 1 (payment_declined 1), pending 1, expired 1, left 1, active 1",
		"1 still in line", "lottery drawn at", "wrote " + out + " and " + jsonOut} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, res.stdout)
		}
	}

	b, err := os.ReadFile(jsonOut)
	if err != nil {
		t.Fatal(err)
	}
	var got dropReport
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := h.want(now)
	wb, _ := json.MarshalIndent(want, "", "  ")
	var wantRT dropReport // through JSON as well: the same encoding of times
	if err := json.Unmarshal(wb, &wantRT); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, wantRT) {
		t.Errorf("report JSON differs:\n got %s\nwant %s", b, wb)
	}

	page, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	checkReportHTML(t, page, h.q, 4)
}

// checkReportHTML parses the page and checks it holds n charts as inline
// SVG, loads nothing (no script, stylesheet, image, frame or URL) and
// names the queue.
func checkReportHTML(t *testing.T, page []byte, q string, n int) {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(string(page)))
	if err != nil {
		t.Fatalf("the report does not parse as HTML: %v", err)
	}
	var svgs, charts, paths int
	var title string
	var walk func(*html.Node, bool)
	walk = func(nd *html.Node, inFigure bool) {
		if nd.Type == html.ElementNode {
			switch nd.Data {
			case "script", "link", "img", "iframe", "object", "embed":
				t.Errorf("the report has a <%s>", nd.Data)
			case "figure":
				inFigure = true
			case "svg":
				if inFigure {
					svgs++
				}
			case "path", "text", "rect":
				paths++
			case "title":
				if nd.FirstChild != nil {
					title = nd.FirstChild.Data
				}
			}
			for _, a := range nd.Attr {
				if a.Key == "class" && a.Val == "chart" {
					charts++
				}
				if a.Key == "src" || a.Key == "href" || (a.Key == "xlink:href" && !strings.HasPrefix(a.Val, "#")) {
					t.Errorf("<%s %s=%q> loads something", nd.Data, a.Key, a.Val)
				}
			}
		}
		for c := nd.FirstChild; c != nil; c = c.NextSibling {
			walk(c, inFigure)
		}
	}
	walk(doc, false)
	if charts != n || svgs != n {
		t.Errorf("the report has %d chart figures with %d SVGs, want %d", charts, svgs, n)
	}
	if paths < 10*n {
		t.Errorf("the charts draw %d shapes and texts: empty?", paths)
	}
	if !strings.Contains(title, q) {
		t.Errorf("title %q does not name the queue", title)
	}
	for _, s := range []string{"http://", "https://", "//cdn", "url("} {
		if strings.Contains(string(page), s) {
			t.Errorf("the report contains %q: it must work offline", s)
		}
	}
}

// --since keeps what happened from then on: the arrivals, admissions and
// outcomes before it are left out, the line's length counts those who
// joined before and were still waiting; a queue with no events in the
// window still gets a report. A bad --since is a usage error.
func TestReportSince(t *testing.T) {
	w := newWorld(t)
	h := makeReportHistory(t, w)
	now := h.soldOut.Add(2 * time.Hour)
	dir := t.TempDir()
	since := h.readyAt[4] // after u0..u3 were READY, u4 at it
	res := w.run(invocation{now: now}, "report", "--queue", h.q, "--since", since.Format(time.RFC3339Nano),
		"--out", filepath.Join(dir, "r.html"), "--json", filepath.Join(dir, "r.json"))
	if res.code != exitOK {
		t.Fatalf("report exited %d: %v\n%s%s", res.code, res.err, res.stdout, res.stderr)
	}
	var got dropReport
	b, _ := os.ReadFile(filepath.Join(dir, "r.json"))
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.Totals.Joins != 0 || got.Totals.Admissions != 4 || got.Outcomes.Admitted != 4 || got.TimeInLine.Count != 4 {
		t.Errorf("since u4's READY: %+v, outcomes %+v, time in line %+v; want no joins and the 4 admitted from then on", got.Totals, got.Outcomes, got.TimeInLine)
	}
	if want := (outcomes{Admitted: 4, Rejected: map[string]int{}, Failed: map[string]int{}, Pending: 1, Expired: 1, Left: 1, Active: 1}); !reflect.DeepEqual(got.Outcomes, want) {
		t.Errorf("outcomes since u4's READY = %+v, want %+v", got.Outcomes, want)
	}
	if got.PeakLineLength.Value != 4 || got.PeakLineLength.At == nil || !got.PeakLineLength.At.Equal(since) {
		t.Errorf("longest line = %+v, want 4 at the start of the window (u5..u8 still waiting, u9 left)", got.PeakLineLength)
	}
	if !got.From.Equal(since) {
		t.Errorf("from = %s, want --since %s", got.From, since)
	}

	res = w.run(invocation{now: now}, "report", "--queue", h.q, "--since", "1m", "--out", filepath.Join(dir, "empty.html"))
	if res.code != exitOK || !strings.Contains(res.stdout, "0 joins") {
		t.Fatalf("report of an empty window exited %d: %v\n%s", res.code, res.err, res.stdout)
	}
	page, _ := os.ReadFile(filepath.Join(dir, "empty.html"))
	checkReportHTML(t, page, h.q, 4)

	for _, bad := range []string{"yesterday", "-5m"} {
		if res := w.run(invocation{}, "report", "--queue", h.q, "--since", bad); res.code != exitUsage {
			t.Errorf("--since %s exited %d, want a usage error", bad, res.code)
		}
	}
	if res := w.run(invocation{}, "report"); res.code != exitUsage {
		t.Errorf("report without --queue exited %d, want a usage error", res.code)
	}
}

// A queue nothing knows of (a typo) has no report: an empty one, exit 0,
// passed the typo off as a quiet queue.
func TestReportOfAQueueNothingKnowsFails(t *testing.T) {
	w := newWorld(t)
	out := filepath.Join(t.TempDir(), "report.html")
	r := w.usherctl("report", "--queue", testenv.Name(t), "--out", out)
	if r.code != 1 || r.err == nil || !strings.Contains(r.err.Error(), "no queue") {
		t.Fatalf("report of an unknown queue = exit %d, %v\n%s; want exit 1 saying there is no such queue", r.code, r.err, r.stdout)
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatal("the refused report wrote its file all the same")
	}
}
