package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"usher/shared/catalog"
	"usher/shared/event"
)

const auditSynopsis = `usherctl audit --queue Q [--show N]

Checks from the event streams alone that queue Q was fair:
  - admission in join order: admissions appear in join-sequence order, and
    nobody still waiting was passed over by a later joiner;
  - nobody admitted twice for one ticket;
  - never more than targetActive slots held: a slot is held from readyAt
    until the token expires, its order completes or fails, or its holder
    leaves; targetActive comes from the USHER_OPS config_changed history, or
    failing that from the current catalog (the report says which); for an
    adaptive queue it is its adaptive max (the limit moves below it);
  - no token redeemed twice: order events for one token with different
    order ids.
Prints the verdict and the exceptions. Exit status 0 when clean, 1 when
violations are found.`

// check is one audited invariant and its exceptions.
type check struct {
	name       string
	skipped    string // why the check could not run, if it could not
	violations []string
}

func (c *cli) audit(ctx context.Context, args []string) error {
	fs := newFlags("audit", auditSynopsis)
	q := fs.String("queue", "", "the queue to audit (required)")
	show := fs.Int("show", 20, "exceptions listed per check")
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
	targets := targetsOf(h)
	source := fmt.Sprintf("the USHER_OPS config_changed history (%d changes)", len(h.configs))
	if len(h.configs) == 0 {
		if t, ok := currentTarget(ctx, js, *q); ok {
			targets = func(time.Time) int { return t }
			source = "the current catalog (no config_changed history for this queue)"
		} else {
			targets, source = nil, "nowhere (no config history and no catalog entry)"
		}
	}
	checks := auditChecks(h, targets)
	return report(c.stdout, *q, h, source, checks, *show)
}

// auditChecks runs every check on a history. targets gives targetActive at
// a time, or is nil when it is unknown.
func auditChecks(h *history, targets func(time.Time) int) []check {
	l := project(h)
	return []check{
		checkJoinOrder(h, l),
		checkAdmittedOnce(l),
		checkSlots(l, targets),
		checkRedeemedOnce(h),
	}
}

// checkJoinOrder: admissions come in join order, and nobody waiting is
// passed over.
func checkJoinOrder(h *history, l *line) check {
	c := check{name: "admission in join order"}
	var highest uint64
	for _, a := range h.admissions {
		if a.Seq < highest {
			c.violations = append(c.violations, fmt.Sprintf("seq %d (%s) admitted after seq %d, who joined later (admission #%d)",
				a.Seq, a.User, highest, a.streamSeq))
		}
		highest = max(highest, a.Seq)
	}
	// The first admission of anyone who joined after seq s: if s was still
	// waiting then (not admitted, not gone), s was passed over.
	type firstAfter struct {
		seq uint64
		at  time.Time
	}
	var adm []*entry
	for _, e := range l.entries {
		if e.adm != nil {
			adm = append(adm, e)
		}
	}
	// earliest[i] is the earliest admission among adm[i:] (adm is by seq).
	earliest := make([]firstAfter, len(adm)+1)
	earliest[len(adm)] = firstAfter{}
	for i := len(adm) - 1; i >= 0; i-- {
		earliest[i] = earliest[i+1]
		if at := adm[i].adm.stored; earliest[i].seq == 0 || at.Before(earliest[i].at) {
			earliest[i] = firstAfter{adm[i].seq, at}
		}
	}
	for _, e := range l.entries {
		if e.alias != 0 || e.orphan || e.adm != nil {
			continue
		}
		i := sort.Search(len(adm), func(i int) bool { return adm[i].seq > e.seq })
		f := earliest[i]
		if f.seq == 0 || (!e.leftAt.IsZero() && !e.leftAt.After(f.at)) {
			continue
		}
		c.violations = append(c.violations, fmt.Sprintf("seq %d (%s) was waiting when seq %d, who joined later, was admitted at %s",
			e.seq, e.user, f.seq, f.at.UTC().Format(time.RFC3339Nano)))
	}
	return c
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
		switch {
		case c.skipped != "":
			fmt.Fprintf(w, "  SKIPPED  %s: %s\n", c.name, c.skipped)
		case len(c.violations) == 0:
			fmt.Fprintf(w, "  ok       %s\n", c.name)
		default:
			total += len(c.violations)
			fmt.Fprintf(w, "  VIOLATED %s: %d exception(s)\n", c.name, len(c.violations))
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
