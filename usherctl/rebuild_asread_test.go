package main

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"usher/internal/event"
	"usher/internal/waitqueue"
)

// randomHistory is a queue's history of n events: joins (from the middle
// on, some several to a usher.joins.v2 message, at their places) of users
// who may join again while in line (an alias) or after their entry ended
// (prev),
// leaves of any entry, an alias, or one the streams no longer hold (an
// orphan), admissions with tokens live or expired at now, and orders that
// used some of them.
func randomHistory(rng *rand.Rand, n int, now time.Time) *history {
	h := &history{queue: "q"}
	at := now.Add(-time.Hour)
	var seqs []uint64
	last, owner := map[string]uint64{}, map[uint64]string{}
	for seq := uint64(1); seq <= uint64(n); seq++ {
		at = at.Add(time.Duration(rng.IntN(1000)) * time.Millisecond)
		user := fmt.Sprintf("u%d", rng.IntN(n/3+1))
		switch k := rng.IntN(10); {
		case k < 7 || len(seqs) == 0:
			// From the middle on, a join message may be a usher.joins.v2
			// one listing up to three (a user twice: a double click).
			joins, grouped := 1, false
			if seq > uint64(n/2) && rng.IntN(2) == 0 {
				joins, grouped = 1+rng.IntN(3), true
			}
			for i := range joins {
				if i > 0 && rng.IntN(3) > 0 {
					user = fmt.Sprintf("u%d", rng.IntN(n/3+1))
				}
				place := h.places.Of(seq, i, grouped)
				ev := entryEvent{seq: place, streamSeq: seq, stored: at, user: user}
				if rng.IntN(2) == 0 {
					ev.prev = last[user]
				}
				h.entries = append(h.entries, ev)
				h.joins++
				seqs, last[user], owner[place] = append(seqs, place), place, user
			}
		case k < 9:
			// A leave names its entry's owner, as the gateway's (the
			// signed ticket's user) and the admitter's do.
			target := seqs[rng.IntN(len(seqs))]
			user = owner[target]
			if rng.IntN(8) == 0 {
				target = seq + 1000 // a join the streams no longer hold
			}
			h.entries = append(h.entries, entryEvent{seq: seq, streamSeq: seq, stored: at, leave: true, user: user, target: target})
			h.leaves++
		default:
			s := seqs[rng.IntN(len(seqs))]
			tok := fmt.Sprintf("q:e1:%d", s)
			exp := now.Add(time.Duration(rng.IntN(600)-300) * time.Second)
			h.admissions = append(h.admissions, admission{stored: at, Admitted: event.Admitted{Queue: "q", Seq: s, TokenID: tok,
				ReadyAt: at, ExpiresAt: exp}})
			if rng.IntN(3) == 0 {
				h.orders = append(h.orders, orderEvent{at: at.Add(time.Second), typ: event.TypeOrderCompleted, tokenID: tok, orderID: "o" + tok})
			}
		}
	}
	return h
}

// A rebuild that writes while it reads hands over exactly the records the
// whole history's projection makes — every one once, the same — admitted
// ones before anyone waiting, and the waiting in line order.
func TestARebuildAsReadHandsOverWhatTheWholeProjectionMakes(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 3))
	now := time.Now()
	early := 0 // records handed over before the end of the read
	defer func() {
		t.Logf("%d records handed over before the end of the read", early)
		if early == 0 {
			t.Error("no record was handed over before the end: the histories prove nothing of writing while reading")
		}
	}()
	for round := range 300 {
		n := 20 + rng.IntN(400)
		h := randomHistory(rng, n, now)
		want := project(h).records(now, nil)

		var leaves []entryEvent
		for _, ev := range h.entries {
			if ev.leave {
				leaves = append(leaves, ev)
			}
		}
		chunk := 1 + rng.IntN(50)
		r := newRelease(h, leaves, uint64(n), now, chunk)
		var got []waitqueue.Record
		for _, ev := range h.entries {
			if !ev.leave {
				got = append(got, r.join(ev)...)
			}
		}
		early += len(got)
		got = append(got, r.end()...)

		bySeq := func(a, b waitqueue.Record) int { return cmp.Compare(a.Seq, b.Seq) }
		sortedGot, sortedWant := slices.Clone(got), slices.Clone(want)
		slices.SortFunc(sortedGot, bySeq)
		slices.SortFunc(sortedWant, bySeq)
		if !reflect.DeepEqual(sortedGot, sortedWant) {
			for i := range min(len(sortedGot), len(sortedWant)) {
				if !reflect.DeepEqual(sortedGot[i], sortedWant[i]) {
					t.Logf("got  %+v\nwant %+v", sortedGot[i], sortedWant[i])
				}
			}
			t.Fatalf("round %d (%d events, chunk %d): handed over %d records, the projection makes %d, or they differ",
				round, n, chunk, len(got), len(want))
		}
		var lastWaiting uint64
		waitingSeen := false
		for _, rec := range got {
			switch rec.Status {
			case waitqueue.Waiting:
				if rec.Alias == 0 && rec.Seq < lastWaiting {
					t.Fatalf("round %d: waiting seq %d handed over after %d", round, rec.Seq, lastWaiting)
				}
				lastWaiting, waitingSeen = rec.Seq, true
			case waitqueue.Admitted:
				if waitingSeen {
					t.Fatalf("round %d: admitted seq %d handed over after a waiting one", round, rec.Seq)
				}
			}
		}
	}
}

// The same end to end: a long line with leaves, second joins and
// admissions between them — more live shoppers than the intact probe
// asks about, so records are written while the joins are read, a few at
// a time — lost and rebuilt is the line it was.
func TestARebuildAsReadRestoresALongLine(t *testing.T) {
	l := newLiveLine(t)
	rng := rand.New(rand.NewPCG(5, 8))
	for i := range 400 {
		switch k := rng.IntN(20); {
		case k < 15 || len(l.seqs) == 0:
			l.join(fmt.Sprintf("u%d", rng.IntN(160)))
		case k < 19:
			l.leave(l.seqs[rng.IntN(len(l.seqs))])
		default:
			l.tick(5+i/20, time.Hour)
		}
	}
	want := l.state()
	if n := l.statusCount(want, waitqueue.Waiting); n <= probe {
		t.Fatalf("only %d waiting: the rebuild would read everything before writing", n)
	}
	l.flush()
	r := l.run(invocation{edit: func(c *cli) { c.rebuildChunk = 7 }}, "rebuild", "--queue", l.q)
	if r.err != nil {
		t.Fatalf("rebuild: %v\n%s%s", r.err, r.stdout, r.stderr)
	}
	sameState(t, l, l.state(), want)
}
