package event

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// The fast path of Unmarshal: the events usher publishes most (joins,
// leaves, admissions) read without reflection when they are spelled as
// Marshal spells them — no whitespace, the fields in declaration order
// with their exact names, strings of printable ASCII without escapes.
// Whatever it does not recognise goes to encoding/json, so the two paths
// accept and refuse the same messages and decode them to the same values
// (TestFastPathSameAsJSON, FuzzUnmarshalSameAsJSON). Decoding each event
// twice with encoding/json was a fifth of the admitter's CPU while
// shoppers joined, half of a rebuild's reading of the streams, and 8 % of
// the notifier's while it told admissions (BENCHMARKS.md).

// field is one member of a flat JSON object: its key, and its value as
// written (a string with its quotes, a number, true, false or an object).
type field struct {
	key, val []byte
}

// maxFields bounds the members of an object the fast path reads.
const maxFields = 10

// flatObject reads b as an object whose members are simple strings,
// non-negative integers, booleans or — given inner, where it appends that
// object's members: the envelope's data — one object of those, with no
// whitespace anywhere. It returns the members in order, the inner
// object's, and the rest of b after the object; ok is false for anything
// else.
func flatObject(b []byte, fs, inner []field) (_, innerFs []field, rest []byte, ok bool) {
	if len(b) < 2 || b[0] != '{' {
		return nil, nil, nil, false
	}
	i := 1
	if b[i] == '}' {
		return fs, nil, b[2:], true
	}
	for {
		if len(fs) == maxFields {
			return nil, nil, nil, false
		}
		k, n := simpleString(b[i:])
		if n == 0 || i+n >= len(b) || b[i+n] != ':' {
			return nil, nil, nil, false
		}
		i += n + 1
		var v []byte
		n = 0
		switch {
		case i >= len(b):
			return nil, nil, nil, false
		case b[i] == '"':
			_, n = simpleString(b[i:])
			v = b[i : i+n]
		case b[i] >= '0' && b[i] <= '9':
			n = 1
			for i+n < len(b) && b[i+n] >= '0' && b[i+n] <= '9' {
				n++
			}
			if b[i] == '0' && n > 1 {
				return nil, nil, nil, false // a leading zero: not JSON
			}
			v = b[i : i+n]
		case b[i] == 't' && hasAt(b, i, "true"):
			n = 4
			v = b[i : i+4]
		case b[i] == 'f' && hasAt(b, i, "false"):
			n = 5
			v = b[i : i+5]
		case b[i] == '{' && inner != nil && innerFs == nil:
			got, _, r, ok := flatObject(b[i:], inner, nil)
			if !ok {
				return nil, nil, nil, false
			}
			innerFs = got // not nil: inner's array
			n = len(b) - i - len(r)
			v = b[i : i+n]
		}
		if n == 0 {
			return nil, nil, nil, false
		}
		fs = append(fs, field{key: k, val: v})
		i += n
		if i >= len(b) {
			return nil, nil, nil, false
		}
		switch b[i] {
		case ',':
			i++
		case '}':
			return fs, innerFs, b[i+1:], true
		default:
			return nil, nil, nil, false
		}
	}
}

func hasAt(b []byte, i int, lit string) bool {
	return len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit
}

// simpleString reads a JSON string at the start of b made of printable
// ASCII without escapes, and returns its contents and its length with
// quotes; n is 0 if b does not start with one.
func simpleString(b []byte) (s []byte, n int) {
	if len(b) < 2 || b[0] != '"' {
		return nil, 0
	}
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return b[1:i], i + 1
		case c < 0x20 || c > 0x7e || c == '\\':
			return nil, 0
		}
	}
	return nil, 0
}

// decoder walks the members of an object in the order a struct declares
// them; every getter consumes its member when it is next, and fails the
// decoding when it is next but malformed. done says whether every member
// was consumed and none failed.
type decoder struct {
	fs  []field
	bad bool
}

func (d *decoder) next(key string) ([]byte, bool) {
	if d.bad || len(d.fs) == 0 || string(d.fs[0].key) != key {
		return nil, false
	}
	v := d.fs[0].val
	d.fs = d.fs[1:]
	return v, true
}

// str reads a string member; a value among known is not copied.
func (d *decoder) str(key string, dst *string, known ...string) {
	if v, ok := d.next(key); ok {
		if len(v) < 2 || v[0] != '"' {
			d.bad = true
			return
		}
		v = v[1 : len(v)-1]
		for _, k := range known {
			if string(v) == k {
				*dst = k
				return
			}
		}
		*dst = string(v)
	}
}

func (d *decoder) time(key string, dst *time.Time) {
	if v, ok := d.next(key); ok {
		if v[0] != '"' || dst.UnmarshalJSON(v) != nil {
			d.bad = true // encoding/json says why
		}
	}
}

func (d *decoder) uint(key string, dst *uint64) {
	if v, ok := d.next(key); ok {
		n, err := strconv.ParseUint(string(v), 10, 64)
		if err != nil || v[0] == '"' {
			d.bad = true
			return
		}
		*dst = n
	}
}

func (d *decoder) bool(key string, dst *bool) {
	if v, ok := d.next(key); ok {
		switch string(v) {
		case "true":
			*dst = true
		case "false":
			*dst = false
		default:
			d.bad = true
		}
	}
}

func (d *decoder) done() bool { return !d.bad && len(d.fs) == 0 }

// unmarshalFast is Unmarshal's fast path; ok is false when it cannot
// tell, and encoding/json must.
func unmarshalFast(b []byte, want string, v any) (env Envelope, ok bool, err error) {
	var buf, dataBuf [maxFields]field
	fs, dataFs, rest, ok := flatObject(b, buf[:0], dataBuf[:0])
	if !ok || len(rest) != 0 {
		return env, false, nil
	}
	d := decoder{fs: fs}
	d.str("specversion", &env.SpecVersion, "1.0")
	d.str("id", &env.ID)
	d.str("source", &env.Source, Source)
	d.str("type", &env.Type, want)
	d.time("time", &env.Time)
	d.str("subject", &env.Subject)
	d.str("datacontenttype", &env.DataContentType, "application/json")
	data, _ := d.next("data")
	if !d.done() || len(data) == 0 || data[0] != '{' {
		return env, false, nil
	}
	if env.Type != want {
		env.Data = append(json.RawMessage(nil), data...)
		return env, true, fmt.Errorf("%w: got %q, want %q", ErrType, env.Type, want)
	}
	d = decoder{fs: dataFs} // data is the one object inside: its members
	// Each payload decodes into a copy of *v and replaces it only whole:
	// a member the message lacks keeps the value v had, as with
	// encoding/json, and a message left to encoding/json finds v untouched.
	switch p := v.(type) {
	case *Joined:
		j := *p
		d.str("queue", &j.Queue)
		d.str("user", &j.User)
		d.time("joinedAt", &j.JoinedAt)
		d.uint("prev", &j.Prev)
		d.bool("preQueue", &j.PreQueue)
		d.bool("priority", &j.Priority)
		if !d.done() {
			return env, false, nil
		}
		*p = j
	case *Left:
		l := *p
		d.str("queue", &l.Queue)
		d.str("user", &l.User)
		d.uint("seq", &l.Seq)
		d.str("reason", &l.Reason)
		if !d.done() {
			return env, false, nil
		}
		*p = l
	case *Admitted:
		a := *p
		d.str("queue", &a.Queue)
		d.str("user", &a.User)
		d.uint("seq", &a.Seq)
		d.str("tokenId", &a.TokenID)
		d.time("readyAt", &a.ReadyAt)
		d.time("expiresAt", &a.ExpiresAt)
		if !d.done() {
			return env, false, nil
		}
		*p = a
	default:
		return env, false, nil
	}
	env.Data = append(json.RawMessage(nil), data...)
	return env, true, nil
}
