package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"usher/internal/event"
)

// The line in Redis is a projection of the streams, and whoever can write
// Redis can write an admission into it: the gateway mints tokens from what
// Redis holds and claims orders against it. So before an order takes stock
// or money, the worker reads its token's admission back from the record,
// USHER_ADMISSIONS, which only the admitter may publish to. Redis says
// where the stream holds it (the admissions follower keeps the stream
// sequence on the entry); the stream says whether it is so.

// admissionRecord reads admissions back from USHER_ADMISSIONS.
type admissionRecord interface {
	// Admission returns the admission the stream holds at sequence seq
	// and the subject it was published on; errNotRecorded when the stream
	// holds no admission there.
	Admission(ctx context.Context, seq uint64) (event.Admitted, string, error)
}

// errNotRecorded: USHER_ADMISSIONS holds no admission at that sequence.
var errNotRecorded = errors.New("USHER_ADMISSIONS holds no admission there")

// streamAdmissions is the admissionRecord of a JetStream connection: one
// get by sequence an order, answered by the stream's leader.
type streamAdmissions struct {
	js jetstream.JetStream
	mu sync.Mutex
	st jetstream.Stream // looked up once (a stream info request)
}

func (a *streamAdmissions) Admission(ctx context.Context, seq uint64) (event.Admitted, string, error) {
	st, err := a.stream(ctx)
	if err != nil {
		return event.Admitted{}, "", err
	}
	m, err := st.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return event.Admitted{}, "", errNotRecorded
	}
	if err != nil {
		return event.Admitted{}, "", fmt.Errorf("read admission %d: %w", seq, err)
	}
	var ad event.Admitted
	if _, err := event.Unmarshal(m.Data, event.TypeAdmitted, &ad); err != nil {
		return event.Admitted{}, "", errNotRecorded
	}
	return ad, m.Subject, nil
}

func (a *streamAdmissions) stream(ctx context.Context) (jetstream.Stream, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.st == nil {
		st, err := a.js.Stream(ctx, event.StreamAdmissions)
		if err != nil {
			return nil, fmt.Errorf("stream %s: %w", event.StreamAdmissions, err)
		}
		a.st = st
	}
	return a.st, nil
}

// readyTolerance is how early an order may be claimed before the
// admission's readyAt: the claim script takes a token half a second early
// (a service's clock synced to Redis may lead it), and more would be an
// order that passed its admission's place in time.
const readyTolerance = time.Second

// admitted reports whether USHER_ADMISSIONS recorded the admission the
// request's token stands for: at aseq, where the line says the stream
// holds it (0: the line has not applied it yet), an admission of this
// token, of this user, on this queue's subject, and the order claimed
// within its life (from readyAt, give or take readyTolerance, to
// expiresAt). A Redis that points elsewhere, or at nothing, confirms
// nothing.
func (w *worker) admitted(ctx context.Context, req event.OrderRequested, aseq uint64) (bool, error) {
	if aseq == 0 {
		return false, nil
	}
	a, subject, err := w.admissions.Admission(ctx, aseq)
	switch {
	case errors.Is(err, errNotRecorded):
		return false, nil
	case err != nil:
		return false, err
	}
	at := req.RequestedAt
	return subject == event.AdmittedSubject(req.Queue) && a.Queue == req.Queue && a.TokenID == req.TokenID &&
		a.User == req.User && !at.Before(a.ReadyAt.Add(-readyTolerance)) && at.Before(a.ExpiresAt), nil
}
