package bus

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"usher/internal/event"
	"usher/internal/testenv"
)

// watchOn is a strand watch on a test clock that counts its moves.
func watchOn(now *time.Time) (*strandWatch, *int) {
	moves := 0
	return &strandWatch{
		reconnect: func() error { moves++; return nil },
		now:       func() time.Time { return *now },
		log:       slog.New(slog.DiscardHandler),
	}, &moves
}

// Publishes unanswered for three seconds move the connection once; the
// new server gets as long before another move, and the failures of
// publishes sent through the old one do not count against it.
func TestAConnectionWhosePublishesGoUnansweredMoves(t *testing.T) {
	now := time.Unix(1000, 0)
	w, moves := watchOn(&now)
	timeout := context.DeadlineExceeded
	for range 4 { // a publish a second, each given up after 500 ms
		sent := now
		now = now.Add(500 * time.Millisecond)
		w.observe(sent, timeout)
		now = now.Add(500 * time.Millisecond)
	}
	if *moves != 1 {
		t.Fatalf("moves after 3.5 s of unanswered publishes = %d, want 1", *moves)
	}
	w.observe(now.Add(-2*time.Second), timeout) // sent before the move
	now = now.Add(2 * time.Second)
	w.observe(now.Add(-500*time.Millisecond), timeout)
	if *moves != 1 {
		t.Fatalf("moves = %d 2 s into the new server, want still 1", *moves)
	}
	now = now.Add(3 * time.Second)
	w.observe(now, timeout)
	if *moves != 2 {
		t.Errorf("moves = %d after the new server too left publishes unanswered for 3 s, want 2", *moves)
	}
}

// An answer — an ack, or an error the stream answered — between
// unanswered publishes starts the count again; a shutdown's cancelled
// publish is no sign either way.
func TestAnAnswerKeepsTheConnection(t *testing.T) {
	now := time.Unix(1000, 0)
	w, moves := watchOn(&now)
	answers := []error{nil, &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence}}
	for i := range 20 {
		w.observe(now, errors.New("nats: timeout"))
		now = now.Add(time.Second)
		w.observe(now, answers[i%2])
		w.observe(now, context.Canceled)
	}
	if *moves != 0 {
		t.Errorf("moves = %d with every other publish answered, want 0", *moves)
	}
	w.observe(now, &jetstream.APIError{Code: 503, Description: "JetStream system temporarily unavailable"})
	now = now.Add(3 * time.Second)
	w.observe(now, &jetstream.APIError{Code: 503, Description: "JetStream system temporarily unavailable"})
	if *moves != 1 {
		t.Errorf("moves = %d after 3 s of JetStream unavailable, want 1", *moves)
	}
}

// A leader that stores nothing (its disk stalled, or cut off while it
// still believes it leads) answers its publishers' retries "duplicate
// message id is in process" for as long as that lasts: three seconds of
// that and nothing else move the connection, as silence would.
func TestThreeSecondsOfInProcessMove(t *testing.T) {
	now := time.Unix(1000, 0)
	w, moves := watchOn(&now)
	inProcess := &jetstream.APIError{Code: 409, ErrorCode: jsDuplicateInProcess, Description: "duplicate message id is in process"}
	for range 4 { // the same publish again every second
		w.observe(now, inProcess)
		now = now.Add(time.Second)
	}
	if *moves != 1 {
		t.Errorf("moves after 3 s answered only \"in process\" = %d, want 1", *moves)
	}
}

// A call that fails after the server has answered a later one — an
// asynchronous publish sent during an election, timed out five seconds on
// while the streams answer again — does not count against it; what is
// sent after the answer counts as before.
func TestAFailureOlderThanTheLastAnswerKeepsTheConnection(t *testing.T) {
	now := time.Unix(1000, 0)
	w, moves := watchOn(&now)
	sent := now
	w.observe(sent, context.DeadlineExceeded) // a read in the election
	now = now.Add(2 * time.Second)
	w.observe(now, nil) // the new leader answers
	now = now.Add(3 * time.Second)
	w.asyncFailed(jetstream.ErrAsyncPublishTimeout) // sent with the read, failed just now
	w.observe(sent.Add(time.Second), context.DeadlineExceeded)
	if *moves != 0 {
		t.Fatalf("moves = %d for failures of calls sent before the last answer, want 0", *moves)
	}
	w.observe(now, context.DeadlineExceeded)
	now = now.Add(3 * time.Second)
	w.observe(now, context.DeadlineExceeded)
	if *moves != 1 {
		t.Errorf("moves = %d after 3 s unanswered since the answer, want 1", *moves)
	}
}

// An asynchronous publish's timeout comes asyncAckWait after it was sent:
// one is enough to move.
func TestAnAsynchronousPublishTimedOutMoves(t *testing.T) {
	now := time.Unix(1000, 0)
	w, moves := watchOn(&now)
	var nilWatch *strandWatch
	nilWatch.observe(now, jetstream.ErrAsyncPublishTimeout) // no watch: nothing happens
	w.asyncFailed(jetstream.ErrAsyncPublishTimeout)
	if *moves != 1 {
		t.Errorf("moves after an async publish timed out = %d, want 1", *moves)
	}
}

// A stream's reads count as its publishes do: an admitter's tick reads a
// stream's head before it publishes anything.
func TestUnansweredReadsMove(t *testing.T) {
	now := time.Unix(1000, 0)
	w, moves := watchOn(&now)
	nc, err := nats.Connect(testenv.NATS(t))
	if err != nil {
		t.Fatal(err)
	}
	nc.Close() // every read fails unanswered
	st := leaderStream{name: event.StreamAdmissions, nc: nc, watch: w}
	for range 4 {
		st.GetLastMsgForSubject(context.Background(), "usher.admitted.q")
		now = now.Add(time.Second)
	}
	if *moves != 1 {
		t.Errorf("moves after 4 s of unanswered reads = %d, want 1", *moves)
	}
}
