package event

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// oldMarshal is Marshal as it was before it wrote the envelope itself:
// encoding/json's encoding of Envelope, the bytes Marshal must keep.
func oldMarshal(id, typ, subject string, at time.Time, data any) ([]byte, error) {
	raw, err := json.Marshal(data)
	if err != nil {
		return nil, err
	}
	return marshalEnvelope(id, typ, subject, at, raw)
}

func sameBytes(t *testing.T, id, typ, subject string, at time.Time, data any) {
	t.Helper()
	got, err := Marshal(id, typ, subject, at, data)
	want, werr := oldMarshal(id, typ, subject, at, data)
	if (err != nil) != (werr != nil) || (err != nil && err.Error() != werr.Error()) {
		t.Fatalf("Marshal(%q, %q, %q, %v): error %v, encoding/json's %v", id, typ, subject, at, err, werr)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Marshal(%q, %q, %q, %v):\n got %s\nwant %s", id, typ, subject, at, got, want)
	}
}

// TestMarshalSameBytes: the envelope Marshal writes is byte for byte the
// one encoding/json writes, for every payload type and for strings and
// times that need escaping or are refused.
func TestMarshalSameBytes(t *testing.T) {
	at := time.Date(2026, 11, 27, 9, 0, 0, 123456789, time.UTC)
	paris := time.FixedZone("Paris", 3600)
	payloads := []any{
		Joined{Queue: "demo", User: "alice", JoinedAt: at},
		Joined{Queue: "demo", User: "bob", JoinedAt: at, Prev: 7, PreQueue: true, Priority: true},
		Admitted{Queue: "demo", User: "alice", Seq: 3, ReadyAt: at, ExpiresAt: at.Add(time.Minute)},
		Left{Queue: "demo", User: "alice", Seq: 3},
		LotteryDrawn{},
		ConfigChanged{},
		OrderRequested{},
		OrderFinished{},
		LimitChanged{},
		json.RawMessage(`{ "a" : [1, 2,  3], "h": "<&>" }`),
		map[string]any{"html": "<script>&</script>", "line": "a\u2028b", "bad": "\xff"},
		nil,
	}
	strs := []string{"demo/alice/0", "", "a\"b", `back\slash`, "<tag>&", "tab\there", "nl\n", "\x00\x1f\x7f",
		"ünïcödé", "\u2028\u2029", "\xff\xfe", "emoji 🎟", "leave/demo/42"}
	times := []time.Time{at, {}, at.In(paris), time.Date(2026, 1, 2, 3, 4, 5, 0, paris), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)}
	for _, p := range payloads {
		for _, s := range strs {
			for _, tm := range times {
				sameBytes(t, s, TypeJoined, s, tm, p)
				sameBytes(t, "id", s, "", tm, p)
			}
		}
	}
}

// FuzzMarshalSameBytes: the same, for any id, type, subject, time and
// payload strings.
func FuzzMarshalSameBytes(f *testing.F) {
	f.Add("demo/alice/0", TypeJoined, "alice", int64(1796000000), int64(5), "demo", uint64(0))
	f.Add("a\"<\\>\u2028", "\xff", "", int64(-62135596800), int64(0), "q\x00", uint64(1<<63))
	f.Fuzz(func(t *testing.T, id, typ, subject string, sec, nsec int64, s string, seq uint64) {
		at := time.Unix(sec, nsec)
		sameBytes(t, id, typ, subject, at, Joined{Queue: s, User: subject, JoinedAt: at, Prev: seq})
		sameBytes(t, id, typ, subject, at, Left{Queue: s, User: id, Seq: seq})
	})
}

// BenchmarkMarshalJoined: a join's event, as the gateway publishes it
// (old: encoding/json's encoding of the envelope).
func BenchmarkMarshalJoined(b *testing.B) {
	at := time.Now()
	j := Joined{Queue: "demo", User: "w-1-123456", JoinedAt: at.UTC()}
	for _, c := range []struct {
		name string
		fn   func(id, typ, subject string, at time.Time, data any) ([]byte, error)
	}{{"new", Marshal}, {"old", oldMarshal}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.fn("demo/w-1-123456/0", TypeJoined, "w-1-123456", at, j); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
