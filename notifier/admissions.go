package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/nats-io/nats.go"

	"usher/internal/catalog"
	"usher/internal/event"
	"usher/internal/waitqueue"
)

// admissionsSubject is every queue's admissions: one subscription per
// notifier, whatever the number of queues and clients. USHER_ADMISSIONS
// republishes each admission it stored on its live subject (event.Live),
// so a core subscription costs the stream nothing; what it may miss (while
// disconnected) the hub's resync and each connection's fresh read recover.
// The notifier may not subscribe to the stored subjects themselves (see
// bus.Policy.Permissions).
var admissionsSubject = event.Live(event.AdmittedSubject(event.All))

// decodeAdmitted reads an admission event and checks that it names the
// queue of the subject it came on.
func decodeAdmitted(subject string, data []byte) (event.Admitted, error) {
	var a event.Admitted
	q, ok := strings.CutPrefix(subject, event.Live(event.AdmittedSubject("")))
	if !ok || !catalog.ValidName(q) {
		return a, fmt.Errorf("admission on subject %q", subject)
	}
	if _, err := event.Unmarshal(data, event.TypeAdmitted, &a); err != nil {
		return a, err
	}
	if a.Queue != q || a.TokenID == "" || a.ReadyAt.IsZero() || a.ExpiresAt.IsZero() {
		return a, errors.New("admission event for another queue or without a token")
	}
	return a, nil
}

// admissionHandler routes each admission message to the hub.
func admissionHandler(log *slog.Logger, h *hub) nats.MsgHandler {
	return func(m *nats.Msg) {
		a, err := decodeAdmitted(m.Subject, m.Data)
		if err != nil {
			log.Warn("skipping admission event", "subject", m.Subject, "err", err)
			return
		}
		h.onAdmitted(a)
	}
}

// leavesSubject is every queue's leaves: the gateway's (a shopper's
// DELETE) and the admitter's (abandoned), as USHER_ENTRIES republishes
// them. Like admissions, one core subscription per notifier; a leave it
// misses ends the stream at the next read of the line (a waiting
// shopper's resync, a token's expiry).
var leavesSubject = event.Live(event.LeaveSubject(event.All))

// decodeLeft reads a leave event and returns the entry it names, checking
// that it names the queue of the subject it came on.
func decodeLeft(subject string, data []byte) (q string, seq uint64, err error) {
	q, ok := strings.CutPrefix(subject, event.Live(event.LeaveSubject("")))
	if !ok || !catalog.ValidName(q) {
		return "", 0, fmt.Errorf("leave on subject %q", subject)
	}
	var l event.Left
	if _, err := event.Unmarshal(data, event.TypeLeft, &l); err != nil {
		return "", 0, err
	}
	if l.Queue != q || l.Seq == 0 {
		return "", 0, errors.New("leave event for another queue or without a place")
	}
	return q, l.Seq, nil
}

// leaveHandler wakes the streams of the entry a leave names: each reads
// the line (never the event) to learn how the entry ended.
func leaveHandler(log *slog.Logger, h *hub) nats.MsgHandler {
	return func(m *nats.Msg) {
		q, seq, err := decodeLeft(m.Subject, m.Data)
		if err != nil {
			log.Warn("skipping leave event", "subject", m.Subject, "err", err)
			return
		}
		h.onLeft(q, seq)
	}
}

// ordersSubject is every order event, as USHER_ORDERS republishes them;
// the notifier acts on the finished ones. Like admissions, one core
// subscription per notifier.
var ordersSubject = event.Live(event.OrderSubjects(event.All))

// decodeFinished reads an order's final event and returns the entry it used.
// ok is false for other order events (a request), which are not errors.
func decodeFinished(data []byte) (q string, seq uint64, ok bool, err error) {
	var env event.Envelope
	if err := json.Unmarshal(data, &env); err != nil {
		return "", 0, false, err
	}
	if env.Type != event.TypeOrderCompleted && env.Type != event.TypeOrderFailed {
		return "", 0, false, nil
	}
	var f event.OrderFinished
	if err := json.Unmarshal(env.Data, &f); err != nil {
		return "", 0, false, err
	}
	q, _, seq, ok = waitqueue.ParseTokenID(f.TokenID)
	if !ok || q != f.Queue || !catalog.ValidName(q) {
		return "", 0, false, fmt.Errorf("order event with token id %q", f.TokenID)
	}
	return q, seq, true, nil
}

// orderHandler ends the stream of a shopper whose token became an order:
// once the order is final there is nothing left to wait for, so the client
// hears `closed` (reason used) at once instead of at the token's expiry.
func orderHandler(log *slog.Logger, h *hub) nats.MsgHandler {
	return func(m *nats.Msg) {
		q, seq, ok, err := decodeFinished(m.Data)
		if err != nil {
			log.Warn("skipping order event", "subject", m.Subject, "err", err)
			return
		}
		if ok {
			h.onUsed(q, seq)
		}
	}
}
