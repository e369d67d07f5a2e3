package bus

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Stored is one message as a stream holds it, read by a direct get.
type Stored struct {
	Seq     uint64
	Subject string
	Stored  time.Time // when the stream stored it
	Header  nats.Header
	Data    []byte
	// Pending is how many messages the request matched after this one.
	Pending uint64
}

// GetRequest is one batched direct get (JetStream's
// $JS.API.DIRECT.GET.<stream>): up to Batch messages on Subject from Seq
// (or StartTime) on, in stream order.
type GetRequest struct {
	Seq     uint64 `json:"seq,omitempty"`
	Subject string `json:"next_by_subj,omitempty"`
	// StartTime, instead of Seq: from the first message stored at or
	// after it.
	StartTime *time.Time `json:"start_time,omitempty"`
	Batch     int        `json:"batch,omitempty"`
}

// GetEnd is how a batch ended: the last sequence delivered (0: none) and
// how many matching messages are left after it.
type GetEnd struct {
	Last, Pending uint64
}

// Get sends req to stream and calls fn with each message of the answer, in
// the order the stream sends them (stream order), then returns how the
// batch ended. A request matching nothing calls fn never and returns a
// zero GetEnd. The stream must allow direct gets (every usher stream and
// bucket does): no consumer is created, so a role that may not create one
// reads with nothing but $JS.API.DIRECT.GET.<stream> and its inbox.
func Get(ctx context.Context, nc *nats.Conn, stream string, req GetRequest, fn func(Stored) error) (GetEnd, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return GetEnd{}, err
	}
	// The answer is at most Batch messages and its end: a channel that
	// holds it all never drops any.
	ch := make(chan *nats.Msg, req.Batch+2)
	inbox := nc.NewRespInbox()
	sub, err := nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return GetEnd{}, fmt.Errorf("direct get %s: %w", stream, err)
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest("$JS.API.DIRECT.GET."+stream, inbox, body); err != nil {
		return GetEnd{}, fmt.Errorf("direct get %s: %w", stream, err)
	}
	// Each message of the answer within a few seconds of the one before:
	// the stream sends a batch at once.
	const silence = 5 * time.Second
	t := time.NewTimer(silence)
	defer t.Stop()
	var end GetEnd
	for {
		var m *nats.Msg
		select {
		case m = <-ch:
		case <-ctx.Done():
			return end, fmt.Errorf("direct get %s: %w", stream, ctx.Err())
		case <-t.C:
			return end, fmt.Errorf("direct get %s: %w", stream, nats.ErrTimeout)
		}
		t.Reset(silence)
		if status := m.Header.Get("Status"); status != "" {
			switch status {
			case "204": // end of the batch
				end.Pending = headerUint(m.Header, "Nats-Num-Pending")
				return end, nil
			case "404": // nothing matched
				return end, nil
			case "503":
				return end, fmt.Errorf("direct get %s: %w", stream, nats.ErrNoResponders)
			default:
				return end, fmt.Errorf("direct get %s: %s %s", stream, status, m.Header.Get("Description"))
			}
		}
		seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
		if err != nil {
			return end, fmt.Errorf("direct get %s: a message without its sequence", stream)
		}
		stored, _ := time.Parse(time.RFC3339Nano, m.Header.Get(jetstream.TimeStampHeaer))
		err = fn(Stored{Seq: seq, Subject: m.Header.Get(jetstream.SubjectHeader), Stored: stored, Header: m.Header,
			Data: m.Data, Pending: headerUint(m.Header, "Nats-Num-Pending")})
		if err != nil {
			return end, err
		}
		end.Last = seq
		if req.Batch == 0 {
			return end, nil // a single message: no end of batch follows
		}
	}
}

func headerUint(h nats.Header, key string) uint64 {
	n, _ := strconv.ParseUint(h.Get(key), 10, 64)
	return n
}
