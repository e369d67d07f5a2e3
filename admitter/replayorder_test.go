package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"usher/internal/bus"
	"usher/internal/event"
	"usher/internal/orders"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
)

// runStoppable runs an admitter until stop is called (or the test ends).
func (w *world) runStoppable() (stop func()) {
	w.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	env := map[string]string{
		"USHER_NATS_URL": w.natsURL, "USHER_REDIS_URL": w.redisURL,
		"USHER_ADMITTER_ADDR": "127.0.0.1:0", "USHER_LOG_LEVEL": "error",
	}
	go func() {
		defer close(done)
		runWith(ctx, func(k string) string { return env[k] }, io.Discard, hooks{})
	}()
	stop = func() { cancel(); <-done }
	w.t.Cleanup(stop)
	return stop
}

// order claims alice's token as the gateway does and publishes her order
// request; it returns the order id.
func (w *world) order(adm event.Admitted) string {
	w.t.Helper()
	ctx := context.Background()
	id := orders.ID(adm.TokenID)
	cl, err := w.line.Claim(ctx, w.queue, adm.Seq, waitqueue.Order{ID: id, TokenID: adm.TokenID, User: adm.User, SKU: "sku", Quantity: 1}, time.Minute)
	if err != nil || cl.Outcome != waitqueue.Redeemed {
		w.t.Fatalf("Claim = %+v, %v", cl, err)
	}
	body, _ := event.Marshal(id, event.TypeOrderRequested, adm.User, cl.At, event.OrderRequested{OrderID: id, TokenID: adm.TokenID,
		Queue: w.queue, User: adm.User, SKU: "sku", Quantity: 1, TokenExpiresAt: adm.ExpiresAt, RequestedAt: cl.At})
	if _, err := w.js.Publish(ctx, event.OrderRequestedSubject(w.queue), body, jetstream.WithMsgID(id)); err != nil {
		w.t.Fatal(err)
	}
	return id
}

// leave publishes alice's leave as the gateway does.
func (w *world) leave(adm event.Admitted) {
	w.t.Helper()
	id := fmt.Sprintf("left/%s/%d", w.queue, adm.Seq)
	body, _ := event.Marshal(id, event.TypeLeft, adm.User, time.Now(), event.Left{Queue: w.queue, User: adm.User, Seq: adm.Seq})
	if _, err := w.js.Publish(context.Background(), event.LeaveSubject(w.queue), body, jetstream.WithMsgID(id)); err != nil {
		w.t.Fatal(err)
	}
}

// replayEntriesAndAdmissions applies the queue's USHER_ENTRIES and
// USHER_ADMISSIONS as their followers do, with the stored times the
// streams hold: a heal in which both got ahead of the orders follower.
func (w *world) replayEntriesAndAdmissions() {
	w.t.Helper()
	ctx := context.Background()
	epoch, err := bus.StreamID(ctx, w.js, event.StreamEntries)
	if err != nil {
		w.t.Fatal(err)
	}
	aid, err := bus.StreamID(ctx, w.js, event.StreamAdmissions)
	if err != nil {
		w.t.Fatal(err)
	}
	var entries []waitqueue.EntryEvent
	each(w, event.StreamEntries, event.EnterSubject(w.queue), event.TypeJoined, func(j event.Joined, md *jetstream.MsgMetadata) {
		entries = append(entries, waitqueue.EntryEvent{StreamSeq: md.Sequence.Stream, User: j.User, At: md.Timestamp})
	})
	each(w, event.StreamEntries, event.LeaveSubject(w.queue), event.TypeLeft, func(l event.Left, md *jetstream.MsgMetadata) {
		entries = append(entries, waitqueue.EntryEvent{StreamSeq: md.Sequence.Stream, Leave: true, Entry: l.Seq, User: l.User, At: md.Timestamp})
	})
	if _, err := w.line.ApplyEntries(ctx, w.queue, epoch, 0, entries); err != nil {
		w.t.Fatal(err)
	}
	var adms []waitqueue.AdmissionEvent
	each(w, event.StreamAdmissions, event.AdmittedSubject(w.queue), event.TypeAdmitted, func(a event.Admitted, md *jetstream.MsgMetadata) {
		adms = append(adms, waitqueue.AdmissionEvent{StreamSeq: md.Sequence.Stream, Entry: a.Seq, User: a.User, TokenID: a.TokenID,
			ReadyAt: a.ReadyAt, ExpiresAt: a.ExpiresAt})
	})
	if _, err := w.line.ApplyAdmissions(ctx, w.queue, aid, 0, adms); err != nil {
		w.t.Fatal(err)
	}
}

// A line whose Redis was lost heals to hold an accepted order's token as
// that order's, slot and all, even when the entries and admissions
// followers got ahead of the orders follower and replayed her admission
// after its expiry, or her leave (made after she ordered): the orders
// follower judges her request by the time its stream stored it.
func TestTheHealHoldsAnAcceptedOrdersSlotWhateverWasReplayedFirst(t *testing.T) {
	for _, tc := range []struct {
		name string
		ttl  int
		left bool
		want waitqueue.Status // what the entries and admissions replay leaves her
	}{
		{"expired since", 2, false, waitqueue.Expired},
		{"left since", 300, true, waitqueue.Left},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, _ := newPrivateWorld(t, cfg(5, 20, tc.ttl))
			ctx := context.Background()
			alice := w.join("alice")
			stop := w.runStoppable()
			testenv.Eventually(t, 10*time.Second, func() bool { return len(w.admissions()) == 1 }, "alice admitted")
			adm := w.admissions()[0]
			testenv.Eventually(t, 10*time.Second, func() bool {
				now, err := w.line.Now(ctx)
				return err == nil && !now.Before(adm.ReadyAt)
			}, "alice READY")
			id := w.order(adm)
			if tc.left {
				w.leave(adm)
			}
			stop()

			rdb, err := waitqueue.DialURL(w.redisURL, 1)
			if err != nil {
				t.Fatal(err)
			}
			defer rdb.Close()
			if err := rdb.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, 10*time.Second, func() bool {
				now, err := w.line.Now(ctx)
				return err == nil && (now.After(adm.ExpiresAt) || tc.left)
			}, "her admission's expiry passed")
			w.replayEntriesAndAdmissions()
			if st := w.status(alice); st != tc.want {
				t.Fatalf("after the entries and admissions replay alice = %s, want %s (the case under test)", st, tc.want)
			}

			w.runStoppable()
			testenv.Eventually(t, 10*time.Second, func() error {
				e, err := w.line.Poll(ctx, w.queue, alice)
				if err != nil {
					return err
				}
				st, err := w.line.Stats(ctx, w.queue)
				if err == nil && (e.Status != waitqueue.Used || st.Active != 1) {
					err = fmt.Errorf("alice %s, %d active", e.Status, st.Active)
				}
				return err
			}, "the orders follower made alice's token her order's again, her slot held")
			r, err := w.line.Redeem(ctx, w.queue, alice, adm.TokenID, id, time.Now().Add(time.Minute))
			if err != nil || r != waitqueue.Redeemed {
				t.Fatalf("the worker's redeem after the heal = %s, %v; want redeemed", r, err)
			}
		})
	}
}

// The followers hand each leave and order request on with the time its
// stream stored it: a replay judges a request against an expiry or a leave
// by those times, which no publisher writes.
func TestTheFollowersPassOnWhenTheStreamStoredLeavesAndRequests(t *testing.T) {
	w := newWorld(t, cfg(5, 20, 300))
	ctx := context.Background()
	adm := event.Admitted{Queue: w.queue, User: "alice", Seq: 7, TokenID: waitqueue.TokenID(w.queue, "e1", 7),
		ReadyAt: time.Now(), ExpiresAt: time.Now().Add(time.Minute)}
	id := orders.ID(adm.TokenID)
	body, _ := event.Marshal(id, event.TypeOrderRequested, "alice", time.Now(), event.OrderRequested{OrderID: id, TokenID: adm.TokenID,
		Queue: w.queue, User: "alice", SKU: "sku", Quantity: 1, RequestedAt: time.Now().Add(-time.Hour)})
	if _, err := w.js.Publish(ctx, event.OrderRequestedSubject(w.queue), body); err != nil {
		t.Fatal(err)
	}
	w.leave(adm)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tt := range []struct {
		stream, subject string
		at              func(m jetstream.Msg) time.Time
	}{
		{event.StreamOrders, event.OrderRequestedSubject(w.queue), func(m jetstream.Msg) time.Time {
			return decodeOrder(log, func() string { return "e1" }, m).Stored
		}},
		{event.StreamEntries, event.LeaveSubject(w.queue), func(m jetstream.Msg) time.Time { return (&entryDecoder{log: log}).appendTo(nil, m)[0].At }},
	} {
		cons, err := w.js.OrderedConsumer(ctx, tt.stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{tt.subject}})
		if err != nil {
			t.Fatal(err)
		}
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		md, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		if got := tt.at(m); !got.Equal(md.Timestamp) {
			t.Errorf("%s: decoded stored time %v, want the stream's %v", tt.subject, got, md.Timestamp)
		}
	}
}
