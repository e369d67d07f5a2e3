package main

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/nats-io/nats.go"

	"usher/shared/catalog"
	"usher/shared/event"
)

// admissionsSubject is every queue's admissions: one subscription per
// notifier, whatever the number of queues and clients. JetStream stores what
// the admitter publishes and also delivers it to plain subscribers, so a
// core subscription costs the stream nothing; what it may miss (while
// disconnected) the hub's resync and each connection's fresh read recover.
var admissionsSubject = event.AdmittedSubject(">")

// decodeAdmitted reads an admission event and checks that it names the
// queue of the subject it came on.
func decodeAdmitted(subject string, data []byte) (event.Admitted, error) {
	var a event.Admitted
	q, ok := strings.CutPrefix(subject, event.AdmittedSubject(""))
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
