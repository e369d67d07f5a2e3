package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"usher/shared/catalog"
	"usher/shared/event"
	"usher/shared/testenv"
	"usher/shared/waitqueue"
)

func TestAuditPassesAFairHistoryAndCatchesBrokenOnes(t *testing.T) {
	w := newWorld(t)
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	ms := func(n int) time.Time { return base.Add(time.Duration(n) * time.Millisecond) }
	tests := []struct {
		name string
		// history publishes the queue's events; seqs are its joins.
		history    func(q string, seqs []uint64)
		wantCode   int
		wantReport []string
	}{
		{
			name: "clean: FIFO, slots freed by expiry, order and leave before refills",
			history: func(q string, s []uint64) {
				w.admit(q, s[0], "u0", ms(0), ms(1000))
				w.admit(q, s[1], "u1", ms(10), ms(5000))
				w.order(event.TypeOrderRequested, q, waitqueue.TokenID(q, w.epoch, s[1]), "o1", ms(400))
				w.order(event.TypeOrderCompleted, q, waitqueue.TokenID(q, w.epoch, s[1]), "o1", ms(500))
				w.admit(q, s[2], "u2", ms(600), ms(5000))  // after u1's order freed its slot
				w.admit(q, s[3], "u3", ms(1000), ms(5000)) // when u0's token expired
			},
			wantCode:   exitOK,
			wantReport: []string{"ok       admission in join order", "ok       slots held <= targetActive", "verdict: CLEAN"},
		},
		{
			name: "events fed out of join order",
			history: func(q string, s []uint64) {
				w.admit(q, s[1], "u1", ms(0), ms(1000))
				w.admit(q, s[0], "u0", ms(0), ms(1000))
			},
			wantCode:   exitFailure,
			wantReport: []string{"VIOLATED admission in join order", "admitted after seq", "verdict: VIOLATIONS"},
		},
		{
			name: "a waiting shopper passed over",
			history: func(q string, s []uint64) {
				w.admit(q, s[1], "u1", ms(0), ms(1000))
			},
			wantCode:   exitFailure,
			wantReport: []string{"was waiting when seq", "verdict: VIOLATIONS"},
		},
		{
			name: "an over-admission",
			history: func(q string, s []uint64) {
				w.admit(q, s[0], "u0", ms(0), ms(5000))
				w.admit(q, s[1], "u1", ms(10), ms(5000))
				w.admit(q, s[2], "u2", ms(20), ms(5000)) // a third slot with targetActive 2
			},
			wantCode:   exitFailure,
			wantReport: []string{"VIOLATED slots held <= targetActive: 1 exception", "3 slots held, targetActive 2"},
		},
		{
			name: "a token redeemed twice",
			history: func(q string, s []uint64) {
				tok := waitqueue.TokenID(q, w.epoch, s[0])
				w.admit(q, s[0], "u0", ms(0), ms(5000))
				w.order(event.TypeOrderRequested, q, tok, "o1", ms(100))
				w.order(event.TypeOrderRequested, q, tok, "o1", ms(101)) // a double submit: the same order
				w.order(event.TypeOrderCompleted, q, tok, "o2", ms(200))
			},
			wantCode:   exitFailure,
			wantReport: []string{"VIOLATED no token redeemed twice", "redeemed by 2 orders: o1, o2"},
		},
		{
			name: "admitted twice for one ticket",
			history: func(q string, s []uint64) {
				w.admit(q, s[0], "u0", ms(0), ms(1000))
				w.publish(event.AdmittedSubject(q), "again", event.TypeAdmitted, ms(2000), event.Admitted{
					Queue: q, User: "u0", Seq: s[0], TokenID: "again", ReadyAt: ms(2000), ExpiresAt: ms(3000)})
			},
			wantCode:   exitFailure,
			wantReport: []string{"VIOLATED nobody admitted twice"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := testenv.Name(t)
			w.configured(q, 2, 0)
			var seqs []uint64
			for i := range 4 {
				seqs = append(seqs, w.join(q, fmt.Sprintf("u%d", i)))
			}
			tt.history(q, seqs)
			r := w.usherctl("audit", "--queue", q)
			if r.code != tt.wantCode {
				t.Errorf("audit exit = %d (%v), want %d\n%s", r.code, r.err, tt.wantCode, r.stdout)
			}
			for _, want := range tt.wantReport {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("audit printed\n%s\nwant it to contain %q", r.stdout, want)
				}
			}
		})
	}
}

func TestAuditSaysWhereTargetActiveCameFrom(t *testing.T) {
	w := newWorld(t)
	queues, err := catalog.Open(context.Background(), w.js, 1)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		configure func(q string)
		want      string
	}{
		{"config history", func(q string) { w.configured(q, 5, 0); w.configured(q, 7, 5) },
			"targetActive taken from the USHER_OPS config_changed history (2 changes)"},
		{"current catalog", func(q string) {
			cfg := catalog.Defaults(q)
			if _, err := queues.Put(context.Background(), cfg); err != nil {
				t.Fatal(err)
			}
		}, "targetActive taken from the current catalog (no config_changed history for this queue)"},
		{"nothing known", func(string) {}, "SKIPPED  slots held <= targetActive: targetActive unknown"},
	}
	for _, tt := range tests {
		q := testenv.Name(t)
		tt.configure(q)
		w.join(q, "alice")
		r := w.usherctl("audit", "--queue", q)
		if r.err != nil || !strings.Contains(r.stdout, tt.want) {
			t.Errorf("%s: audit = %v\n%s\nwant %q", tt.name, r.err, r.stdout, tt.want)
		}
	}
}

func TestAHistoryMadeByTheLiveScriptsAuditsClean(t *testing.T) {
	l := newLiveLine(t)
	l.configured(l.q, 6, 3) // before it: 3 (the first tick, an hour ago); after: 6
	l.history()             // admits 3, then 6 at once, with leaves, an order and an alias
	r := l.usherctl("audit", "--queue", l.q)
	if r.err != nil || !strings.Contains(r.stdout, "verdict: CLEAN") {
		t.Fatalf("audit = %v\n%s\nwant a clean verdict", r.err, r.stdout)
	}
}

func TestAuditCatchesAnOverAdmissionByTheLiveScripts(t *testing.T) {
	l := newLiveLine(t)
	l.configured(l.q, 2, 0)
	for i := range 4 {
		l.join(fmt.Sprintf("u%d", i))
	}
	l.tick(3, time.Minute) // an admitter with a stale targetActive of 3
	r := l.usherctl("audit", "--queue", l.q)
	if r.code != exitFailure || !strings.Contains(r.stdout, "3 slots held, targetActive 2") {
		t.Fatalf("audit = exit %d\n%s\nwant the third slot reported", r.code, r.stdout)
	}
}
