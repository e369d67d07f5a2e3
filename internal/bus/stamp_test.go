package bus_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"usher/internal/bus"
	"usher/internal/event"
	"usher/internal/testenv"
)

// Every record written through bus.Open's JetStream names its stream —
// an event, a seed, a queue's configuration — and the catalog's bucket
// keeps nats.go's answers: Create refuses a key that exists, Update one
// whose revision moved on, and a deleted key may be created again.
func TestRecordsWrittenThroughOpenNameTheirStream(t *testing.T) {
	ctx := t.Context()
	nc, js, err := bus.Open(ctx, bus.Settings{URLs: []string{testenv.NATS(t)}, Replicas: 1}, "stamp")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	q := testenv.Name(t)
	expected := func(stream, subject string, seq uint64) {
		t.Helper()
		st, err := js.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		if m.Subject != subject || m.Header.Get(jetstream.ExpectedStreamHeader) != stream {
			t.Errorf("%s #%d: %s, Nats-Expected-Stream %q; want %s, %q", stream, seq, m.Subject, m.Header.Get(jetstream.ExpectedStreamHeader), subject, stream)
		}
	}

	ack, err := js.Publish(ctx, event.AdmittedSubject(q), []byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	expected(event.StreamAdmissions, event.AdmittedSubject(q), ack.Sequence)
	if _, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: event.BucketSeeds}); err != nil {
		t.Fatal(err)
	}
	if ack, err = js.Publish(ctx, event.SeedSubject(q, "c0ffee"), []byte("5eed")); err != nil {
		t.Fatal(err)
	}
	expected(event.StreamSeeds, event.SeedSubject(q, "c0ffee"), ack.Sequence)

	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: event.BucketQueues, History: 4})
	if err != nil {
		t.Fatal(err)
	}
	subject := "$KV." + event.BucketQueues + "." + q
	rev, err := kv.Create(ctx, q, []byte("1"))
	if err != nil {
		t.Fatal(err)
	}
	expected(event.StreamQueues, subject, rev)
	if _, err := kv.Create(ctx, q, []byte("again")); !errors.Is(err, jetstream.ErrKeyExists) {
		t.Errorf("Create of an existing key = %v, want %v", err, jetstream.ErrKeyExists)
	}
	if _, err := kv.Update(ctx, q, []byte("stale"), rev-1); !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		t.Errorf("Update at a stale revision = %v, want %v", err, jetstream.ErrKeyRevisionMismatch)
	}
	if rev, err = kv.Update(ctx, q, []byte("2"), rev); err != nil {
		t.Fatal(err)
	}
	expected(event.StreamQueues, subject, rev)
	if rev, err = kv.Put(ctx, q, []byte("3")); err != nil {
		t.Fatal(err)
	}
	expected(event.StreamQueues, subject, rev)
	if e, err := kv.Get(ctx, q); err != nil || string(e.Value()) != "3" || e.Revision() != rev {
		t.Fatalf("Get = %v, %v; want 3 at revision %d", e, err, rev)
	}
	if err := kv.Delete(ctx, q); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, q, []byte("anew")); err != nil {
		t.Errorf("Create of a deleted key: %v", err)
	}
}

// Two processes publishing one record under one message id at the same
// moment (a shopper's leave: the gateway that took it, the admitter
// recording what a gateway could not) both learn that the stream holds
// it, once, on a replicated stream, where the second publish can arrive
// while the first is being stored — which JetStream answers 409
// "duplicate message id is in process", neither stored nor refused.
func TestOnePublishOfAnIdBeingStoredLearnsItIsStored(t *testing.T) {
	ctx := t.Context()
	urls := testenv.NATSCluster(t)
	open := func(name string) jetstream.JetStream {
		nc, js, err := bus.Open(ctx, bus.Settings{URLs: urls, Replicas: 3}, name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return js
	}
	gateway, admitter := open("gateway"), open("admitter")
	q := testenv.Name(t)
	const leaves = 300
	var wg sync.WaitGroup
	errs := make(chan error, 2*leaves)
	for seq := range leaves {
		id := fmt.Sprintf("leave/%s/%d", q, seq)
		for _, js := range []jetstream.JetStream{gateway, admitter} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := js.Publish(ctx, event.LeaveSubject(q), []byte(id), jetstream.WithMsgID(id)); err != nil {
					errs <- fmt.Errorf("%s: %w", id, err)
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st, err := gateway.Stream(ctx, event.StreamEntries)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(event.LeaveSubject(q)))
	if err != nil {
		t.Fatal(err)
	}
	if got := info.State.Subjects[event.LeaveSubject(q)]; got != leaves {
		t.Errorf("the stream holds %d leaves of %d published twice each; want each once", got, leaves)
	}
}

// Storing tells the answer "duplicate message id is in process" from
// every other refusal, wrapped or not.
func TestStoringIsTheDuplicateInProcess(t *testing.T) {
	inProcess := &jetstream.APIError{Code: 409, ErrorCode: 10158, Description: "duplicate message id is in process"}
	if !bus.Storing(inProcess) || !bus.Storing(fmt.Errorf("publish: %w", inProcess)) {
		t.Error("409 duplicate message id is in process: not recognised")
	}
	for _, err := range []error{
		&jetstream.APIError{Code: 503, ErrorCode: 10077, Description: "maximum messages exceeded"},
		jetstream.ErrNoStreamResponse, errors.New("timeout"),
	} {
		if bus.Storing(err) {
			t.Errorf("%v taken for a duplicate in process", err)
		}
	}
}
