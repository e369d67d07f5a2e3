package bus_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"usher/internal/bus"
	"usher/internal/event"
	"usher/internal/testenv"
)

// A stream handle from bus.Open reads one message — the last of a
// subject, one by sequence — through the API only the stream's leader
// answers, never by a direct get that any replica may answer, and hands
// back what the stream stored: subject, sequence, headers, data.
func TestOneMessageReadsAskTheStreamsLeader(t *testing.T) {
	ctx := t.Context()
	url := testenv.NATS(t)
	nc, js, err := bus.Open(ctx, bus.Settings{URLs: []string{url}, Replicas: 1}, "leader")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	spy, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer spy.Close()
	asked := make(chan string, 16)
	for _, s := range []string{"$JS.API.DIRECT.GET.>", "$JS.API.STREAM.MSG.GET.>"} {
		if _, err := spy.Subscribe(s, func(m *nats.Msg) { asked <- m.Subject }); err != nil {
			t.Fatal(err)
		}
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}

	q := testenv.Name(t)
	subject := event.AdmittedSubject(q)
	var acks []*jetstream.PubAck
	for _, body := range []string{`{"n":1}`, `{"n":2}`} {
		m := nats.NewMsg(subject)
		m.Data = []byte(body)
		m.Header.Set("Usher-Test", body)
		ack, err := js.PublishMsg(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		acks = append(acks, ack)
	}
	st, err := js.Stream(ctx, event.StreamAdmissions)
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, m *jetstream.RawStreamMsg, err error, seq uint64, body string) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if m.Subject != subject || m.Sequence != seq || string(m.Data) != body || m.Header.Get("Usher-Test") != body || m.Time.IsZero() {
			t.Errorf("%s = %s #%d %s (header %q, stored %v); want %s #%d %s", what, m.Subject, m.Sequence, m.Data, m.Header.Get("Usher-Test"), m.Time, subject, seq, body)
		}
	}
	m, err := st.GetLastMsgForSubject(ctx, subject)
	check("last", m, err, acks[1].Sequence, `{"n":2}`)
	m, err = st.GetMsg(ctx, acks[0].Sequence)
	check("by sequence", m, err, acks[0].Sequence, `{"n":1}`)
	if _, err := st.GetLastMsgForSubject(ctx, event.AdmittedSubject(q+"-none")); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("last of a subject with no message: %v, want %v", err, jetstream.ErrMsgNotFound)
	}
	if _, err := st.GetMsg(ctx, acks[1].Sequence+1000); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("a sequence past the stream's last: %v, want %v", err, jetstream.ErrMsgNotFound)
	}

	for i := range 4 {
		select {
		case s := <-asked:
			if !strings.HasPrefix(s, "$JS.API.STREAM.MSG.GET.") {
				t.Errorf("read %d went to %s, want the API's message get", i+1, s)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%d reads seen, want 4", i)
		}
	}
}
