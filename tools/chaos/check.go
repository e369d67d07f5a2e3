package main

import (
	"fmt"
	"sort"
	"time"
)

// Check outcomes.
const (
	statusPass    = "pass"
	statusFail    = "FAIL"
	statusSkipped = "skipped"
)

// maxExamples bounds the exceptions a check lists.
const maxExamples = 8

// checkResult is one invariant judged on a run's evidence.
type checkResult struct {
	Name      string   `json:"name"`
	Invariant string   `json:"invariant"`
	Status    string   `json:"status"`
	Count     int      `json:"count"` // exceptions found
	Examples  []string `json:"examples,omitempty"`
	Note      string   `json:"note,omitempty"`
	// Timed marks a check of speed or liveness (a rate, a recovery bound,
	// a deadline to drain): its verdict depends on how fast the machine
	// ran, not only on what the system did. Every other check is a safety
	// invariant, true whatever the timing. make chaos judges both kinds;
	// the go test smoke fails only on safety and reports the timed ones
	// as figures (this machine's speed moves by ±40 %).
	Timed bool `json:"timed,omitempty"`
}

func (c *checkResult) fail(format string, args ...any) {
	c.Count++
	if len(c.Examples) < maxExamples {
		c.Examples = append(c.Examples, fmt.Sprintf(format, args...))
	}
}

func (c *checkResult) done() checkResult {
	if c.Status == "" {
		c.Status = statusPass
		if c.Count > 0 {
			c.Status = statusFail
		}
	}
	return *c
}

// Tolerances of the checks.
const (
	rateTolerance   = 0.10             // admissions per second vs the configured rate
	recoveryBound   = 10 * time.Second // "delays admission by seconds, never by an ack wait"
	recoveryWindow  = 3 * time.Second  // the rate is judged over windows this long
	pendingMargin   = 15 * time.Second // past an order's deadline before PENDING is a violation
	readyEarlySlack = 100 * time.Millisecond
)

// figures are the headline numbers of a run.
type figures struct {
	JoinsAccepted  int     `json:"joinsAccepted"`
	Lost           int     `json:"lost"`
	Duplicated     int     `json:"duplicated"`
	OverAdmitted   int     `json:"overAdmitted"`  // samples or admissions with more slots held than targetActive
	DoubleCharges  int     `json:"doubleCharges"` // captures not matched one-to-one with a PAID order
	RecoverySecs   float64 `json:"recoverySeconds"`
	Recovered      bool    `json:"recovered"`
	BaselineRate   float64 `json:"baselineRate"`
	ConfiguredRate float64 `json:"configuredRate"`
	Admitted       int     `json:"admitted"`
	OrdersPaid     int     `json:"ordersPaid"`
	// JoinsRefused: shoppers whose every join attempt failed; of them,
	// RefusedButStored are in USHER_ENTRIES all the same (told "error",
	// yet in line).
	JoinsRefused     int `json:"joinsRefused"`
	RefusedButStored int `json:"refusedButStored"`
	// AdmissionsPerSecond is the fixed-rate queue's admissions in each
	// second from the load's start (by the time the stream stored them):
	// the curve the recovery is read from.
	AdmissionsPerSecond []int `json:"admissionsPerSecond,omitempty"`
}

// judge runs every check.
func judge(ev *evidence) ([]checkResult, figures) {
	var f figures
	lost := checkLost(ev)
	twice := checkAdmittedOnce(ev)
	fifo := checkJoinOrder(ev)
	over := checkSlots(ev)
	rate, rec, fr := checkRate(ev)
	pay := checkPayments(ev)
	checks := []checkResult{lost, twice, fifo, over, checkBursts(ev), rate, rec, pay,
		checkStock(ev), checkOrders(ev), checkRecords(ev), checkReady(ev), checkDrained(ev), checkAudits(ev)}
	f.JoinsAccepted = len(acceptedJoins(ev))
	f.Lost = lost.Count
	f.Duplicated = twice.Count
	f.OverAdmitted = over.Count
	f.DoubleCharges = pay.Count
	f.RecoverySecs, f.Recovered, f.BaselineRate, f.ConfiguredRate = fr.recovery.Seconds(), fr.recovered, fr.baseline, fr.configured
	for _, as := range ev.Admissions {
		f.Admitted += len(as)
	}
	for _, o := range ev.Orders {
		if o.Status == "PAID" {
			f.OrdersPaid++
		}
	}
	f.JoinsRefused, f.RefusedButStored = refusedJoins(ev)
	f.AdmissionsPerSecond = perSecond(ev)
	return checks, f
}

// perSecond buckets the rate-checked queue's admissions by second since
// the load started, until it stopped.
func perSecond(ev *evidence) []int {
	tl := ev.Timeline
	if tl.Start.IsZero() || tl.LoadStop.IsZero() {
		return nil
	}
	for _, q := range ev.Queues {
		if !q.RateChecked {
			continue
		}
		out := make([]int, int(tl.LoadStop.Sub(tl.Start).Seconds())+1)
		for _, a := range ev.Admissions[q.Name] {
			if i := int(a.Stored.Sub(tl.Start).Seconds()); a.Stored.After(tl.Start) && i < len(out) {
				out[i]++
			}
		}
		return out
	}
	return nil
}

// refusedJoins counts the shoppers never given a ticket, and those of them
// the stream holds a join of.
func refusedJoins(ev *evidence) (refused, stored int) {
	type key struct{ q, user string }
	ticketed, tried := map[key]bool{}, map[key]bool{}
	for _, r := range ev.Journal {
		if r.Kind != recJoin {
			continue
		}
		k := key{r.Queue, r.User}
		tried[k] = true
		if r.Ticket != "" {
			ticketed[k] = true
		}
	}
	inStream := map[key]bool{}
	for q, js := range ev.Joins {
		for _, j := range js {
			inStream[key{q, j.User}] = true
		}
	}
	for k := range tried {
		if ticketed[k] {
			continue
		}
		refused++
		if inStream[k] {
			stored++
		}
	}
	return refused, stored
}

type qseq struct {
	q   string
	seq uint64
}

// acceptedJoins is every place a shopper was given (202, or 200 with a
// ticket), by queue and sequence, with the user.
func acceptedJoins(ev *evidence) map[qseq]string {
	out := map[qseq]string{}
	for _, r := range ev.Journal {
		if r.Kind == recJoin && (r.Code == 202 || r.Code == 200) && r.Seq != 0 {
			out[qseq{r.Queue, r.Seq}] = r.User
		}
	}
	return out
}

// leftSeqs is every entry that left: a 204 to the shopper's DELETE, or a
// leave event on the stream. A leave names the seq of the ticket the
// shopper holds; when that record is a later one of an attempt whose
// first record the line moved the shopper up to (waitqueue's moveUp), the
// line applies the leave there, and so does this.
func leftSeqs(ev *evidence) map[qseq]bool {
	first := firstOfAttempt(ev)
	out := map[qseq]bool{}
	left := func(k qseq) {
		out[k] = true
		if p, ok := first[k]; ok {
			out[p] = true
		}
	}
	for _, r := range ev.Journal {
		if r.Kind == recLeave && r.Code == 204 {
			left(qseq{r.Queue, r.Seq})
		}
	}
	for q, ls := range ev.Leaves {
		for _, l := range ls {
			left(qseq{q, l.Seq})
		}
	}
	return out
}

func admittedSeqs(ev *evidence) map[qseq]admission {
	out := map[qseq]admission{}
	for q, as := range ev.Admissions {
		for _, a := range as {
			if _, seen := out[qseq{q, a.Seq}]; !seen {
				out[qseq{q, a.Seq}] = a
			}
		}
	}
	return out
}

func sortedKeys(m map[qseq]string) []qseq {
	keys := make([]qseq, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].q != keys[j].q {
			return keys[i].q < keys[j].q
		}
		return keys[i].seq < keys[j].seq
	})
	return keys
}

// checkLost: every join a shopper was given a place for is, at the end,
// admitted (an admission event), left, or still waiting in Redis's line.
func checkLost(ev *evidence) checkResult {
	c := checkResult{Name: "no join lost", Invariant: "every accepted join is admitted, left, or waiting in line"}
	inStream := map[qseq]bool{}
	for q, js := range ev.Joins {
		for _, j := range js {
			inStream[qseq{q, j.Seq}] = true
		}
	}
	adm, left := admittedSeqs(ev), leftSeqs(ev)
	joins := acceptedJoins(ev)
	first := firstOfAttempt(ev)
	for _, k := range sortedKeys(joins) {
		if p := first[k]; p != k && p.seq != 0 {
			k = p // moved up to the attempt's earlier record (waitqueue's join)
		}
		if adm[k].TokenID != "" || adm[k].Seq != 0 || left[k] || ev.Waiting[k.q][k.seq] {
			continue
		}
		switch {
		case !inStream[k]:
			c.fail("%s seq %d (%s): accepted, and not in USHER_ENTRIES", k.q, k.seq, joins[k])
		default:
			st := ev.EntryStatus[k.q][k.seq]
			if st == "" {
				st = "unknown"
			}
			c.fail("%s seq %d (%s): never admitted, not left, not in the waiting line (Redis record: %s)", k.q, k.seq, joins[k], st)
		}
	}
	return c.done()
}

// firstOfAttempt maps every join in the streams to the first join of the
// same attempt: the same user with the same Prev. A join the line read
// after a later one of its attempt (its gateway gave up on the answer;
// the shopper's retry elsewhere answered first) takes the shopper's place,
// and the retry's becomes its alias.
func firstOfAttempt(ev *evidence) map[qseq]qseq {
	out := map[qseq]qseq{}
	for q, js := range ev.Joins {
		type attempt struct {
			user string
			prev uint64
		}
		first := map[attempt]uint64{}
		for _, j := range js {
			a := attempt{j.User, j.Prev}
			if _, ok := first[a]; !ok {
				first[a] = j.Seq
			}
			out[qseq{q, j.Seq}] = qseq{q, first[a]}
		}
	}
	return out
}

// checkAdmittedOnce: one entry, one admission (one token id), in the
// stream and in what shoppers were told.
func checkAdmittedOnce(ev *evidence) checkResult {
	c := checkResult{Name: "nobody admitted twice", Invariant: "one place in line gets at most one admission (token)"}
	for _, q := range ev.Queues {
		tokens := map[uint64]map[string]bool{}
		var order []uint64
		for _, a := range ev.Admissions[q.Name] {
			if tokens[a.Seq] == nil {
				tokens[a.Seq] = map[string]bool{}
				order = append(order, a.Seq)
			}
			tokens[a.Seq][a.TokenID] = true
		}
		for _, r := range ev.Journal {
			if r.Kind == recReady && r.Queue == q.Name && r.TokenID != "" {
				if tokens[r.Seq] == nil {
					tokens[r.Seq] = map[string]bool{}
					order = append(order, r.Seq)
				}
				tokens[r.Seq][r.TokenID] = true
			}
		}
		for _, seq := range order {
			if n := len(tokens[seq]); n > 1 {
				var ids []string
				for id := range tokens[seq] {
					ids = append(ids, id)
				}
				sort.Strings(ids)
				c.fail("%s seq %d admitted %d times: tokens %v", q.Name, seq, n, ids)
			}
		}
	}
	return c.done()
}

// checkJoinOrder: admission follows join order. Nobody still in line (not
// admitted, not left) is passed by a later joiner, and of two admitted
// shoppers the earlier joiner is not READY more than a tick after the later.
func checkJoinOrder(ev *evidence) checkResult {
	c := checkResult{Name: "admission in join order", Invariant: "FIFO by stream sequence: nobody passed over, no admission out of order"}
	left := leftSeqs(ev)
	for _, q := range ev.Queues {
		tick := time.Duration(q.TickMs) * time.Millisecond
		first := map[string]uint64{} // a user's first join: later ones are aliases
		for _, j := range ev.Joins[q.Name] {
			if _, ok := first[j.User]; !ok {
				first[j.User] = j.Seq
			}
		}
		adm := map[uint64]admission{}
		var maxAdmitted uint64
		for _, a := range ev.Admissions[q.Name] {
			if _, ok := adm[a.Seq]; !ok {
				adm[a.Seq] = a
			}
			maxAdmitted = max(maxAdmitted, a.Seq)
		}
		var seqs []uint64
		for _, s := range first {
			seqs = append(seqs, s)
		}
		sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
		// Passed over: waiting (or lost) while someone who joined later
		// was admitted.
		for _, s := range seqs {
			if _, ok := adm[s]; ok || left[qseq{q.Name, s}] || s > maxAdmitted {
				continue
			}
			c.fail("%s seq %d never admitted, but seq %d (joined later) was", q.Name, s, maxAdmitted)
		}
		// Out of order: READY later than a later joiner by more than a tick.
		var admitted []admission
		for _, s := range seqs {
			if a, ok := adm[s]; ok {
				admitted = append(admitted, a)
			}
		}
		var latest admission // the latest readyAt among earlier joiners
		for _, a := range admitted {
			if !latest.ReadyAt.IsZero() && latest.ReadyAt.After(a.ReadyAt.Add(tick)) {
				c.fail("%s seq %d READY at %s, after seq %d (joined later) at %s", q.Name, latest.Seq,
					latest.ReadyAt.UTC().Format("15:04:05.000"), a.Seq, a.ReadyAt.UTC().Format("15:04:05.000"))
			}
			if a.ReadyAt.After(latest.ReadyAt) {
				latest = a
			}
		}
	}
	return c.done()
}

// checkSlots: never more than targetActive slots held — as sampled from
// Redis every tick, and as reconstructed from the streams (a slot held from
// readyAt until the token expires, its order finishes or its holder
// leaves: a lower bound of the real hold, so any excess is real).
func checkSlots(ev *evidence) checkResult {
	c := checkResult{Name: "active <= targetActive", Invariant: "never more than targetActive slots held"}
	worst, replaying := checkSampledSlots(&c, ev)
	finished, left := firstFinished(ev), firstLeft(ev)
	for _, q := range ev.Queues {
		checkHeldSlots(&c, q, ev.Admissions[q.Name], finished, left)
	}
	if len(worst) > 0 {
		c.Note = fmt.Sprintf("highest sampled active per queue: %v", worst)
	}
	if replaying > 0 {
		c.Note += fmt.Sprintf("; %d sample(s) above targetActive taken while the line was not current (replaying lost writes; not judged)", replaying)
	}
	return c.done()
}

// checkSampledSlots judges into c the active sets sampled from Redis, and
// returns the highest sample above targetActive per queue and how many
// were above it while the line was replaying.
func checkSampledSlots(c *checkResult, ev *evidence) (worst map[string]int64, replaying int) {
	target := map[string]int{}
	for _, q := range ev.Queues {
		target[q.Name] = q.TargetActive
	}
	worst = map[string]int64{}
	for _, s := range ev.Samples {
		if s.Behind {
			// The line is replaying what Redis lost (after a FLUSHALL, every
			// admission of the run is back in the active set before the
			// order completions that freed their slots are): a count no
			// admission is decided on — a tick admits only once the line is
			// current, reaping expired and finished holds first, and so
			// does an admission at once. A real excess outlasts the replay
			// (the admitted stay in the active set until they expire or
			// finish), and the streams' reconstruction (checkHeldSlots)
			// judges every moment, this one included.
			if int64(target[s.Queue]) < s.Active {
				replaying++
			}
			continue
		}
		if t := int64(target[s.Queue]); s.Active > t {
			worst[s.Queue] = max(worst[s.Queue], s.Active)
			c.fail("%s at %s: ZCARD active = %d, targetActive %d", s.Queue, s.At.UTC().Format("15:04:05.000"), s.Active, t)
		}
	}
	return worst, replaying
}

// firstFinished is, per token, when the streams stored its first order's
// completion or failure.
func firstFinished(ev *evidence) map[string]time.Time {
	finished := map[string]time.Time{}
	for _, o := range ev.OrderEvents {
		if o.Type == "completed" || o.Type == "failed" {
			if t, ok := finished[o.TokenID]; !ok || o.Stored.Before(t) {
				finished[o.TokenID] = o.Stored
			}
		}
	}
	return finished
}

// firstLeft is, per entry, when its holder left. A leave frees its slot no
// later than the shopper heard 204, and the gateway stores the leave event
// before it frees the slot: the earlier of the two keeps the
// reconstruction a lower bound.
func firstLeft(ev *evidence) map[qseq]time.Time {
	left := map[qseq]time.Time{}
	earliest := func(k qseq, t time.Time) {
		if cur, ok := left[k]; !ok || t.Before(cur) {
			left[k] = t
		}
	}
	for _, r := range ev.Journal {
		if r.Kind == recLeave && r.Code == 204 {
			earliest(qseq{r.Queue, r.Seq}, r.T)
		}
	}
	for q, ls := range ev.Leaves {
		for _, l := range ls {
			earliest(qseq{q, l.Seq}, l.Stored)
		}
	}
	return left
}

// slotEdge is a slot taken (+1) or given back (-1).
type slotEdge struct {
	at    time.Time
	delta int
	a     admission
}

// checkHeldSlots judges into c queue q's slots as the streams tell them:
// each held from readyAt until the token expires, its order finishes or
// its holder leaves, whichever comes first.
func checkHeldSlots(c *checkResult, q queueSpec, admissions []admission, finished map[string]time.Time, left map[qseq]time.Time) {
	var edges []slotEdge
	seen := map[uint64]bool{}
	for _, a := range admissions {
		if seen[a.Seq] {
			continue
		}
		seen[a.Seq] = true
		end := a.ExpiresAt
		if t, ok := finished[a.TokenID]; ok && t.Before(end) {
			end = t
		}
		if t, ok := left[qseq{q.Name, a.Seq}]; ok && t.Before(end) {
			end = t
		}
		if !end.After(a.ReadyAt) {
			continue // held for no measurable time on these clocks
		}
		edges = append(edges, slotEdge{a.ReadyAt, 1, a}, slotEdge{end, -1, a})
	}
	// At the same instant a slot given back comes before one taken.
	sort.SliceStable(edges, func(i, j int) bool {
		if !edges[i].at.Equal(edges[j].at) {
			return edges[i].at.Before(edges[j].at)
		}
		return edges[i].delta < edges[j].delta
	})
	held := 0
	for _, e := range edges {
		held += e.delta
		if e.delta > 0 && held > q.TargetActive {
			c.fail("%s at %s: %d slots held per the streams, targetActive %d (seq %d admitted)", q.Name,
				e.at.UTC().Format("15:04:05.000"), held, q.TargetActive, e.a.Seq)
		}
	}
}

// burstWindow is the window checkBursts counts admissions in.
const burstWindow = time.Second

// checkBursts: never faster than maxAdmitPerTick per tick, whatever the
// fault — checkRate judges the rate in two windows only, and a burst in
// between (a whole line admitted at once) is no slowness of the machine.
// Counted by readyAt (Redis's time of the tick, spread over it), not by
// when the stream stored the event (an outbox published late bunches
// those). A tick run at t with due d sets the next due at max(d + tick,
// t - 500 ms): after a stall, one tick on its stale due, then at most half
// a second of missed ticks at once. So the ticks run in a window of
// burstWindow have due times spaced a tick apart from half a second before
// it (W+500ms over tick, plus one), one stale tick more, and one run a
// tick before the window whose readyAt, spread over its tick, falls in it:
// anything beyond is admission no schedule allowed.
func checkBursts(ev *evidence) checkResult {
	c := checkResult{Name: "never above the configured rate", Invariant: "admissions in any second ≤ maxAdmitPerTick × the ticks the schedule allows in it"}
	for _, q := range ev.Queues {
		if q.MaxAdmitPerTick <= 0 || q.TickMs <= 0 {
			continue
		}
		tick := time.Duration(q.TickMs) * time.Millisecond
		allowed := q.MaxAdmitPerTick * (int((burstWindow+500*time.Millisecond+tick-1)/tick) + 3)
		var at []time.Time
		seen := map[uint64]bool{}
		for _, a := range ev.Admissions[q.Name] {
			if !seen[a.Seq] {
				seen[a.Seq] = true
				at = append(at, a.ReadyAt)
			}
		}
		sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
		worst, worstAt := 0, time.Time{}
		for i, j := 0, 0; i < len(at); i++ {
			for j < len(at) && at[j].Before(at[i].Add(burstWindow)) {
				j++
			}
			if j-i > worst {
				worst, worstAt = j-i, at[i]
			}
		}
		if worst > allowed {
			c.fail("%s: %d admitted in the %v from %s (readyAt), at most %d allowed (%d per %v tick)", q.Name, worst, burstWindow,
				worstAt.UTC().Format("15:04:05.000"), allowed, q.MaxAdmitPerTick, tick)
		}
		c.Note += fmt.Sprintf("%s: at most %d in a second (%d allowed); ", q.Name, worst, allowed)
	}
	return c.done()
}

// failoverBound is how long recovery from a Redis master's death may take.
// No client can write the shard before its replica is elected, and Redis
// Cluster needs for that: up to 1.5 node timeouts for the other masters
// to flag the master (a node pings a peer whose last answer is half a
// timeout old, and flags it when that ping is a timeout old), about a
// second for a majority to agree and the replica to wait out its election
// delay (0.5-1 s; 2 s allowed for both). Then usher has what it has for
// any fault: its clients reread the slot map on the first failed command,
// the followers replay what the replica had not received, the next tick
// admits (2 s allowed). A rate judged over recoveryWindow-long windows
// reads as back only a window after it is.
const failoverBound = redisNodeTimeout*3/2 + 2*time.Second + 2*time.Second + recoveryWindow

// bound is how long the scenario's recovery may take: recoveryBound
// unless the scenario says otherwise.
func (tl timeline) bound() time.Duration {
	if tl.Bound > 0 {
		return tl.Bound
	}
	return recoveryBound
}

// rateFigures are what checkRate measured.
type rateFigures struct {
	baseline, configured float64
	recovery             time.Duration
	recovered            bool
}

// admissionsIn counts the queue's admissions stored in [from, to).
func admissionsIn(as []admission, from, to time.Time) int {
	n := 0
	for _, a := range as {
		if !a.Stored.Before(from) && a.Stored.Before(to) {
			n++
		}
	}
	return n
}

// demandAbove reports whether every sample of the queue in [from, to) had
// at least min shoppers waiting: the rate can only be judged while the
// line is longer than what a tick takes.
func demandAbove(ev *evidence, q string, from, to time.Time, atLeast int64) bool {
	n := 0
	for _, s := range ev.Samples {
		if s.Queue != q || s.At.Before(from) || !s.At.Before(to) {
			continue
		}
		n++
		if s.Waiting < atLeast {
			return false
		}
	}
	return n > 0
}

// behindSamples counts the samples of queue q in [from, to) that found its
// last tick refused as behind, and all its samples there.
func behindSamples(ev *evidence, q string, from, to time.Time) (behind, all int) {
	for _, s := range ev.Samples {
		if s.Queue != q || s.At.Before(from) || !s.At.Before(to) {
			continue
		}
		all++
		if s.Behind {
			behind++
		}
	}
	return behind, all
}

// checkRate: with demand above capacity, admissions per second are within
// 10 % of the configured rate (before the fault, and again at the end);
// and the rate comes back within recoveryBound of the fault (or of its
// heal, for a fault that pauses admission by design).
func checkRate(ev *evidence) (checkResult, checkResult, rateFigures) {
	tl := ev.Timeline
	c := checkResult{Name: "admission rate", Invariant: fmt.Sprintf("admissions/s within %.0f%% of maxAdmitPerTick/tick while demand exceeds it", rateTolerance*100), Timed: true}
	r := checkResult{Name: "recovery", Invariant: fmt.Sprintf("admission back to its normal rate within %v", tl.bound()), Timed: true}
	q := rateCheckedQueue(ev)
	if q == nil || tl.Inject.IsZero() || tl.LoadStop.IsZero() {
		c.Status, r.Status = statusSkipped, statusSkipped
		c.Note, r.Note = "no rate-checked queue or no timeline", "no rate-checked queue or no timeline"
		return c.done(), r.done(), rateFigures{}
	}
	rq := rateQueue{ev: ev, q: q, as: ev.Admissions[q.Name], configured: q.configuredRate()}
	fr := rateFigures{configured: rq.configured}
	baseFrom := tl.Start.Add(tl.Inject.Sub(tl.Start) / 3)
	fr.baseline = rq.window(&c, "before the fault", baseFrom, tl.Inject)
	tailFrom := tl.LoadStop.Add(-tl.Inject.Sub(baseFrom))
	if tailFrom.After(tl.Heal) {
		rq.window(&c, "at the end", tailFrom, tl.LoadStop)
	}

	// Recovery is judged against the normal rate: the rate before the
	// fault, or the configured one if that was higher than it should have
	// been (a fault that empties the line leaves only the joins to admit,
	// which fall short of an over-fast baseline).
	normal := fr.baseline
	if fr.configured > 0 && fr.configured < normal {
		normal = fr.configured
	}
	if normal <= 0 {
		r.Status, r.Note = statusSkipped, "no admissions before the fault"
		return c.done(), r.done(), fr
	}
	fr.recovered, fr.recovery = rq.recovery(&r, normal)
	r.Note = fmt.Sprintf("normal rate %.1f/s; recovery %.1fs after the fault", normal, fr.recovery.Seconds())
	if n, of := behindSamples(ev, q.Name, tl.Inject, tl.LoadStop); n > 0 {
		// Why admission paused, when it did: ticks refused because the
		// line had not applied every admission and order event yet.
		r.Note += fmt.Sprintf("; line behind the streams in %d of %d samples after the fault", n, of)
	}
	return c.done(), r.done(), fr
}

// rateCheckedQueue is the queue whose admission rate is checked, if any.
func rateCheckedQueue(ev *evidence) *queueSpec {
	var q *queueSpec
	for i := range ev.Queues {
		if ev.Queues[i].RateChecked {
			q = &ev.Queues[i]
		}
	}
	return q
}

// rateQueue is the rate-checked queue's admissions and configured rate.
type rateQueue struct {
	ev         *evidence
	q          *queueSpec
	as         []admission
	configured float64
}

// window judges into c the admission rate in [from, to), and returns it.
// Admitting faster than configured is a violation whatever the demand;
// slower only while the line was long enough to take from.
func (rq rateQueue) window(c *checkResult, name string, from, to time.Time) float64 {
	rate := float64(admissionsIn(rq.as, from, to)) / to.Sub(from).Seconds()
	dev := (rate - rq.configured) / rq.configured
	switch {
	case dev > rateTolerance:
	case !demandAbove(rq.ev, rq.q.Name, from, to, int64(2*rq.q.MaxAdmitPerTick)):
		c.Note += fmt.Sprintf("%s window: %.1f/s, demand below capacity (slowness not judged); ", name, rate)
		return rate
	case dev >= -rateTolerance:
		c.Note += fmt.Sprintf("%s window: %.1f/s; ", name, rate)
		return rate
	}
	c.fail("%s %s window %s–%s: %.1f admissions/s, configured %.1f/s (%+.0f%%)", rq.q.Name, name,
		from.UTC().Format("15:04:05"), to.UTC().Format("15:04:05"), rate, rq.configured, 100*dev)
	return rate
}

// dip is a run of consecutive recovery windows after the fault whose
// admission rate was low: the first and the last low window's start.
type dip struct{ from, to time.Time }

// dipStep is how far apart the recovery windows start.
const dipStep = 250 * time.Millisecond

// dips are the runs of recovery windows from the fault to the load's stop
// whose rate was below 90 % of normal.
func (rq rateQueue) dips(normal float64) []dip {
	tl := rq.ev.Timeline
	var dips []dip
	for t := tl.Inject; !t.Add(recoveryWindow).After(tl.LoadStop); t = t.Add(dipStep) {
		rate := float64(admissionsIn(rq.as, t, t.Add(recoveryWindow))) / recoveryWindow.Seconds()
		if rate >= 0.9*normal {
			continue
		}
		if n := len(dips); n > 0 && dips[n-1].to.Add(dipStep).Equal(t) {
			dips[n-1].to = t
		} else {
			dips = append(dips, dip{t, t})
		}
	}
	return dips
}

// recovery judges into r how long after the fault the admission rate was
// back: the end of the last window after it whose rate was below 90 % of
// normal. It fails when the rate was still low as the load stopped, or a
// dip outlasted the scenario's bound.
func (rq rateQueue) recovery(r *checkResult, normal float64) (recovered bool, took time.Duration) {
	tl := rq.ev.Timeline
	dips := rq.dips(normal)
	switch {
	case len(dips) == 0:
		return true, 0
	case !dips[len(dips)-1].to.Add(recoveryWindow).Before(tl.LoadStop.Add(-dipStep)):
		took = tl.LoadStop.Sub(tl.Inject)
		r.fail("%s: admission rate still below 90%% of %.1f/s when the load stopped, %.1fs after the fault", rq.q.Name, normal, took.Seconds())
		return false, took
	}
	// Each dip ends within the bound of what began it: the fault (for a
	// fault made of steps, the last step begun by the start of the first
	// low window: the step that began it, or an earlier one), or — for
	// a dip that begins once the fault is healed (the burst of work a
	// resumed worker or a restarted database releases) — the heal. A dip
	// that runs across the heal counts from the fault, unless admission
	// pauses by design while the fault lasts.
	for _, d := range dips {
		from, what := tl.Inject, "fault"
		for _, s := range tl.Steps {
			if s.After(from) && !s.After(d.from) {
				from, what = s, "step before it"
			}
		}
		// (a dip shows first in the window that reaches into it: one
		// whose first low window ends past the heal began with it)
		if !tl.Heal.IsZero() && (d.from.Add(recoveryWindow).After(tl.Heal) || tl.RecoverFromHeal) {
			from, what = tl.Heal, "heal"
		}
		if back := d.to.Add(recoveryWindow).Sub(from); back > tl.bound() {
			r.fail("%s: admission rate back to 90%% of %.1f/s only %.1fs after the %s", rq.q.Name, normal, back.Seconds(), what)
			break
		}
	}
	return true, dips[len(dips)-1].to.Add(recoveryWindow).Sub(tl.Inject)
}

// checkPayments: every capture belongs to exactly one PAID order and every
// PAID order has exactly one capture; a voided capture is no capture.
func checkPayments(ev *evidence) checkResult {
	c := checkResult{Name: "charges match PAID orders", Invariant: "every capture has one PAID order, every PAID order one capture (voided excepted)"}
	if ev.PgsimErr != "" || ev.DBErr != "" {
		c.Status, c.Note = statusSkipped, "records unavailable: "+ev.PgsimErr+ev.DBErr
		return c.done()
	}
	matched := 0
	for _, o := range ev.Orders {
		ch := ev.Charges[o.ID]
		live := ch.Captures
		if ch.Voided {
			live = 0
		}
		switch {
		case o.Status == "PAID" && live == 0:
			c.fail("order %s (%s) PAID with no capture", o.ID, o.Queue)
		case o.Status == "PAID" && live > 1:
			c.fail("order %s (%s) PAID, captured %d times", o.ID, o.Queue, live)
		case o.Status == "PAID":
			matched++
		case live > 0:
			c.fail("order %s (%s) %s (%s) but captured %d time(s)", o.ID, o.Queue, o.Status, o.Reason, live)
		}
	}
	voided := 0
	known := map[string]bool{}
	for _, o := range ev.Orders {
		known[o.ID] = true
	}
	for id, ch := range ev.Charges {
		if ch.Voided {
			voided++
		}
		if !known[id] && ch.Captures > 0 && !ch.Voided {
			c.fail("capture under key %s, and no such order in PostgreSQL", id)
		}
	}
	if ev.ChargeTotal.MaxPerKey > 1 {
		c.fail("pgsim holds %d captures under one idempotency key", ev.ChargeTotal.MaxPerKey)
	}
	c.Note = fmt.Sprintf("%d captures, %d PAID orders matched, %d voided", ev.ChargeTotal.Total, matched, voided)
	return c.done()
}

// checkStock: for every SKU, available + sold (PAID and still PENDING
// orders hold their units) = the initial stock.
func checkStock(ev *evidence) checkResult {
	c := checkResult{Name: "stock conserved", Invariant: "available + sold = initial, per SKU"}
	if ev.DBErr != "" {
		c.Status, c.Note = statusSkipped, "PostgreSQL unavailable: "+ev.DBErr
		return c.done()
	}
	for _, q := range ev.Queues {
		var sold int64
		for _, o := range ev.Orders {
			if o.SKU == q.SKU && (o.Status == "PAID" || o.Status == "PENDING") {
				sold += o.Quantity
			}
		}
		if got := ev.Stock[q.SKU] + sold; got != q.Stock {
			c.fail("%s: available %d + sold %d = %d, initial %d", q.SKU, ev.Stock[q.SKU], sold, got, q.Stock)
		}
	}
	return c.done()
}

// checkRecords: every final order reads back, on GET /v1/orders/{id}, the
// status PostgreSQL holds — its Redis record, which a Redis that lost
// everything gets back from the order workers. Not judged where the fault
// loses one shard's last writes (see timeline.PartialRedisLoss).
func checkRecords(ev *evidence) checkResult {
	c := checkResult{Name: "order records truthful", Invariant: "every final order reads back the status PostgreSQL holds"}
	switch {
	case ev.DBErr != "":
		c.Status, c.Note = statusSkipped, "PostgreSQL unavailable: "+ev.DBErr
		return c.done()
	case ev.RecordsErr != "":
		c.Status, c.Note = statusSkipped, "Redis unavailable: "+ev.RecordsErr
		return c.done()
	case ev.Timeline.PartialRedisLoss:
		c.Status, c.Note = statusSkipped, "the fault loses one shard's last writes, which the order workers' marker does not see"
		return c.done()
	}
	for _, o := range ev.Orders {
		if st, ok := ev.Records[o.ID]; ok && st != o.Status {
			if st == "" {
				st = "(no record: 404)"
			}
			c.fail("order %s (%s): GET answers %s, PostgreSQL holds %s", o.ID, o.Queue, st, o.Status)
		}
	}
	return c.done()
}

// checkOrders: every order a shopper was given exists; none is PENDING
// past its deadline (plus a margin); the final status a shopper read is
// the one PostgreSQL holds.
func checkOrders(ev *evidence) checkResult {
	c := checkResult{Name: "orders final and truthful", Invariant: "no accepted order lost, none PENDING past its deadline, shoppers told the stored outcome"}
	if ev.DBErr != "" {
		c.Status, c.Note = statusSkipped, "PostgreSQL unavailable: "+ev.DBErr
		return c.done()
	}
	byID := map[string]dbOrder{}
	for _, o := range ev.Orders {
		byID[o.ID] = o
	}
	end := ev.Timeline.LoadStop.Add(ev.Settled.Took)
	for _, o := range ev.Orders {
		if o.Status == "PENDING" && end.After(o.Deadline.Add(pendingMargin)) {
			c.fail("order %s (%s) PENDING %.0fs past its deadline", o.ID, o.Queue, end.Sub(o.Deadline).Seconds())
		}
	}
	seen := map[string]bool{}
	for _, r := range ev.Journal {
		switch {
		case r.Kind == recOrder && (r.Code == 202 || r.Code == 200) && r.OrderID != "" && !seen[r.OrderID]:
			seen[r.OrderID] = true
			if _, ok := byID[r.OrderID]; !ok {
				c.fail("order %s (%s, %s) accepted with %d, not in PostgreSQL", r.OrderID, r.Queue, r.User, r.Code)
			}
		case r.Kind == recOrderFinal:
			if o, ok := byID[r.OrderID]; ok && o.Status != r.Status {
				c.fail("order %s: shopper told %s, PostgreSQL holds %s (%s)", r.OrderID, r.Status, o.Status, o.Reason)
			}
		}
	}
	return c.done()
}

// checkReady: every READY a shopper saw carries a token the admission
// stream recorded, and none came before its readyAt.
func checkReady(ev *evidence) checkResult {
	c := checkResult{Name: "READY backed by an admission", Invariant: "every token shown has an admission event; none shown before readyAt"}
	tokens := map[string]bool{}
	for _, as := range ev.Admissions {
		for _, a := range as {
			tokens[a.TokenID] = true
		}
	}
	for _, r := range ev.Journal {
		if r.Kind != recReady {
			continue
		}
		if !tokens[r.TokenID] {
			c.fail("%s seq %d (%s): READY with token %q, no admission event", r.Queue, r.Seq, r.User, r.TokenID)
		}
		if r.ReadyAt != nil && r.T.Add(readyEarlySlack).Before(*r.ReadyAt) {
			c.fail("%s seq %d (%s): READY by %s at %s, %.1fs before its readyAt", r.Queue, r.Seq, r.User, r.Via,
				r.T.UTC().Format("15:04:05.000"), r.ReadyAt.Sub(r.T).Seconds())
		}
	}
	return c.done()
}

// checkDrained: after the load stopped, the pipeline empties (every join
// in line, every admission announced, every order final) within the
// settle deadline. Timed: what stays stuck for good also shows in the
// safety checks (a join never consumed is lost, an order left PENDING is
// past its deadline), this one says how long the drain took.
func checkDrained(ev *evidence) checkResult {
	c := checkResult{Name: "pipeline drained", Invariant: "after the load stops, nothing stays in flight", Timed: true}
	if !ev.Settled.Drained {
		c.fail("still in flight %.0fs after the load stopped: %s", ev.Settled.Took.Seconds(), ev.Settled.Detail)
	} else {
		c.Note = fmt.Sprintf("drained in %.1fs", ev.Settled.Took.Seconds())
	}
	return c.done()
}

// checkAudits: usherctl audit, the ops tool's own verdict from the streams.
func checkAudits(ev *evidence) checkResult {
	c := checkResult{Name: "usherctl audit", Invariant: "the ops audit finds the streams clean"}
	if len(ev.Audits) == 0 {
		c.Status, c.Note = statusSkipped, "not run"
		return c.done()
	}
	for _, a := range ev.Audits {
		if !a.Clean {
			c.fail("%s: %s", a.Queue, firstLines(a.Output+a.Err, 6))
		}
	}
	return c.done()
}

func firstLines(s string, n int) string {
	out := ""
	lines := 0
	for _, line := range splitLines(s) {
		if line == "" {
			continue
		}
		if lines == n {
			return out + " …"
		}
		if out != "" {
			out += " | "
		}
		out += line
		lines++
	}
	return out
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}
