package main

import (
	"context"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	if len(os.Args) == 2 && os.Args[1] == anchorServerArg {
		os.Exit(anchorServer(os.Stdin, os.Stdout)) // sseAnchor runs the test binary as its server
	}
	os.Exit(m.Run())
}

// A synthetic drop of 3 units: what each shopper saw, and when.
func syntheticDrop(base time.Time) []dropRecord {
	at := func(s float64) time.Time { return base.Add(time.Duration(s * float64(time.Second))) }
	return []dropRecord{
		{Ready: at(0.5), Status: "PAID", Final: at(1.0)},
		{Ready: at(1.5), Status: "PAID", Final: at(2.0)},
		{Ready: at(2.5), Status: "PAID", Final: at(3.0)},                               // the last unit
		{Ready: at(0.7), Status: "FAILED", Reason: "payment_declined", Final: at(1.2)}, // its unit came back
		{Told: at(3.1), ToldReason: "sold_out"},                                        // waiting, told
		{Told: at(3.2), ToldReason: "sold_out"},                                        //
		{Told: at(3.5), ToldReason: "sold_out", Polled: true},                          // told by a poll
		{},                                    // waiting, never told
		{Told: at(3.3), ToldReason: "closed"}, // told of another close
		{Ready: at(3.3), Status: "REJECTED", Reason: "sold_out", Final: at(3.4)},           // admitted with nothing
		{Ready: at(3.4), Err: "order: 0 connection reset"},                                 // READY after the close
		{Ready: at(0.9), Status: "REJECTED", Reason: "insufficient_stock", Final: at(1.1)}, // admitted with nothing, before the end
	}
}

func ms(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

func TestDropFiguresFromTheEvents(t *testing.T) {
	base := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	f := summarize(dropJournal{Units: 3, Records: syntheticDrop(base),
		LastPaidEvent: base.Add(2950 * time.Millisecond), CloseEvent: base.Add(3050 * time.Millisecond)})
	want := dropFigures{Sold: 3, Failed: 1, RejectedForStock: 2, ReadyAfterClose: 1, AdmittedWithNothing: 3, Errors: 1,
		Reference: "order.completed event", LastPaid: base.Add(2950 * time.Millisecond), LastPaidSeen: base.Add(3 * time.Second),
		Close: base.Add(3050 * time.Millisecond), WaitingAtSoldOut: 7, ToldOtherReason: 1, NeverTold: 2, Polled: 1,
		Told: []time.Duration{ms(150), ms(250), ms(550)}, LearnedByRejection: []time.Duration{ms(450)}}
	checkFigures(t, f, want)
}

// Without the events the last PAID is the final status the load tool saw,
// and the close the first shopper told.
func TestDropFiguresFromTheLoadToolsOwnTimes(t *testing.T) {
	base := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	f := summarize(dropJournal{Units: 3, Records: syntheticDrop(base)})
	want := dropFigures{Sold: 3, Failed: 1, RejectedForStock: 2, ReadyAfterClose: 1, AdmittedWithNothing: 3, Errors: 1,
		Reference: "final status seen by the load tool", LastPaid: base.Add(3 * time.Second), LastPaidSeen: base.Add(3 * time.Second),
		Close: base.Add(3100 * time.Millisecond), WaitingAtSoldOut: 7, ToldOtherReason: 1, NeverTold: 2, Polled: 1,
		Told: []time.Duration{ms(100), ms(200), ms(500)}, LearnedByRejection: []time.Duration{ms(400)}}
	checkFigures(t, f, want)
}

// The comparison run: an unaware line closes nothing; the waiting learn it
// one by one, admitted and rejected.
func TestDropFiguresOfAnUnawareLine(t *testing.T) {
	base := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	recs := []dropRecord{{Ready: base, Status: "PAID", Final: base.Add(time.Second)}}
	for i := range 4 {
		r := base.Add(time.Second + time.Duration(i+1)*100*time.Millisecond)
		recs = append(recs, dropRecord{Ready: r, Status: "REJECTED", Reason: "sold_out", Final: r.Add(20 * time.Millisecond)})
	}
	f := summarize(dropJournal{Units: 1, Records: recs})
	if f.Sold != 1 || f.AdmittedWithNothing != 4 || f.ReadyAfterClose != 0 || f.WaitingAtSoldOut != 4 || len(f.Told) != 0 || f.NeverTold != 0 || !f.Close.IsZero() {
		t.Fatalf("figures = %+v", f)
	}
	if got := quantile(f.LearnedByRejection, 1); got != 420*time.Millisecond {
		t.Errorf("the last learned %v after the last PAID, want 420ms", got)
	}
}

func TestNothingSoldHasNoSellOut(t *testing.T) {
	f := summarize(dropJournal{Units: 5, Records: []dropRecord{{}, {}}})
	if f.WaitingAtSoldOut != 0 || f.NeverTold != 0 || !f.LastPaid.IsZero() {
		t.Fatalf("figures = %+v", f)
	}
}

func checkFigures(t *testing.T, got, want dropFigures) {
	t.Helper()
	slices.Sort(got.Told)
	slices.Sort(got.LearnedByRejection)
	if !slices.Equal(got.Told, want.Told) || !slices.Equal(got.LearnedByRejection, want.LearnedByRejection) {
		t.Errorf("told %v, learned by rejection %v; want %v, %v", got.Told, got.LearnedByRejection, want.Told, want.LearnedByRejection)
	}
	got.Told, got.LearnedByRejection, want.Told, want.LearnedByRejection = nil, nil, nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("figures:\n got %+v\nwant %+v", got, want)
	}
}

// The report holds a stock-aware run to its goals and prints one line.
func TestDropReportJudgesTheGoals(t *testing.T) {
	base := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	f := summarize(dropJournal{Units: 3, Records: syntheticDrop(base), LastPaidEvent: base.Add(2950 * time.Millisecond)})
	d := &dropRun{o: options{stock: 3, stockAware: true, lateJoins: 10}, stockEvents: map[string]int64{"held": 2}}
	res := result{Figures: map[string]float64{}, Invariants: map[string]int64{}}
	d.report(&res, dropResults{f: f, ev: dropEvents{paid: 3, lastPaid: base.Add(2950 * time.Millisecond)},
		view: dropView{hasStock: true, sold: 3, state: "closed", closedReason: "sold_out"},
		late: map[string]int{"410": 9, "202": 1}, anchor: []time.Duration{ms(10), ms(20), ms(50)}, anchorN: 3, sale: time.Minute})
	wantInv := map[string]int64{"units sold ≠ units": 0, "admitted with nothing to buy": 3, "waiting shoppers never told": 3,
		"late joins not answered 410": 1, "admin view sold ≠ units sold": 0, "shoppers that errored": 1}
	for k, v := range wantInv {
		if res.Invariants[k] != v {
			t.Errorf("invariant %q = %d, want %d", k, res.Invariants[k], v)
		}
	}
	if got := res.Figures["told max ÷ anchor max"]; got < 10.9 || got > 11.1 { // 550 ms ÷ 50 ms
		t.Errorf("told max ÷ anchor max = %.2f, want 11", got)
	}
	if len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "sold 3/3 (admin view 3)") || !strings.Contains(res.Notes[0], "max 550 ms") {
		t.Errorf("notes = %q", res.Notes)
	}
}

func TestAnchorTellsEveryStream(t *testing.T) {
	got, err := sseAnchor(context.Background(), 40, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 40 {
		t.Fatalf("%d of 40 streams told", len(got))
	}
	for _, d := range got {
		if d < 0 || d > 10*time.Second {
			t.Fatalf("delay %v", d)
		}
	}
}

// The SSE memory anchor holds every stream it is asked for and reports
// the server's memory per stream.
func TestAnchorHoldsIdleStreams(t *testing.T) {
	kib, n, err := sseAnchorMemory(context.Background(), 40, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if n != 40 || kib < 0 {
		t.Fatalf("anchor held %d of 40 streams at %.1f KiB each; want 40, a size", n, kib)
	}
}

func TestDropDefaults(t *testing.T) {
	o, err := parse([]string{"-scenario", "drop"}, nil)
	if err != nil || o.shoppers != dropShoppers || o.stock != dropUnits || o.targetActive != 20 || o.duration != dropDuration || !o.stockAware {
		t.Fatalf("drop defaults: %+v, %v", o, err)
	}
	o, err = parse([]string{"-scenario", "drop", "-shoppers", "10500", "-stock-aware=false"}, nil)
	if err != nil || o.shoppers != 10500 || o.stock != dropUnits || o.stockAware {
		t.Fatalf("drop flags: %+v, %v", o, err)
	}
	if o, _ := parse([]string{"-scenario", "journey"}, nil); o.stock != 1_000_000 || o.shoppers != 10000 {
		t.Fatalf("journey defaults changed: %+v", o)
	}
}
