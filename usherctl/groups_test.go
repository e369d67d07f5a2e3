package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"usher/internal/event"
	"usher/internal/waitqueue"
)

// joinGroup publishes one usher.joins.v2 message listing users (each with
// prev 0) and ingests each join at its place, as a group-committing
// gateway does; it returns the places.
func (l *liveLine) joinGroup(users ...string) []uint64 {
	l.t.Helper()
	js := event.Joins{Queue: l.q}
	for _, u := range users {
		js.Joins = append(js.Joins, event.Join{User: u, JoinedAt: time.Now().UTC()})
	}
	seq := l.publish(event.EnterSubject(l.q), fmt.Sprintf("joins/%s/%d", l.q, time.Now().UnixNano()), event.TypeJoins, time.Now(), js)
	if l.since == 0 {
		l.since = seq
	}
	places := make([]uint64, len(users))
	for i, u := range users {
		places[i] = event.Place(seq, i, l.since)
		if _, err := l.store.Ingest(context.Background(), l.q, l.epoch, places[i], u, 0); err != nil {
			l.t.Fatal(err)
		}
		l.seqs = append(l.seqs, places[i])
		l.users[u] = true
		l.owner[places[i]] = u
	}
	return places
}

// usherctl reads usher.joins.v2 messages as the admitter's follower applies
// them: audit finds a history of v1 and v2 joins clean, replay and report
// show each join, and a rebuild puts every shopper back at the place the
// live line gave them — a double click listed twice in one message, or in
// two, one place.
func TestGroupedJoinsReplayAuditAndRebuild(t *testing.T) {
	l := newLiveLine(t)
	l.configured(l.q, 4, 0)
	for i := range 3 {
		l.join(fmt.Sprintf("u%d", i))
	}
	g1 := l.joinGroup("u3", "u4", "u3") // u3's double click within the message
	l.join("u5")                        // a v1 join after the first group: counts in places
	g2 := l.joinGroup("u6", "u4")       // u4 again, in a later message
	l.join("u7")
	l.tick(4, 5*time.Minute) // u0..u3 admitted, in place order
	l.leave(l.seqs[4])       // u4 leaves while waiting
	want := l.state()
	for _, dup := range []uint64{g1[2], g2[1]} {
		if e := want.entries[dup]; e.Seq == dup {
			t.Fatalf("double click at %d = %+v: want it to resolve to the user's first place", dup, e)
		}
	}
	if e := want.entries[l.seqs[6]]; e.Status != waitqueue.Waiting || e.Position != 1 {
		t.Fatalf("u5 (a v1 join after the first group, at %d) = %+v, want first in line", l.seqs[6], e)
	}

	r := l.usherctl("audit", "--queue", l.q)
	if r.err != nil || !strings.Contains(r.stdout, "verdict: CLEAN") {
		t.Fatalf("audit = %v\n%s%s\nwant a clean verdict", r.err, r.stdout, r.stderr)
	}
	r = l.usherctl("replay", "--stream", "entries", "--queue", l.q, "--format", "table")
	if r.err != nil || !strings.Contains(r.stdout, "usher.joins.v2") || !strings.Contains(r.stdout, "joins=3 users=u3,u4,u3") ||
		!strings.Contains(r.stdout, "joins=2 users=u6,u4") {
		t.Fatalf("replay --format table = %v\n%s\nwant each group's joins listed", r.err, r.stdout)
	}
	r = l.usherctl("report", "--queue", l.q, "--out", t.TempDir()+"/report.html")
	if r.err != nil || !strings.Contains(r.stdout, "10 joins (8 places), 1 leaves (1 while waiting), 4 admitted") {
		t.Fatalf("report = %v\n%s%s\nwant every join of the groups counted", r.err, r.stdout, r.stderr)
	}

	l.flush()
	r = l.usherctl("rebuild", "--queue", l.q)
	if r.err != nil {
		t.Fatalf("rebuild: %v\n%s%s", r.err, r.stdout, r.stderr)
	}
	sameState(t, l, l.state(), want)
}
