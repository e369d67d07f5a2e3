package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"usher/internal/catalog"
	"usher/internal/event"
)

const auditSynopsis = `usherctl audit --queue Q [--show N] [--lottery-list FILE]

Checks from the event streams alone that queue Q was fair:
  - admission in join order: every entry has a place — a scheduled drop's
    drawn pre-queue by lottery place, everyone else by join sequence
    behind them (priority entries, allowed past the line, are outside the
    order and counted) — and nobody still waiting was passed over by
    someone placed behind them (the drawn wait from the draw, the others
    from their join); plain FIFO admissions are decided in join-sequence
    order (by readyAt, the admission's own clock: a record stored late,
    after a publish failed over a leader change, is judged when decided);
  - lottery (drawn order), for a scheduled drop: the revealed seed matches
    the commitment (SHA-256) published before opensAt; the pre-queue
    recomputed from USHER_ENTRIES up to the draw's entries cursor, in
    lottery order (HMAC-SHA256 of each user id keyed by the seed), has the
    draw's count and order digest, or the report names the first place
    that differs; the drawn were admitted in lottery order (readyAt never
    goes back). Without a draw: skipped, or a violation once opensAt passed
    more than a minute ago;
  - nobody admitted twice for one ticket;
  - never more than targetActive slots held: a slot is held from readyAt
    until the token expires, its order completes or fails (by the event's
    time, or when the stream stored it if that is earlier: the order
    worker's clock does not decide), or its holder leaves; targetActive
    comes from the USHER_OPS config_changed history, or failing that from
    the current catalog (the report says which); for an adaptive queue it
    is its adaptive max (the limit moves below it);
  - no token redeemed twice: order events for one token with different
    order ids;
  - every order's token admitted on the stream: each order names a token
    USHER_ADMISSIONS admitted, to the order's user. Redis, which the
    gateway mints tokens from, can be written by whoever holds a service's
    password; an order on an admission Redis alone held skipped the line
    (the order worker rejects it, token_unconfirmed, and the audit lists
    it either way, with what became of it). Orders older than what the
    stream still holds (its first admission, plus the longest token
    lifetime) are counted, not checked.
Prints the verdict and the exceptions. Exit status 0 when clean, 1 when
violations are found. --lottery-list FILE also writes the recomputed
pre-queue's user ids in lottery order, one a line: the list the
"Verifying a draw" script of docs/events.md checks.`

// check is one audited invariant and its exceptions.
type check struct {
	name       string
	note       string // what the verdict covers, when it needs saying
	skipped    string // why the check could not run, if it could not
	violations []string
}

func (c *cli) audit(ctx context.Context, args []string) error {
	fs := newFlags("audit", auditSynopsis)
	q := fs.String("queue", "", "the queue to audit (required)")
	show := fs.Int("show", 20, "exceptions listed per check")
	list := fs.String("lottery-list", "", "write the recomputed pre-queue's user ids in lottery order to this file")
	pos, err := c.parse(fs, args)
	if err != nil {
		return done(err)
	}
	switch {
	case len(pos) > 0:
		return usagef("audit: unexpected arguments %q", pos)
	case *q == "":
		return usagef("audit: --queue is required")
	case !catalog.ValidName(*q):
		return usagef("audit: --queue %q is not a queue name", *q)
	case *show < 0:
		return usagef("audit: --show must be >= 0")
	}
	nc, js, err := c.jetStream(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	h, err := loadHistory(ctx, js, *q, parts{orders: true, configs: true})
	if err != nil {
		return err
	}
	if err := loadDrop(ctx, js, h); err != nil {
		return err
	}
	targets := targetsOf(h)
	source := fmt.Sprintf("the USHER_OPS config_changed history (%d changes)", len(h.configs))
	if len(h.configs) == 0 {
		if t, ok := currentTarget(ctx, js, *q); ok {
			targets = func(time.Time) int { return t }
			source = "the current catalog (no config_changed history for this queue)"
		} else {
			if err := h.unknownQueue(ctx, js, "audit"); err != nil {
				return err
			}
			targets, source = nil, "nowhere (no config history and no catalog entry)"
		}
	}
	heldFrom, err := admissionsHeldFrom(ctx, js)
	if err != nil {
		return err
	}
	l := project(h)
	d := newDrop(h, l, scheduleOf(ctx, js, h), c.now())
	if *list != "" {
		if err := d.writeList(*list); err != nil {
			return err
		}
	}
	checks := append(auditChecks(h, l, d, targets), checkOrdersAdmitted(h, heldFrom))
	return report(c.stdout, *q, h, source, checks, *show)
}

// auditChecks runs every check on a history, its projection and its drop.
// targets gives targetActive at a time, or is nil when it is unknown.
func auditChecks(h *history, l *line, d *drop, targets func(time.Time) int) []check {
	return []check{
		checkJoinOrder(h, l, d),
		checkLottery(h, l, d),
		checkAdmittedOnce(l),
		checkSlots(l, targets),
		checkRedeemedOnce(h),
	}
}

// admissionsHeldFrom is the time from which USHER_ADMISSIONS holds the
// admission of every order's token: its creation, or — once older
// admissions aged out or were removed — its first admission's time plus
// the longest a token lives (an order's admission precedes it by no more).
// Zero when the stream does not exist (nothing was ever admitted).
func admissionsHeldFrom(ctx context.Context, js jetstream.JetStream) (time.Time, error) {
	st, err := js.Stream(ctx, event.StreamAdmissions)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("stream %s: %w", event.StreamAdmissions, err)
	}
	info := st.CachedInfo()
	if info.State.FirstSeq > 1 {
		return info.State.FirstTime.Add(catalog.MaxTokenTTLSeconds * time.Second), nil
	}
	return info.Created, nil
}

// checkOrdersAdmitted: every order names a token USHER_ADMISSIONS admitted
// to the order's user (see the synopsis). Orders before heldFrom are
// counted, not checked: the stream no longer holds their admissions.
func checkOrdersAdmitted(h *history, heldFrom time.Time) check {
	c := check{name: "every order's token admitted on the stream"}
	admittedTo := make(map[string]string, len(h.admissions))
	for _, a := range h.admissions {
		admittedTo[a.TokenID] = a.User
	}
	type unadmitted struct {
		tokenID, user, outcome string
	}
	var ids []string
	bad := map[string]*unadmitted{}
	old := map[string]bool{}
	for _, o := range h.orders {
		if o.orderID == "" {
			continue
		}
		if user, ok := admittedTo[o.tokenID]; ok && (o.user == "" || o.user == user) {
			continue
		}
		if o.at.Before(heldFrom) {
			old[o.orderID] = true
			continue
		}
		u := bad[o.orderID]
		if u == nil {
			u = &unadmitted{tokenID: o.tokenID, user: o.user, outcome: "requested"}
			bad[o.orderID] = u
			ids = append(ids, o.orderID)
		}
		if o.typ == event.TypeOrderCompleted || o.typ == event.TypeOrderFailed {
			u.outcome = strings.TrimSpace(o.status + " " + o.reason)
		}
	}
	for _, id := range ids {
		u := bad[id]
		c.violations = append(c.violations, fmt.Sprintf("order %s of %s: token %s, which USHER_ADMISSIONS never admitted to them (%s)",
			id, u.user, u.tokenID, u.outcome))
	}
	if len(old) > 0 {
		c.note = fmt.Sprintf("%d order(s) older than the admissions the stream holds, not checked", len(old))
	}
	return c
}

// checkJoinOrder: admissions come in line order, and nobody waiting is
// passed over by someone placed behind them (see drop.classOf).
func checkJoinOrder(h *history, l *line, d *drop) check {
	c := check{name: "admission in join order"}
	inLine, note := placed(l, d)
	c.note = note
	c.violations = append(fifoDecidedInOrder(h, l, d), passedOver(inLine, d)...)
	return c
}

// placed returns the entries the join order covers, by place, and — when
// not all of them are plain FIFO — a note of how each is placed.
func placed(l *line, d *drop) (inLine []*entry, note string) {
	var fifo, drawn, priority, undrawn int
	for _, e := range l.entries {
		if e.alias != 0 || e.orphan {
			continue
		}
		switch d.classOf(e) {
		case placePriority:
			priority++
			continue
		case placeUndrawn:
			undrawn++
			continue
		case placeDrawn:
			drawn++
		default:
			fifo++
		}
		inLine = append(inLine, e)
	}
	d.sortByPlace(inLine)
	if drawn+priority+undrawn > 0 {
		note = fmt.Sprintf("%d by join sequence, %d drawn by lottery place ahead of them, %d priority outside the order", fifo, drawn, priority)
		if undrawn > 0 {
			note += fmt.Sprintf(", %d pre-queued and not drawn", undrawn)
		}
	}
	return inLine, note
}

// fifoDecidedInOrder returns a violation for each plain FIFO admission
// decided after a later joiner's.
func fifoDecidedInOrder(h *history, l *line, d *drop) (violations []string) {
	// Plain FIFO admissions are decided in join-sequence order. Decided,
	// not stored: readyAt is the admission's own clock, which never goes
	// back from one tick to the next, while a batch of admissions whose
	// publish failed over a leader change is stored after a later tick's.
	// Two with the same readyAt go by the stream's order. (A tick's
	// admissions are announced in sequence order, not place order, so the
	// drawn are checked by readyAt instead: see checkLottery.)
	var fifoAdm []admission
	for _, a := range h.admissions {
		if e := l.bySeq[a.Seq]; e == nil || d.classOf(e) == placeFIFO {
			fifoAdm = append(fifoAdm, a)
		}
	}
	slices.SortStableFunc(fifoAdm, func(a, b admission) int { return a.ReadyAt.Compare(b.ReadyAt) })
	var highest admission
	for _, a := range fifoAdm {
		if a.Seq < highest.Seq {
			violations = append(violations, fmt.Sprintf("seq %d (%s) admitted (readyAt %s) after seq %d, who joined later (readyAt %s; admission #%d)",
				a.Seq, a.User, stamp(a.ReadyAt), highest.Seq, stamp(highest.ReadyAt), a.streamSeq))
		}
		if a.Seq > highest.Seq {
			highest = a
		}
	}
	return violations
}

// passedOver returns a violation for each entry of inLine (by place)
// still waiting when someone placed behind it was admitted, and each drawn
// entry admitted after someone placed behind every drawn one.
func passedOver(inLine []*entry, d *drop) (violations []string) {
	// Nobody waiting is passed over: the first admission of anyone placed
	// behind e, while e waited (a drawn entry from the draw, any other from
	// its join: everyone behind a FIFO entry joined after it).
	// first[i] and firstDrawn[i] are the earliest admission among
	// inLine[i:], of any time and since the draw.
	type firstAdm struct {
		e  *entry
		at time.Time
	}
	first := make([]firstAdm, len(inLine)+1)
	firstDrawn := make([]firstAdm, len(inLine)+1)
	for i := len(inLine) - 1; i >= 0; i-- {
		first[i], firstDrawn[i] = first[i+1], firstDrawn[i+1]
		e := inLine[i]
		if e.adm == nil {
			continue
		}
		at := e.adm.stored
		if first[i].e == nil || at.Before(first[i].at) {
			first[i] = firstAdm{e, at}
		}
		if !at.Before(d.at) && (firstDrawn[i].e == nil || at.Before(firstDrawn[i].at)) {
			firstDrawn[i] = firstAdm{e, at}
		}
	}
	// A drawn entry admitted after someone placed behind every drawn one:
	// by readyAt, the admission's own clock.
	var fifoFirst *entry
	for _, e := range inLine {
		if e.adm != nil && d.classOf(e) == placeFIFO && !e.adm.stored.Before(d.at) &&
			(fifoFirst == nil || e.adm.ReadyAt.Before(fifoFirst.adm.ReadyAt)) {
			fifoFirst = e
		}
	}
	for i, e := range inLine {
		isDrawn := d.classOf(e) == placeDrawn
		if e.adm != nil {
			if isDrawn && fifoFirst != nil && fifoFirst.adm.ReadyAt.Before(e.adm.ReadyAt) {
				violations = append(violations, fmt.Sprintf("%s was admitted (readyAt %s) after %s, placed behind every drawn entry (readyAt %s)",
					d.describe(e), stamp(e.adm.ReadyAt), d.describe(fifoFirst), stamp(fifoFirst.adm.ReadyAt)))
			}
			continue
		}
		f := first[i+1]
		if isDrawn {
			f = firstDrawn[i+1]
		}
		if f.e == nil || (!e.leftAt.IsZero() && !e.leftAt.After(f.at)) {
			continue
		}
		behind := "who joined later"
		if isDrawn || d.classOf(f.e) != placeFIFO {
			behind = "placed behind it"
		}
		violations = append(violations, fmt.Sprintf("%s was waiting when %s, %s, was admitted at %s",
			d.describe(e), d.describe(f.e), behind, stamp(f.at)))
	}
	return violations
}

func checkAdmittedOnce(l *line) check {
	c := check{name: "nobody admitted twice"}
	for _, a := range l.admittedTwice {
		c.violations = append(c.violations, fmt.Sprintf("seq %d (%s) admitted again with token %s (admission #%d)",
			a.Seq, a.User, a.TokenID, a.streamSeq))
	}
	return c
}

// checkSlots counts slots held at each admission. A batch admitted in one
// tick has readyAt spread over the tick, so its last member sees the whole
// batch; an over-admission by one tick is therefore always caught.
func checkSlots(l *line, targets func(time.Time) int) check {
	c := check{name: "slots held <= targetActive"}
	if targets == nil {
		c.skipped = "targetActive unknown"
		return c
	}
	type edge struct {
		at    time.Time
		delta int
		e     *entry
	}
	var edges []edge
	for _, e := range l.entries {
		if e.adm == nil {
			continue
		}
		start, end := e.adm.ReadyAt, e.adm.ExpiresAt
		if !e.usedAt.IsZero() && e.usedAt.Before(end) {
			end = e.usedAt
		}
		if !e.leftAt.IsZero() && e.leftAt.Before(end) {
			end = e.leftAt
		}
		if !end.After(start) {
			end = start.Add(time.Nanosecond) // held for an instant still counts
		}
		edges = append(edges, edge{start, +1, e}, edge{end, -1, e})
	}
	sort.SliceStable(edges, func(i, j int) bool {
		if !edges[i].at.Equal(edges[j].at) {
			return edges[i].at.Before(edges[j].at)
		}
		return edges[i].delta < edges[j].delta // a slot freed at t is free for one admitted at t
	})
	held := 0
	for _, ed := range edges {
		held += ed.delta
		if ed.delta < 0 {
			continue
		}
		if t := targets(ed.at); held > t {
			c.violations = append(c.violations, fmt.Sprintf("%s: %d slots held, targetActive %d (seq %d admitted, token %s)",
				ed.at.UTC().Format(time.RFC3339Nano), held, t, ed.e.seq, ed.e.adm.TokenID))
		}
	}
	return c
}

func checkRedeemedOnce(h *history) check {
	c := check{name: "no token redeemed twice"}
	orders := map[string][]string{}
	var tokens []string
	for _, o := range h.orders {
		if o.orderID == "" {
			continue
		}
		if o.typ != event.TypeOrderRequested && o.typ != event.TypeOrderCompleted {
			continue
		}
		ids, seen := orders[o.tokenID]
		if !seen {
			tokens = append(tokens, o.tokenID)
		}
		found := false
		for _, id := range ids {
			found = found || id == o.orderID
		}
		if !found {
			orders[o.tokenID] = append(ids, o.orderID)
		}
	}
	for _, tok := range tokens {
		if ids := orders[tok]; len(ids) > 1 {
			c.violations = append(c.violations, fmt.Sprintf("token %s redeemed by %d orders: %s", tok, len(ids), strings.Join(ids, ", ")))
		}
	}
	return c
}

// targetsOf returns targetActive at a time from the config history, or nil
// when there is none. Before the first change, the value it replaced.
func targetsOf(h *history) func(time.Time) int {
	if len(h.configs) == 0 {
		return nil
	}
	cs := h.configs
	return func(at time.Time) int {
		i := sort.Search(len(cs), func(i int) bool { return cs[i].at.After(at) })
		if i == 0 {
			if cs[0].previous > 0 {
				return cs[0].previous
			}
			return cs[0].target
		}
		return cs[i-1].target
	}
}

func report(w io.Writer, q string, h *history, source string, checks []check, show int) error {
	fmt.Fprintf(w, "audit of queue %s from the streams: %s\n", q, h.summary())
	fmt.Fprintf(w, "targetActive taken from %s\n", source)
	if h.malformed > 0 {
		fmt.Fprintf(w, "note: %d malformed events skipped\n", h.malformed)
	}
	total := 0
	for _, c := range checks {
		note := ""
		if c.note != "" {
			note = " (" + c.note + ")"
		}
		switch {
		case c.skipped != "":
			fmt.Fprintf(w, "  SKIPPED  %s: %s\n", c.name, c.skipped)
		case len(c.violations) == 0:
			fmt.Fprintf(w, "  ok       %s%s\n", c.name, note)
		default:
			total += len(c.violations)
			fmt.Fprintf(w, "  VIOLATED %s: %d exception(s)%s\n", c.name, len(c.violations), note)
			for i, v := range c.violations {
				if i == show {
					fmt.Fprintf(w, "      … and %d more\n", len(c.violations)-show)
					break
				}
				fmt.Fprintf(w, "      %s\n", v)
			}
		}
	}
	if total > 0 {
		fmt.Fprintf(w, "verdict: VIOLATIONS (%d)\n", total)
		return errViolations
	}
	fmt.Fprintln(w, "verdict: CLEAN")
	return nil
}
