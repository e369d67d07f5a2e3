package bus

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// strandedAfter is how long every call through a connection may go
// unanswered before the connection moves to another server. A stream's
// election takes 4 to 9 s, during which no server would do better, so a
// move every few seconds costs a reconnect and nothing more.
const strandedAfter = 3 * time.Second

// asyncAckWait is how long an asynchronous publish waits for its ack
// before it counts as unanswered (its publisher may have stopped waiting
// sooner).
const asyncAckWait = 5 * time.Second

// strandWatch moves a connection whose server stores nothing to another
// server. A NATS server cut off from the rest of its cluster keeps its
// clients: it is alive and answers pings, so nats.go stays, but nothing
// it forwards reaches a stream's leader — or it still believes it leads
// one and can store nothing without a quorum — so every publish and read
// through it goes unanswered for as long as the cut lasts, long after the
// others elected new leaders. The watch reads the outcome of every
// publish and of every read through a stream handle (Stream); once none
// sent in strandedAfter was answered, it asks nats.go to reconnect,
// which takes the next server of the cluster's pool, and gives the new
// one as long before it moves again.
type strandWatch struct {
	reconnect func() error
	now       func() time.Time
	log       *slog.Logger

	mu       sync.Mutex
	since    time.Time // when the first unanswered call since an answer was sent; zero: none
	answered time.Time // when the last answer came
	moved    time.Time // the last move
}

func newStrandWatch(nc *nats.Conn, log *slog.Logger) *strandWatch {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &strandWatch{reconnect: func() error {
		// One server (make run, a test's) is no cluster to move in:
		// reconnecting to it again would only drop what is in flight.
		if len(nc.Servers()) < 2 {
			return errOneServer
		}
		return nc.ForceReconnect()
	}, now: time.Now, log: log}
}

// observe counts the outcome of a publish or read sent at sent: err is
// nil for an answer.
func (w *strandWatch) observe(sent time.Time, err error) {
	if w == nil || errors.Is(err, context.Canceled) {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	if !unanswered(err) {
		w.since, w.answered = time.Time{}, now
		return
	}
	// A call sent through the server left already, or before the server's
	// last answer, says nothing of the server now: an asynchronous
	// publish's timeout comes five seconds after it was sent, and one sent
	// during an election, failing after the streams answer again, would
	// otherwise move a connection that works.
	if sent.Before(w.moved) || sent.Before(w.answered) {
		return
	}
	if w.since.IsZero() || sent.Before(w.since) {
		w.since = sent
	}
	if now.Sub(w.since) < strandedAfter {
		return
	}
	w.since, w.moved = time.Time{}, now
	switch moveErr := w.reconnect(); {
	case errors.Is(moveErr, errOneServer):
	case moveErr != nil:
		w.log.Warn("nothing answered through this NATS server; could not move to another", "for", strandedAfter, "err", err, "move", moveErr)
	default:
		w.log.Warn("nothing answered through this NATS server; moving to another", "for", strandedAfter, "err", err)
	}
}

// errOneServer is a move's answer when the connection knows no other
// server.
var errOneServer = errors.New("no other NATS server to move to")

// unanswered reports whether a call's error says no stream answered it:
// no ack in time, no responder, the connection down, JetStream
// unavailable — or "in process" (see Storing): the stream took a message
// with that id and has not stored it, which from a leader that stores
// nothing (its disk stalled, or cut off while it still believes it leads,
// its clients' publishes taken by it rather than by the leader elected
// without it) is the only answer their retries get for as long as that
// lasts. An error the stream answered (a duplicate stored, a wrong
// expected stream, no such message) is an answer.
func unanswered(err error) bool {
	if err == nil {
		return false
	}
	var api *jetstream.APIError
	if errors.As(err, &api) {
		return api.Code == 503 || api.ErrorCode == jsDuplicateInProcess // 503: no leader to answer
	}
	return true
}

// watchedCall makes a call through w's connection and tells w how it went
// (with no watch, only makes it).
func watchedCall[T any](w *strandWatch, call func() (T, error)) (T, error) {
	if w == nil {
		return call()
	}
	sent := w.now()
	v, err := call()
	w.observe(sent, err)
	return v, err
}

// watched is the JetStream options that feed w with every asynchronous
// publish's outcome.
func watched(w *strandWatch) []jetstream.JetStreamOpt {
	return []jetstream.JetStreamOpt{
		jetstream.WithPublishAsyncAckHandler(func(jetstream.JetStream, *nats.Msg, *jetstream.PubAck) { w.observe(time.Time{}, nil) }),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, _ *nats.Msg, err error) { w.asyncFailed(err) }),
		jetstream.WithPublishAsyncTimeout(asyncAckWait),
	}
}

// asyncFailed counts an asynchronous publish's error: one that timed out
// was sent asyncAckWait ago.
func (w *strandWatch) asyncFailed(err error) {
	sent := w.now()
	if errors.Is(err, jetstream.ErrAsyncPublishTimeout) {
		sent = sent.Add(-asyncAckWait)
	}
	w.observe(sent, err)
}
