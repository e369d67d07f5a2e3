package main

import (
	"encoding/base64"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The checkers are specified on synthetic records: a clean run passes
// every one, and each kind of break makes its checker fail. A checker that
// cannot fail proves nothing.

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// history builds evidence one shopper at a time.
type history struct{ ev *evidence }

func newHistory() *history {
	return &history{ev: &evidence{
		Queues:     []queueSpec{{Name: "q", TargetActive: 2, MaxAdmitPerTick: 1, TickMs: 100, TokenTTLSeconds: 10, SKU: "s", Stock: 10}},
		Joins:      map[string][]streamJoin{},
		Leaves:     map[string][]streamLeave{},
		Admissions: map[string][]admission{},
		Waiting:    map[string]map[uint64]bool{"q": {}},
		Stock:      map[string]int64{"s": 10},
		Charges:    map[string]charge{},
		Records:    map[string]string{},
		Settled:    settleState{Drained: true},
	}}
}

// join records a join the shopper was told about and the stream stored.
func (h *history) join(seq uint64, user string, ms int) {
	h.ev.Journal = append(h.ev.Journal, record{T: at(ms), Kind: recJoin, Queue: "q", User: user, Code: 202, Seq: seq})
	h.ev.Joins["q"] = append(h.ev.Joins["q"], streamJoin{Seq: seq, User: user, Stored: at(ms)})
}

// admit records an admission event, READY from readyMs for ttlMs.
func (h *history) admit(seq uint64, user, token string, readyMs, ttlMs int) {
	as := h.ev.Admissions["q"]
	h.ev.Admissions["q"] = append(as, admission{StreamSeq: uint64(len(as) + 1), Seq: seq, User: user, TokenID: token,
		ReadyAt: at(readyMs), ExpiresAt: at(readyMs + ttlMs), Stored: at(readyMs)})
}

// order records a PAID order for a token, finished at ms, with its capture.
func (h *history) paid(id, token string, ms int) {
	h.ev.Orders = append(h.ev.Orders, dbOrder{ID: id, TokenID: token, Queue: "q", SKU: "s", Quantity: 1, Status: "PAID", Deadline: at(ms + 20000)})
	h.ev.Charges[id] = charge{Captures: 1}
	h.ev.Records[id] = "PAID"
	h.ev.ChargeTotal.Total++
	h.ev.ChargeTotal.Keys++
	h.ev.ChargeTotal.MaxPerKey = 1
	h.ev.Stock["s"]--
	h.ev.OrderEvents = append(h.ev.OrderEvents, orderEvent{Type: "completed", OrderID: id, TokenID: token, Queue: "q", Status: "PAID", Stored: at(ms)})
	h.ev.Journal = append(h.ev.Journal,
		record{T: at(ms - 100), Kind: recOrder, Queue: "q", Code: 202, OrderID: id, TokenID: token},
		record{T: at(ms + 100), Kind: recOrderFinal, Queue: "q", OrderID: id, Status: "PAID"})
}

// clean is a run where nothing went wrong: three shoppers, two admitted in
// order and paid, one still waiting.
func clean() *history {
	h := newHistory()
	h.join(1, "a", 0)
	h.join(2, "b", 10)
	h.join(3, "c", 20)
	h.admit(1, "a", "q:1", 100, 10000)
	h.admit(2, "b", "q:2", 200, 10000)
	h.paid("ord_a", "q:1", 1000)
	h.paid("ord_b", "q:2", 1100)
	h.ev.Waiting["q"][3] = true
	return h
}

func byName(t *testing.T, checks []checkResult, name string) checkResult {
	t.Helper()
	for _, c := range checks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no check %q", name)
	return checkResult{}
}

func TestCleanRunPassesEveryCheck(t *testing.T) {
	checks, f := judge(clean().ev)
	for _, c := range checks {
		if c.Status == statusFail {
			t.Errorf("%s failed on a clean run: %v", c.Name, c.Examples)
		}
	}
	if f.JoinsAccepted != 3 || f.Lost != 0 || f.Admitted != 2 || f.OrdersPaid != 2 {
		t.Errorf("figures = %+v", f)
	}
}

// The smoke fails on every check but the timed ones: exactly the checks
// of speed and liveness are marked so.
func TestTimedChecksAreTheSpeedOnes(t *testing.T) {
	checks, _ := judge(clean().ev)
	timed := map[string]bool{"admission rate": true, "recovery": true, "pipeline drained": true}
	for _, c := range checks {
		if c.Timed != timed[c.Name] {
			t.Errorf("%s: Timed = %v, want %v", c.Name, c.Timed, timed[c.Name])
		}
	}
	ev := rateHistory(10, 12, 30) // a failing rate and recovery stay timed
	rate, rec, _ := checkRate(ev)
	if !rate.Timed || !rec.Timed {
		t.Errorf("rate Timed %v, recovery Timed %v; want both", rate.Timed, rec.Timed)
	}
}

// An order stuck PENDING must be past its deadline and margin by the end
// of the settle, so that the safety check of orders catches it even where
// the drain check is only reported.
func TestSettleOutlastsAnOrdersDeadline(t *testing.T) {
	for name, tm := range map[string]timing{"full": fullTiming, "quick": quickTiming} {
		if need := tm.grace + orderDeadline + pendingMargin; tm.settle <= need {
			t.Errorf("%s: settle %v, want more than grace + order deadline + margin = %v", name, tm.settle, need)
		}
	}
}

func TestEachBreakFailsItsCheck(t *testing.T) {
	tests := []struct {
		name   string
		check  string
		want   string // in the first example
		breaks func(h *history)
	}{
		{"a join nobody admitted and Redis forgot", "no join lost", "q seq 3 (c)", func(h *history) {
			delete(h.ev.Waiting["q"], 3)
		}},
		{"a 202 the stream never stored", "no join lost", "not in USHER_ENTRIES", func(h *history) {
			h.ev.Journal = append(h.ev.Journal, record{T: at(30), Kind: recJoin, Queue: "q", User: "d", Code: 202, Seq: 4})
		}},
		{"one place, two admissions", "nobody admitted twice", "q seq 2 admitted 2 times", func(h *history) {
			h.admit(2, "b", "q:2b", 300, 10000)
		}},
		{"READY shown with two tokens", "nobody admitted twice", "q seq 1 admitted 2 times", func(h *history) {
			h.ev.Journal = append(h.ev.Journal, record{T: at(150), Kind: recReady, Queue: "q", Seq: 1, TokenID: "q:1"},
				record{T: at(160), Kind: recReady, Queue: "q", Seq: 1, TokenID: "q:other"})
		}},
		{"a later joiner admitted, an earlier one skipped", "admission in join order", "q seq 3 never admitted, but seq 4", func(h *history) {
			h.join(4, "d", 30)
			h.admit(4, "d", "q:4", 300, 100)
		}},
		{"an earlier joiner READY long after a later one", "admission in join order", "q seq 1 READY at", func(h *history) {
			h.ev.Admissions["q"][0].ReadyAt = at(5000)
		}},
		{"sampled active above targetActive", "active <= targetActive", "ZCARD active = 3", func(h *history) {
			h.ev.Samples = append(h.ev.Samples, sample{At: at(500), Queue: "q", Active: 3, Waiting: 1})
		}},
		{"sampled active above targetActive with the line current", "active <= targetActive", "ZCARD active = 3", func(h *history) {
			h.ev.Samples = append(h.ev.Samples, sample{At: at(500), Queue: "q", Active: 3, Waiting: 1, Behind: false})
		}},
		{"three slots held at once per the streams", "active <= targetActive", "3 slots held per the streams", func(h *history) {
			h.admit(3, "c", "q:3", 300, 10000)
			delete(h.ev.Waiting["q"], 3)
		}},
		{"a FAILED order that was captured", "charges match PAID orders", "FAILED (deadline) but captured", func(h *history) {
			h.ev.Orders = append(h.ev.Orders, dbOrder{ID: "ord_x", Queue: "q", SKU: "s", Quantity: 1, Status: "FAILED", Reason: "deadline", Deadline: at(30000)})
			h.ev.Charges["ord_x"] = charge{Captures: 1}
		}},
		{"a PAID order with no capture", "charges match PAID orders", "PAID with no capture", func(h *history) {
			delete(h.ev.Charges, "ord_a")
		}},
		{"a capture no order knows", "charges match PAID orders", "no such order", func(h *history) {
			h.ev.Charges["ord_ghost"] = charge{Captures: 1}
		}},
		{"two captures under one key", "charges match PAID orders", "captured 2 times", func(h *history) {
			h.ev.Charges["ord_a"] = charge{Captures: 2}
			h.ev.ChargeTotal.MaxPerKey = 2
		}},
		{"stock that does not add up", "stock conserved", "available 9 + sold 2", func(h *history) {
			h.ev.Stock["s"] = 9
		}},
		{"an order PENDING past its deadline", "orders final and truthful", "PENDING", func(h *history) {
			h.ev.Orders = append(h.ev.Orders, dbOrder{ID: "ord_p", Queue: "q", SKU: "s", Quantity: 1, Status: "PENDING", Deadline: at(0)})
			h.ev.Stock["s"]--
			h.ev.Timeline.LoadStop = at(60000)
		}},
		{"an accepted order PostgreSQL never got", "orders final and truthful", "not in PostgreSQL", func(h *history) {
			h.ev.Journal = append(h.ev.Journal, record{T: at(900), Kind: recOrder, Queue: "q", Code: 202, OrderID: "ord_lost"})
		}},
		{"a shopper told PAID for a FAILED order", "orders final and truthful", "shopper told PAID, PostgreSQL holds FAILED", func(h *history) {
			h.ev.Orders[0].Status, h.ev.Orders[0].Reason = "FAILED", "declined"
			h.ev.Charges["ord_a"] = charge{Captures: 1, Voided: true}
			h.ev.Stock["s"]++
		}},
		{"a paid order whose record Redis lost", "order records truthful", "GET answers (no record: 404), PostgreSQL holds PAID", func(h *history) {
			h.ev.Records["ord_a"] = ""
		}},
		{"READY with a token no admission recorded", "READY backed by an admission", `token "q:9"`, func(h *history) {
			h.ev.Journal = append(h.ev.Journal, record{T: at(150), Kind: recReady, Queue: "q", Seq: 9, TokenID: "q:9"})
		}},
		{"READY before readyAt", "READY backed by an admission", "before its readyAt", func(h *history) {
			ready := at(2000)
			h.ev.Journal = append(h.ev.Journal, record{T: at(150), Kind: recReady, Queue: "q", Seq: 1, TokenID: "q:1", ReadyAt: &ready, Via: "sse"})
		}},
		{"a pipeline that never drained", "pipeline drained", "still in flight", func(h *history) {
			h.ev.Settled = settleState{Took: 60 * time.Second, Detail: "12 messages of USHER_ENTRIES not consumed"}
		}},
		{"a whole line admitted at one instant", "never above the configured rate", "q: 30 admitted in the 1s", func(h *history) {
			for i := range 30 {
				seq := uint64(10 + i)
				h.join(seq, "w", 30)
				h.admit(seq, "w", "q:w", 3000, 10000)
			}
		}},
		{"an audit with violations", "usherctl audit", "VIOLATED", func(h *history) {
			h.ev.Audits = []auditResult{{Queue: "q", Output: "  VIOLATED nobody admitted twice: 1 exception(s)\n"}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := clean()
			tt.breaks(h)
			checks, _ := judge(h.ev)
			c := byName(t, checks, tt.check)
			if c.Status != statusFail || len(c.Examples) == 0 || !strings.Contains(c.Examples[0], tt.want) {
				t.Fatalf("%s = %s %v, want a failure mentioning %q", tt.check, c.Status, c.Examples, tt.want)
			}
		})
	}
}

// After Redis lost the line, the followers put every admission of the run
// back before the order completions that freed their slots: the active
// set counts more than are held until the line is current again, and no
// admission is decided on that count. Such a sample is not judged; the
// streams' reconstruction still is.
func TestASampleOfALineReplayingIsNotJudged(t *testing.T) {
	h := clean()
	h.ev.Samples = append(h.ev.Samples, sample{At: at(500), Queue: "q", Active: 3, Waiting: 1, Behind: true})
	c := checkSlots(h.ev)
	if c.Status != statusPass || !strings.Contains(c.Note, "not current") {
		t.Fatalf("%s = %s %v (%s), want pass with a note", c.Name, c.Status, c.Examples, c.Note)
	}
	h.admit(3, "c", "q:3", 300, 10000) // a real excess: the streams still show it
	delete(h.ev.Waiting["q"], 3)
	if c := checkSlots(h.ev); c.Status != statusFail {
		t.Fatalf("three slots held per the streams = %s, want a failure", c.Status)
	}
}

// A late tick catches up on half a second of missed ticks at once: at the
// configured rate with such a catch-up, no burst is seen.
func TestBurstsAllowTheSchedulesCatchUp(t *testing.T) {
	h := newHistory() // 1 per 100 ms tick
	seq := uint64(0)
	for ms := 0; ms < 3000; ms += 100 {
		seq++
		h.admit(seq, "u", "q:u", ms, 1000)
		if ms == 1500 { // five missed ticks due at once
			for range 5 {
				seq++
				h.admit(seq, "u", "q:u", ms+1, 1000)
			}
		}
	}
	if c := checkBursts(h.ev); c.Status != statusPass {
		t.Fatalf("%s = %s %v, want pass (%s)", c.Name, c.Status, c.Examples, c.Note)
	}
}

func TestVoidedCaptureOfAFailedOrderIsNoCharge(t *testing.T) {
	h := clean()
	h.ev.Orders = append(h.ev.Orders, dbOrder{ID: "ord_v", Queue: "q", SKU: "s", Quantity: 1, Status: "FAILED", Deadline: at(30000)})
	h.ev.Charges["ord_v"] = charge{Captures: 1, Voided: true}
	if c := checkPayments(h.ev); c.Status != statusPass {
		t.Fatalf("checkPayments = %s %v, want pass", c.Status, c.Examples)
	}
}

func TestLeftAndWaitingAreNotLost(t *testing.T) {
	h := clean()
	h.join(4, "d", 30)
	h.ev.Journal = append(h.ev.Journal, record{T: at(40), Kind: recLeave, Queue: "q", Seq: 4, Code: 204})
	h.join(5, "e", 50)
	h.ev.Leaves["q"] = append(h.ev.Leaves["q"], streamLeave{Seq: 5, User: "e", Stored: at(60)})
	if c := checkLost(h.ev); c.Status != statusPass {
		t.Fatalf("checkLost = %s %v, want pass", c.Status, c.Examples)
	}
}

// rateHistory is a fixed-rate queue (10/s) with a long line, admitting
// perSecond every second from 0 to 30 s except during the stall; the
// fault at 12 s, healed at 13 s.
func rateHistory(perSecond int, stallFrom, stallTo int) *evidence {
	return rateHistoryOf(perSecond, stallFrom, stallTo, 13, 30)
}

// rateHistoryOf is rateHistory healed at heal s, the load stopped at end s.
func rateHistoryOf(perSecond int, stallFrom, stallTo, heal, end int) *evidence {
	h := newHistory()
	q := &h.ev.Queues[0]
	q.RateChecked, q.MaxAdmitPerTick, q.TickMs, q.TargetActive = true, 1, 100, 1000
	seq := uint64(0)
	for s := 0; s < end; s++ {
		h.ev.Samples = append(h.ev.Samples, sample{At: at(s*1000 + 500), Queue: "q", Waiting: 500})
		if s >= stallFrom && s < stallTo {
			continue
		}
		for i := 0; i < perSecond; i++ {
			seq++
			ms := s*1000 + i*1000/perSecond
			h.ev.Admissions["q"] = append(h.ev.Admissions["q"], admission{Seq: seq, TokenID: "t", ReadyAt: at(ms), ExpiresAt: at(ms + 100), Stored: at(ms)})
		}
	}
	h.ev.Timeline = timeline{Start: at(0), Inject: at(12000), Heal: at(heal * 1000), LoadStop: at(end * 1000)}
	return h.ev
}

func TestRateAndRecovery(t *testing.T) {
	tests := []struct {
		name           string
		ev             *evidence
		rate, recovery string
	}{
		{"the configured rate, no dip", rateHistory(10, 0, 0), statusPass, statusPass},
		{"twice the configured rate (two admitters each at full rate)", rateHistory(20, 0, 0), statusFail, statusPass},
		{"a 4 s dip after the fault", rateHistory(10, 12, 16), statusPass, statusPass},
		{"a 30 s ack-wait stall", rateHistory(10, 12, 30), statusFail, statusFail},
		// A fault lasting 15 s: admission goes on through it and dips for
		// 2 s when it is healed (a resumed worker's burst of order events).
		{"a 2 s dip when a 15 s fault is healed", rateHistoryOf(10, 27, 29, 27, 45), statusPass, statusPass},
		{"a 12 s dip from the heal", rateHistoryOf(10, 27, 39, 27, 45), statusFail, statusFail}, // the end window is in it too
		{"a dip from the fault through its heal", rateHistoryOf(10, 12, 29, 27, 45), statusPass, statusFail},
		{"two short dips, at the fault and at the heal", rateHistoryOf(10, 12, 14, 27, 45), statusPass, statusPass},
	}
	// A fault of steps from 12 s to 26 s (a rolling upgrade's restarts,
	// one every 2 s), healed at 27 s: a dip is judged from the last step
	// begun before it, a stall across many steps from the first.
	stepped := func(ev *evidence) *evidence {
		for s := 12; s <= 26; s += 2 {
			ev.Timeline.Steps = append(ev.Timeline.Steps, at(s*1000))
		}
		return ev
	}
	tests = append(tests, []struct {
		name           string
		ev             *evidence
		rate, recovery string
	}{
		{"a 2 s dip 8 s into a fault", rateHistoryOf(10, 20, 22, 27, 45), statusPass, statusFail},
		{"a 2 s dip 8 s into a fault of steps, after one", stepped(rateHistoryOf(10, 20, 22, 27, 45)), statusPass, statusPass},
		{"a stall across a fault of steps", stepped(rateHistoryOf(10, 12, 25, 27, 45)), statusPass, statusFail},
	}...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rate, rec, _ := checkRate(tt.ev)
			if rate.Status != tt.rate || rec.Status != tt.recovery {
				t.Fatalf("rate %s %v, recovery %s %v; want %s, %s", rate.Status, rate.Examples, rec.Status, rec.Examples, tt.rate, tt.recovery)
			}
		})
	}
}

func TestJournalRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.jsonl")
	j, err := openJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	j.add(record{Kind: recJoin, Queue: "q", User: "a", Code: 202, Seq: 7})
	j.add(record{Kind: recReady, Queue: "q", Seq: 7, TokenID: "q:7"})
	if err := j.close(); err != nil {
		t.Fatal(err)
	}
	got, err := readJournal(path)
	if err != nil || len(got) != 2 || got[0].Seq != 7 || got[1].TokenID != "q:7" || got[0].T.IsZero() {
		t.Fatalf("readJournal = %+v, %v", got, err)
	}
}

func TestTicketSeqAndTokenID(t *testing.T) {
	if seq, ok := ticketSeq("t1.ZGVtbw.YWxpY2U.42.CQWNfqj6CMVBVMQX-afmZw"); !ok || seq != 42 {
		t.Errorf("ticketSeq = %d, %v; want 42", seq, ok)
	}
	if seq, ok := ticketSeq("t2.ZGVtbw.YWxpY2U.Q0ZYV.43.CQWNfqj6CMVBVMQX-afmZw"); !ok || seq != 43 {
		t.Errorf("ticketSeq(t2) = %d, %v; want 43", seq, ok)
	}
	if _, ok := ticketSeq("garbage"); ok {
		t.Error("ticketSeq(garbage) ok")
	}
	payload := base64.RawURLEncoding.EncodeToString([]byte(`{"jti":"demo:42","sub":"alice"}`))
	if id := tokenID("h." + payload + ".s"); id != "demo:42" {
		t.Errorf("tokenID = %q, want demo:42", id)
	}
}

// Ports come from below the ephemeral range, none twice, and a Redis
// node's bus port is reserved with its port.
func TestPickPorts(t *testing.T) {
	seen := map[int]bool{}
	redis, err := pickPorts(6, redisBusOffset)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := freePorts(20)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range redis {
		for _, q := range []int{p, p + redisBusOffset} {
			if seen[q] {
				t.Errorf("port %d given twice", q)
			}
			seen[q] = true
		}
	}
	for _, p := range plain {
		if seen[p] {
			t.Errorf("port %d given twice", p)
		}
		seen[p] = true
	}
	for p := range seen {
		if p < lowestPort || p >= ephemeralLow() {
			t.Errorf("port %d outside %d–%d", p, lowestPort, ephemeralLow())
		}
	}
}

// A shopper whose first join (its answer lost) was stored before their
// retry, but read by the line after it, is admitted at the first join's
// place: the retry's 202 is answered there, not lost, and nobody is
// passed over. A retry of another attempt (another Prev) is judged alone.
func TestARetryMovedUpToItsEarlierJoinIsNotLost(t *testing.T) {
	h := newHistory()
	h.ev.Joins["q"] = append(h.ev.Joins["q"], streamJoin{Seq: 1, User: "c", Stored: at(0)})
	h.join(2, "b", 10)
	h.join(3, "c", 20) // the retry: answered 202 at 3
	h.admit(1, "c", "q:1", 100, 10000)
	h.admit(2, "b", "q:2", 200, 10000)
	for _, c := range []checkResult{checkLost(h.ev), checkJoinOrder(h.ev)} {
		if c.Status != statusPass {
			t.Fatalf("%s = %s %v, want pass", c.Name, c.Status, c.Examples)
		}
	}
	h.ev.Joins["q"][2].Prev = 1 // c's next attempt, after 1 ended: lost
	if c := checkLost(h.ev); c.Status != statusFail {
		t.Fatalf("checkLost with the retry another attempt = %s, want a failure", c.Status)
	}
}

// A shopper moved up to their attempt's earlier record, who then leaves
// with the ticket they hold (the retry's), left that earlier record: the
// line applies a leave through the alias to the place it points at.
func TestALeaveThroughTheRetrysTicketLeavesTheEarlierJoin(t *testing.T) {
	h := newHistory()
	h.ev.Joins["q"] = append(h.ev.Joins["q"], streamJoin{Seq: 1, User: "c", Stored: at(0)})
	h.join(2, "b", 10)
	h.join(3, "c", 20) // the retry: answered 202 at 3
	h.ev.Leaves["q"] = append(h.ev.Leaves["q"], streamLeave{Seq: 3, User: "c", Stored: at(50)})
	h.admit(2, "b", "q:2", 200, 10000)
	for _, c := range []checkResult{checkLost(h.ev), checkJoinOrder(h.ev)} {
		if c.Status != statusPass {
			t.Fatalf("%s = %s %v, want pass", c.Name, c.Status, c.Examples)
		}
	}
}
