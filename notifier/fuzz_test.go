package main

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"usher/internal/catalog"
	"usher/internal/event"
)

// Any Last-Event-ID header is either an id this notifier could have issued
// (and then it round-trips) or no id at all; none panics or overflows.
func FuzzLastEventID(f *testing.F) {
	for _, s := range []string{"", "0", "1", "42", "18446744073709551615", "9999999999999999999", "-1", "+1", "1e3", " 7", "07", "abc", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, ok := parseLastEventID(s)
		if !ok {
			if n != 0 {
				t.Fatalf("parseLastEventID(%q) = %d, false; want 0 when rejected", s, n)
			}
			return
		}
		if n == ^uint64(0) {
			t.Fatalf("parseLastEventID(%q) = max uint64: the next id would overflow", s)
		}
		if back, ok := parseLastEventID(strconv.FormatUint(n, 10)); !ok || back != n {
			t.Fatalf("id %d does not round-trip: %d, %v", n, back, ok)
		}
	})
}

// Whatever arrives on the admissions subject, the decoder either rejects it
// or returns an admission of the subject's queue with a token.
func FuzzDecodeAdmitted(f *testing.F) {
	good, _ := event.Marshal("q:1", event.TypeAdmitted, "u", time.Unix(1, 0), event.Admitted{
		Queue: "q", User: "u", Seq: 1, TokenID: "q:1", ReadyAt: time.Unix(1, 0), ExpiresAt: time.Unix(301, 0),
	})
	f.Add("usher.live.admitted.q", good)
	f.Add("usher.live.admitted.other", good)
	f.Add("usher.admitted.q", good) // the stored subject, never subscribed to
	f.Add("usher.live.admitted.", []byte(`{}`))
	f.Add("usher.live.admitted.q", []byte(`{"type":"usher.admitted.v1","data":null}`))
	f.Add("x", []byte(`not json`))
	f.Fuzz(func(t *testing.T, subject string, data []byte) {
		a, err := decodeAdmitted(subject, data)
		if err != nil {
			return
		}
		if event.Live(event.AdmittedSubject(a.Queue)) != subject || a.TokenID == "" || a.ReadyAt.IsZero() {
			t.Fatalf("decodeAdmitted(%q, %q) = %+v, accepted", subject, data, a)
		}
	})
}

func FuzzDecodeFinished(f *testing.F) {
	good, _ := event.Marshal("completed/o", event.TypeOrderCompleted, "u", time.Unix(1, 0), event.OrderFinished{
		OrderID: "o", TokenID: "q:1", Queue: "q", Status: "PAID",
	})
	f.Add(good)
	f.Add([]byte(`{"type":"usher.order.failed.v1","data":{"tokenId":"q:x","queue":"q"}}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, data []byte) {
		q, _, ok, err := decodeFinished(data)
		if ok && (err != nil || !catalog.ValidName(q)) {
			t.Fatalf("decodeFinished(%q) = %q, ok with err %v", data, q, err)
		}
	})
}

// FuzzPositionJSON: the hand-spelled position event is encoding/json's.
func FuzzPositionJSON(f *testing.F) {
	f.Add(int64(42), int64(1200), int64(3), true)
	f.Add(int64(-1), int64(0), int64(0), false)
	f.Fuzz(func(t *testing.T, pos, waiting, eta int64, etaKnown bool) {
		p := positionData{Position: pos, Waiting: waiting}
		if etaKnown {
			p.ETASeconds = &eta
		}
		want, _ := json.Marshal(p)
		if got := p.appendJSON(nil); string(got) != string(want) {
			t.Fatalf("appendJSON(%+v) = %s, want %s", p, got, want)
		}
	})
}
