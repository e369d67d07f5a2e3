package bus

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// leaderStream is a stream handle whose one-message reads (the last of a
// subject, one by sequence) the stream's leader answers, through the
// JetStream API, rather than whichever replica a direct get reaches; each
// read also tells the watch (nil: none) how it went.
//
// A direct get goes to a queue group every current replica joins, and
// nats-server hands a client's request to any member of it, on its own
// server or another. Two things follow. A follower answers with what it
// holds, which may be behind the leader: a head read just after a publish
// may miss it. And a replica cut off from the others by a partition stays
// in the group for as long as the routes to it are not yet declared dead
// — the requests sent its way are never answered, about one in three on
// three nodes, for the whole partition. The API's message get is answered
// by the leader alone: after the election, by one on the connected side.
type leaderStream struct {
	jetstream.Stream
	name  string
	nc    *nats.Conn
	watch *strandWatch
}

// leaderWait bounds a read whose context has no deadline, as JetStream's
// own requests are bounded.
const leaderWait = 5 * time.Second

// msgGet is the API's message get request.
type msgGet struct {
	Seq     uint64 `json:"seq,omitempty"`
	LastFor string `json:"last_by_subj,omitempty"`
}

// msgGetAnswer is its answer: the message or the stream's error.
type msgGetAnswer struct {
	Error   *jetstream.APIError `json:"error,omitempty"`
	Message *struct {
		Subject string    `json:"subject"`
		Seq     uint64    `json:"seq"`
		Header  []byte    `json:"hdrs,omitempty"`
		Data    []byte    `json:"data,omitempty"`
		Time    time.Time `json:"time"`
	} `json:"message,omitempty"`
}

// GetLastMsgForSubject returns the last message the stream holds on
// subject, or jetstream.ErrMsgNotFound.
func (l leaderStream) GetLastMsgForSubject(ctx context.Context, subject string) (*jetstream.RawStreamMsg, error) {
	return watchedCall(l.watch, func() (*jetstream.RawStreamMsg, error) { return l.get(ctx, msgGet{LastFor: subject}) })
}

// GetMsg returns the message at seq. Options (next by subject, …) need
// the request JetStream builds itself, so a read with any goes as
// JetStream sends it.
func (l leaderStream) GetMsg(ctx context.Context, seq uint64, opts ...jetstream.GetMsgOpt) (*jetstream.RawStreamMsg, error) {
	if len(opts) > 0 {
		return watchedCall(l.watch, func() (*jetstream.RawStreamMsg, error) { return l.Stream.GetMsg(ctx, seq, opts...) })
	}
	return watchedCall(l.watch, func() (*jetstream.RawStreamMsg, error) { return l.get(ctx, msgGet{Seq: seq}) })
}

func (l leaderStream) get(ctx context.Context, req msgGet) (*jetstream.RawStreamMsg, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, leaderWait)
		defer cancel()
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	m, err := l.nc.RequestWithContext(ctx, jetstream.DefaultAPIPrefix+"STREAM.MSG.GET."+l.name, body)
	if err != nil {
		return nil, err
	}
	var a msgGetAnswer
	if err := json.Unmarshal(m.Data, &a); err != nil {
		return nil, fmt.Errorf("message get %s: %w", l.name, err)
	}
	switch {
	case a.Error != nil && a.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, jetstream.ErrMsgNotFound
	case a.Error != nil:
		return nil, a.Error
	case a.Message == nil:
		return nil, jetstream.ErrInvalidJetStreamResponse
	}
	msg := &jetstream.RawStreamMsg{Subject: a.Message.Subject, Sequence: a.Message.Seq, Data: a.Message.Data, Time: a.Message.Time}
	if len(a.Message.Header) > 0 {
		if msg.Header, err = nats.DecodeHeadersMsg(a.Message.Header); err != nil {
			return nil, fmt.Errorf("message get %s: %w", l.name, err)
		}
	}
	return msg, nil
}
