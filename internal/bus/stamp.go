package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"usher/internal/event"
)

// stamped is the JetStream context Open returns: a publish on a subject
// one of usher's streams stores carries Nats-Expected-Stream, naming that
// stream. The stream checks it on every message it is about to store, and
// any other stream refuses the message: a record usher wrote, delivered
// into another stream by a push consumer (nats-server lets whoever
// creates one name any deliver subject, see Policy.Permissions), is never
// stored there.
//
// It also tells its watch (nil: none) how each synchronous publish and
// each one-message read through a stream handle it gives went; the
// JetStream it wraps tells it of the asynchronous publishes (see watched).
type stamped struct {
	jetstream.JetStream
	streams []storedSubject
	watch   *strandWatch
}

// storedSubject is a subject pattern and the stream that stores it.
type storedSubject struct{ pattern, stream string }

func newStamped(js jetstream.JetStream, w *strandWatch) stamped {
	s := stamped{JetStream: js, watch: w}
	for _, cfg := range Streams() {
		for _, p := range cfg.Subjects {
			s.streams = append(s.streams, storedSubject{p, cfg.Name})
		}
	}
	s.streams = append(s.streams,
		storedSubject{event.QueueConfigSubjects, event.StreamQueues},
		storedSubject{event.SeedSubjects, event.StreamSeeds})
	return s
}

// Publish implements jetstream.Publisher.
func (s stamped) Publish(ctx context.Context, subject string, data []byte, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	return s.settled(ctx, func() (*jetstream.PubAck, error) {
		return s.JetStream.Publish(ctx, subject, data, s.expect(subject, opts)...)
	})
}

// PublishMsg implements jetstream.Publisher.
func (s stamped) PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	return s.settled(ctx, func() (*jetstream.PubAck, error) {
		return s.JetStream.PublishMsg(ctx, msg, s.expect(msg.Subject, opts)...)
	})
}

// settled publishes, and publishes again while the stream answers that a
// message of the same id is being stored (Storing): its answer then, a
// duplicate's acknowledgement or the store's own failure, is the one a
// publisher needs. Two processes record some events under one id on
// purpose (a shopper's leave: the gateway that took it and the admitter
// that records what a gateway could not); the second must not read the
// first one's store in flight as its own failure.
func (s stamped) settled(ctx context.Context, publish func() (*jetstream.PubAck, error)) (*jetstream.PubAck, error) {
	wait := storingWait
	for attempt := 1; ; attempt++ {
		ack, err := watchedCall(s.watch, publish)
		if !Storing(err) || attempt == storingAttempts {
			return ack, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ack, err
		case <-t.C:
		}
		wait *= 2
	}
}

// A replicated stream stores a message in a millisecond or two: the waits
// between a publish answered Storing and the next, doubling, add up to
// about a quarter of a second.
const (
	storingWait     = 2 * time.Millisecond
	storingAttempts = 8
)

// Storing reports whether a publish was refused because the stream is
// storing a message with the same id at this moment
// (JSStreamDuplicateMessageConflict, 409 "duplicate message id is in
// process", on a replicated stream): the publish neither stored nor
// failed, and the same publish again learns which.
func Storing(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && api.ErrorCode == jsDuplicateInProcess
}

// jsDuplicateInProcess is JetStream's error code for a publish whose
// message id is being stored by another publish.
const jsDuplicateInProcess jetstream.ErrorCode = 10158

// Stream returns the named stream's handle, whose one-message reads (the
// last of a subject, one by sequence) the stream's leader answers (see
// leaderStream) and which tell the watch how they went: an admitter's
// tick reads a stream's head before it publishes, and through a cut-off
// server those reads are what goes unanswered first.
func (s stamped) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	st, err := watchedCall(s.watch, func() (jetstream.Stream, error) { return s.JetStream.Stream(ctx, name) })
	if err != nil {
		return nil, err
	}
	return leaderStream{Stream: st, name: name, nc: s.Conn(), watch: s.watch}, nil
}

// PublishAsync implements jetstream.Publisher.
func (s stamped) PublishAsync(subject string, data []byte, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	return s.JetStream.PublishAsync(subject, data, s.expect(subject, opts)...)
}

// PublishMsgAsync implements jetstream.Publisher.
func (s stamped) PublishMsgAsync(msg *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	return s.JetStream.PublishMsgAsync(msg, s.expect(msg.Subject, opts)...)
}

// expect adds the expected stream to a publish on a stored subject.
func (s stamped) expect(subject string, opts []jetstream.PublishOpt) []jetstream.PublishOpt {
	for _, st := range s.streams {
		if subjectMatches(st.pattern, subject) {
			return append(opts[:len(opts):len(opts)], jetstream.WithExpectStream(st.stream))
		}
	}
	return opts
}

// subjectMatches reports whether the literal subject matches pattern, as
// NATS matches them: "*" is one token, a last ">" one or more.
func subjectMatches(pattern, subject string) bool {
	for {
		ptok, prest, pmore := strings.Cut(pattern, ".")
		if ptok == ">" {
			return subject != ""
		}
		stok, srest, smore := strings.Cut(subject, ".")
		if ptok != "*" && ptok != stok {
			return false
		}
		if !pmore || !smore {
			return pmore == smore
		}
		pattern, subject = prest, srest
	}
}

// The catalog's and the seeds' buckets are written through nats.go's KV,
// which takes no publish options: stamped hands out buckets whose writes
// go through its own publishes.

// KeyValue implements jetstream.KeyValueManager.
func (s stamped) KeyValue(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	return s.bucket(s.JetStream.KeyValue(ctx, bucket))
}

// CreateKeyValue implements jetstream.KeyValueManager.
func (s stamped) CreateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	return s.bucket(s.JetStream.CreateKeyValue(ctx, cfg))
}

// UpdateKeyValue implements jetstream.KeyValueManager.
func (s stamped) UpdateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	return s.bucket(s.JetStream.UpdateKeyValue(ctx, cfg))
}

// CreateOrUpdateKeyValue implements jetstream.KeyValueManager.
func (s stamped) CreateOrUpdateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	return s.bucket(s.JetStream.CreateOrUpdateKeyValue(ctx, cfg))
}

func (s stamped) bucket(kv jetstream.KeyValue, err error) (jetstream.KeyValue, error) {
	if err != nil {
		return nil, err
	}
	return stampedKV{KeyValue: kv, js: s}, nil
}

// stampedKV is a bucket whose Put, Create and Update — the writes usher
// makes — carry the expected stream like every other publish of stamped.
type stampedKV struct {
	jetstream.KeyValue
	js stamped
}

// Put implements jetstream.KeyValue.
func (kv stampedKV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	ack, err := kv.js.PublishMsg(ctx, &nats.Msg{Subject: kv.subject(key), Data: value})
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// Update implements jetstream.KeyValue: a compare-and-set on the key's
// last revision.
func (kv stampedKV) Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error) {
	ack, err := kv.js.PublishMsg(ctx, &nats.Msg{Subject: kv.subject(key), Data: value},
		jetstream.WithExpectLastSequencePerSubject(revision))
	if wrongLastSequence(err) {
		return 0, fmt.Errorf("%w: %w", err, jetstream.ErrKeyRevisionMismatch)
	}
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// Create implements jetstream.KeyValue: an Update of a key that has no
// revision yet. Over a deleted key (which usher never makes: a retired
// queue keeps a tombstone value) and with a TTL it is nats.go's own.
func (kv stampedKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	if len(opts) > 0 {
		return kv.KeyValue.Create(ctx, key, value, opts...)
	}
	rev, err := kv.Update(ctx, key, value, 0)
	if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return rev, err
	}
	if _, gerr := kv.KeyValue.Get(ctx, key); errors.Is(gerr, jetstream.ErrKeyNotFound) {
		return kv.KeyValue.Create(ctx, key, value) // the last revision is a delete marker
	}
	return 0, fmt.Errorf("%w: %w", err, jetstream.ErrKeyExists)
}

func (kv stampedKV) subject(key string) string { return "$KV." + kv.Bucket() + "." + key }

// wrongLastSequence reports whether err is the stream's refusal of a
// compare-and-set (as a replicated stream says it too).
func wrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
