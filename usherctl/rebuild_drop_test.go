package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"usher/internal/lottery"
	"usher/internal/waitqueue"
)

// sameState reports every difference between what shoppers and ops see of
// the queue after a rebuild and before the loss.
func sameState(t *testing.T, l *liveLine, got, want state) {
	t.Helper()
	for _, seq := range l.seqs {
		if !reflect.DeepEqual(got.entries[seq], want.entries[seq]) {
			t.Errorf("seq %d (%s) after rebuild = %+v, want %+v", seq, l.owner[seq], got.entries[seq], want.entries[seq])
		}
	}
	for u, w := range want.lookups {
		if got.lookups[u] != w {
			t.Errorf("Lookup(%s) after rebuild = %s, want %s", u, got.lookups[u], w)
		}
	}
	if !reflect.DeepEqual(got.stats, want.stats) {
		t.Errorf("Stats after rebuild = %+v, want %+v", got.stats, want.stats)
	}
}

// settle turns the drawn from pre-queued into waiting, as the admitter
// does a batch a tick after the draw.
func (l *dropLine) settle() {
	l.t.Helper()
	for {
		left, err := l.store.SettleDraw(context.Background(), l.q)
		if err != nil {
			l.t.Fatal(err)
		}
		if left == 0 {
			return
		}
	}
}

func TestRebuildBeforeTheDrawPutsThePreQueueBackForTheLottery(t *testing.T) {
	l := newDropLine(t)
	vip := l.joinAs("vip", waitqueue.Priority, 0) // allowed past the line before the opening
	ctx := context.Background()
	want := l.state()
	// The order the draw would give without the loss.
	pre, _, _, err := l.store.PreQueue(ctx, l.q)
	if err != nil {
		t.Fatal(err)
	}
	var entries []lottery.Entry
	for _, e := range pre {
		entries = append(entries, lottery.Entry{Seq: e.Seq, User: e.User})
	}
	wantOrder := lottery.Sorted(l.seed, entries)
	if len(wantOrder) != 7 || want.stats.PreQueue != 7 || want.stats.Waiting != 1 || want.stats.Drawn {
		t.Fatalf("history: pre-queue %v, stats %+v; want 7 pre-queued, vip waiting, no draw", wantOrder, want.stats)
	}

	l.flush()
	r := l.usherctl("rebuild", "--queue", l.q, "--dry-run")
	for _, w := range []string{
		"would restore up to 11 records: waiting=1 admitted=0 expired=0 used=0 left=2 alias=1 pre=7",
		"no draw recorded: 7 pre-queued shoppers restored into the pre-queue",
	} {
		if r.err != nil || !strings.Contains(r.stdout, w) {
			t.Fatalf("rebuild --dry-run = %v\n%s\nwant %q", r.err, r.stdout, w)
		}
	}
	r = l.usherctl("rebuild", "--queue", l.q)
	if r.err != nil || !strings.Contains(r.stdout, "restored 11 records: waiting=1 admitted=0 expired=0 used=0 left=2 alias=1 pre=7") {
		t.Fatalf("rebuild = %v\n%s%s", r.err, r.stdout, r.stderr)
	}
	sameState(t, l.liveLine, l.state(), want)

	// Nobody pre-queued can be admitted before the draw, not even by a
	// tick that does not wait for one: they have no place in line. The
	// join allowed past the line is.
	l.tick(100, 5*time.Minute)
	after := l.state()
	for _, e := range wantOrder {
		if got := after.entries[e.Seq]; got.Status != waitqueue.PreQueued || got.Position != 0 {
			t.Errorf("seq %d (%s) after a tick = %+v, want pre-queued with no place", e.Seq, e.User, got)
		}
	}
	if got := after.entries[vip]; got.Status != waitqueue.Admitted {
		t.Errorf("vip after a tick = %+v, want admitted", got)
	}

	// The admitter's draw at the opening gives the order it would have
	// given without the loss.
	l.draw(hex.EncodeToString(l.seed), func(pre []lottery.Entry) []lottery.Entry { return lottery.Sorted(l.seed, pre) })
	l.settle()
	if !reflect.DeepEqual(l.placed, wantOrder) {
		t.Fatalf("drawn after rebuild = %v, want %v", l.placed, wantOrder)
	}
	d, err := l.store.Drawing(ctx, l.q)
	if err != nil || d.Digest != lottery.Digest(wantOrder) || d.Entries != 7 {
		t.Fatalf("Drawing = %+v, %v; want 7 drawn, digest %s", d, err, lottery.Digest(wantOrder))
	}
	drawn := l.state()
	for i, e := range wantOrder {
		if got := drawn.entries[e.Seq]; got.Status != waitqueue.Waiting || got.Position != int64(i+1) {
			t.Errorf("lottery place %d, seq %d (%s), after the draw = %+v, want waiting at %d", i+1, e.Seq, e.User, got, i+1)
		}
	}
}

func TestRebuildAfterTheDrawPutsTheDrawnBackInTheirLotteryPlaces(t *testing.T) {
	l := newDropLine(t)
	ctx := context.Background()
	l.draw(hex.EncodeToString(l.seed), func(pre []lottery.Entry) []lottery.Entry { return lottery.Sorted(l.seed, pre) })
	l.settle()
	// After the draw: a join still marked pre-queue (published before the
	// opening, applied after the draw: FIFO), a FIFO join, a join allowed
	// past the line; one of the drawn leaves; a tick admits two (the
	// priority join and lottery place 1); then another priority join and
	// another FIFO one.
	late := l.joinAs("late", waitqueue.PreQueue, 0)
	f01 := l.joinAs("f01", waitqueue.InLine, 0)
	l.joinAs("vip", waitqueue.Priority, 0)
	l.leftAfterDraw = l.placed[3].Seq
	l.leave(l.leftAfterDraw)
	l.tick(2, 5*time.Minute)
	vip2 := l.joinAs("vip2", waitqueue.Priority, 0)
	f02 := l.joinAs("f02", waitqueue.InLine, 0)
	want := l.state()
	wantDraw, err := l.store.Drawing(ctx, l.q)
	if err != nil {
		t.Fatal(err)
	}
	// The line before the loss: vip2, the drawn left in lottery order,
	// then late, f01, f02 by sequence.
	line := []uint64{vip2}
	for _, e := range l.placed[1:] {
		if e.Seq != l.leftAfterDraw {
			line = append(line, e.Seq)
		}
	}
	line = append(line, late, f01, f02)
	for i, seq := range line {
		if e := want.entries[seq]; e.Status != waitqueue.Waiting || e.Position != int64(i+1) {
			t.Fatalf("history: %s (seq %d) = %+v, want waiting at %d", l.owner[seq], seq, e, i+1)
		}
	}
	if e := want.entries[l.placed[0].Seq]; e.Status != waitqueue.Admitted {
		t.Fatalf("history: lottery place 1 = %+v, want admitted", e)
	}

	l.flush()
	r := l.usherctl("rebuild", "--queue", l.q)
	if r.err != nil {
		t.Fatalf("rebuild: %v\n%s%s", r.err, r.stdout, r.stderr)
	}
	for _, w := range []string{
		fmt.Sprintf("restored the draw's record (drawn 7, drawCursor %d, drawDigest %s)", wantDraw.Cursor, wantDraw.Digest),
		fmt.Sprintf("drawn at entries cursor %d", wantDraw.Cursor),
		"5 of the 7 drawn still waiting, restored in their lottery places",
	} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("rebuild printed\n%s\nwant %q", r.stdout, w)
		}
	}
	if strings.Contains(r.stdout, "warning") {
		t.Errorf("rebuild warned:\n%s", r.stdout)
	}
	sameState(t, l.liveLine, l.state(), want)
	if got, err := l.store.Drawing(ctx, l.q); err != nil || got != wantDraw {
		t.Errorf("Drawing after rebuild = %+v, %v; want %+v", got, err, wantDraw)
	}
	// The admitter does not draw again: the pre-queue is empty and the
	// draw recorded; a tick admits the head of the same line.
	if pre, drawn, _, err := l.store.PreQueue(ctx, l.q); err != nil || !drawn || len(pre) != 0 {
		t.Errorf("PreQueue after rebuild = %v, drawn %v, %v; want none, drawn", pre, drawn, err)
	}
	l.tick(5, 5*time.Minute) // two held: three more
	after := l.state()
	for i, seq := range line {
		wantSt := waitqueue.Waiting
		if i < 3 {
			wantSt = waitqueue.Admitted
		}
		if e := after.entries[seq]; e.Status != wantSt {
			t.Errorf("%s (seq %d, place %d) after a tick = %s, want %s", l.owner[seq], seq, i+1, e.Status, wantSt)
		}
	}
}

func TestRebuildRefusesADrawItCannotRecompute(t *testing.T) {
	l := newDropLine(t)
	l.draw("not a seed", func(pre []lottery.Entry) []lottery.Entry { return lottery.Sorted(l.seed, pre) })
	l.flush()
	r := l.usherctl("rebuild", "--queue", l.q)
	if r.code != exitFailure || !strings.Contains(r.err.Error(), "the lottery order cannot be recomputed") {
		t.Fatalf("rebuild = exit %d, %v; want exit 1, the order cannot be recomputed", r.code, r.err)
	}
}
