package event

import (
	"fmt"
	"reflect"
	"testing"
	"time"
)

// sameAsJSON decodes b into each payload type with Unmarshal and with
// encoding/json alone, starting from the same non-zero value, and fails
// unless both give the same envelope, payload and error. It reports
// whether the fast path decoded b for want's payload type.
func sameAsJSON(t *testing.T, b []byte, want string) (fast bool) {
	t.Helper()
	at := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, v := range []func() any{
		func() any { return &Joined{Queue: "before", Prev: 9, JoinedAt: at} },
		func() any { return &Left{Reason: "before", Seq: 9} },
		func() any { return &Admitted{TokenID: "before", ReadyAt: at} },
	} {
		got, want2 := v(), v()
		env, err := Unmarshal(b, want, got)
		wenv, werr := unmarshalJSON(b, want, want2)
		if (err == nil) != (werr == nil) || (err != nil && err.Error() != werr.Error()) {
			t.Fatalf("Unmarshal(%q) into %T: error %v, encoding/json's %v", b, got, err, werr)
		}
		if !reflect.DeepEqual(env, wenv) {
			t.Fatalf("Unmarshal(%q) into %T: envelope\n%#v\nencoding/json's\n%#v", b, got, env, wenv)
		}
		if !reflect.DeepEqual(got, want2) {
			t.Fatalf("Unmarshal(%q) into %T:\n%#v\nencoding/json's\n%#v", b, got, got, want2)
		}
		if _, ok, _ := unmarshalFast(b, want, v()); ok && fmt.Sprintf("%T", got) == map[string]string{
			TypeJoined: "*event.Joined", TypeLeft: "*event.Left", TypeAdmitted: "*event.Admitted"}[want] {
			fast = true
		}
	}
	return fast
}

// TestFastPathSameAsJSON: the events usher writes take the fast path, and
// every message decodes as encoding/json decodes it — the ones the fast
// path reads and the ones it leaves to encoding/json (other spellings,
// escapes, nulls, wrong types, duplicates, trailing bytes).
func TestFastPathSameAsJSON(t *testing.T) {
	at := time.Date(2026, 11, 27, 9, 0, 0, 123456789, time.UTC)
	paris := time.FixedZone("Paris", 3600)
	written := []struct {
		typ  string
		data any
	}{
		{TypeJoined, Joined{Queue: "demo", User: "alice", JoinedAt: at}},
		{TypeJoined, Joined{Queue: "demo", User: "bob", JoinedAt: at.In(paris), Prev: 7, PreQueue: true, Priority: true}},
		{TypeJoined, Joined{Queue: "demo", User: "carol", JoinedAt: at, Prev: 1<<64 - 1}},
		{TypeLeft, Left{Queue: "demo", User: "alice", Seq: 3}},
		{TypeLeft, Left{Queue: "demo", User: "alice", Seq: 3, Reason: "abandoned"}},
		{TypeAdmitted, Admitted{Queue: "demo", User: "alice", Seq: 3, TokenID: "demo.e1.3", ReadyAt: at, ExpiresAt: at.Add(time.Minute)}},
	}
	for _, w := range written {
		for _, subject := range []string{"", "alice"} {
			b, err := Marshal("id/1", w.typ, subject, at, w.data)
			if err != nil {
				t.Fatal(err)
			}
			if !sameAsJSON(t, b, w.typ) {
				t.Errorf("%s as Marshal writes it took encoding/json's path: %s", w.typ, b)
			}
			sameAsJSON(t, b, TypeAdmitted) // another type: ErrType, from either path
		}
	}
	env := `{"specversion":"1.0","id":"x","source":"usher","type":"usher.joined.v1","time":"2026-11-27T09:00:00Z","datacontenttype":"application/json","data":`
	others := []string{
		env + `{"queue":"demo","user":"alice","joinedAt":"2026-11-27T09:00:00Z"}} `, // trailing space
		env + `{"queue":"demo","user":"alice","joinedAt":"2026-11-27T09:00:00Z"}}x`,
		env + `{"user":"alice","queue":"demo","joinedAt":"2026-11-27T09:00:00Z"}}`, // another order
		env + `{"queue":"demo","User":"alice","joinedAt":"2026-11-27T09:00:00Z"}}`, // another case
		env + `{"queue":"demo","user":"alice","user":"bob","joinedAt":"2026-11-27T09:00:00Z"}}`,
		env + `{"queue":"demo","user":"al\u0069ce","joinedAt":"2026-11-27T09:00:00Z"}}`,
		env + `{"queue":"demo","user":"alice","joinedAt":null}}`,
		env + `{"queue":"demo","user":"alice","joinedAt":"2026-11-27T09:00:00"}}`,
		env + `{"queue":"demo","user":"alice","joinedAt":"2026-11-27 09:00:00Z"}}`,
		env + `{"queue":"demo","user":"alice","joinedAt":"2026-11-27T09:00:00Z","prev":01}}`,
		env + `{"queue":"demo","user":"alice","joinedAt":"2026-11-27T09:00:00Z","prev":1.0}}`,
		env + `{"queue":"demo","user":"alice","joinedAt":"2026-11-27T09:00:00Z","prev":18446744073709551616}}`,
		env + `{"queue":"demo","user":"alice","joinedAt":"2026-11-27T09:00:00Z","prev":"7"}}`,
		env + `{"queue":"demo","user":"alice","joinedAt":"2026-11-27T09:00:00Z","preQueue":1}}`,
		env + `{"queue":"demo","user":7,"joinedAt":"2026-11-27T09:00:00Z"}}`,
		env + `{"queue":"demo","user":"alice","joinedAt":"2026-11-27T09:00:00Z","extra":{"a":1}}}`,
		env + `{"queue":"demo","user":"alice","joinedAt":"2026-11-27T09:00:00Z","prev":0,"preQueue":false,"priority":false}}`,
		env + `{}}`,
		env + `[]}`,
		env + `null}`,
		env + `{"queue":"demo"`,
		`{"specversion":"1.0","id":"x","source":"usher","type":"usher.joined.v1","time":"2026-11-27T09:00:00Z","datacontenttype":"application/json"}`,
		`{"id":"x","specversion":"1.0","type":"usher.joined.v1","time":"2026-11-27T09:00:00Z","data":{"user":"a"}}`,
		`{"specversion":"1.0","id":"x","source":"usher","type":"usher.joined.v1","time":"2026-11-27T09:00:00+01:00","datacontenttype":"application/json","data":{"user":"a"}}`,
		`{"specversion":"1.0","id":"x","source":"usher","type":"usher.joined.v1","time":"2026-11-27T09:00:00Z","datacontenttype":"application/json","data":{"user":"a"},"data":{"user":"b"}}`,
		`{}`, `{`, ``, `null`, `{"data":{"a":{"b":1}}}`,
	}
	for _, o := range others {
		for _, typ := range []string{TypeJoined, TypeLeft, TypeAdmitted} {
			sameAsJSON(t, []byte(o), typ)
		}
	}
}

// FuzzUnmarshalSameAsJSON: whatever the bytes, Unmarshal decodes them as
// encoding/json does.
func FuzzUnmarshalSameAsJSON(f *testing.F) {
	at := time.Date(2026, 11, 27, 9, 0, 0, 123456789, time.UTC)
	for _, d := range []struct {
		typ  string
		data any
	}{
		{TypeJoined, Joined{Queue: "demo", User: "bob", JoinedAt: at, Prev: 7, PreQueue: true, Priority: true}},
		{TypeLeft, Left{Queue: "demo", User: "alice", Seq: 3, Reason: "abandoned"}},
		{TypeAdmitted, Admitted{Queue: "demo", User: "alice", Seq: 3, TokenID: "demo.e1.3", ReadyAt: at, ExpiresAt: at}},
	} {
		b, err := Marshal("demo/bob/0", d.typ, "bob", at, d.data)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint8(0))
	}
	f.Fuzz(func(t *testing.T, b []byte, typ uint8) {
		sameAsJSON(t, b, []string{TypeJoined, TypeLeft, TypeAdmitted}[typ%3])
	})
}

func BenchmarkUnmarshalJoined(b *testing.B) {
	at := time.Date(2026, 11, 27, 9, 0, 0, 123456789, time.UTC)
	msg, err := Marshal("demo/alice/0", TypeJoined, "alice", at, Joined{Queue: "demo", User: "alice", JoinedAt: at})
	if err != nil {
		b.Fatal(err)
	}
	for _, path := range []struct {
		name string
		fn   func([]byte, string, any) (Envelope, error)
	}{{"fast", Unmarshal}, {"encoding-json", unmarshalJSON}} {
		b.Run(path.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var j Joined
				if _, err := path.fn(msg, TypeJoined, &j); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
