package event

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// TypeJoins is a message that lists several joins of one queue, in the
// order the gateway took them: a gateway gathers the joins that reach it
// within a short linger and records them with one publish (group commit).
// The place of each is its message's stream sequence and its index in the
// list (see Place).
const TypeJoins = "usher.joins.v2"

// MaxJoins is how many joins one usher.joins.v2 message may list; a place
// keeps room for that many per stream sequence (see Place).
const MaxJoins = 1 << placeBits

const placeBits = 10

// MaxPlaceSeq is the highest stream sequence whose places stay exact in a
// Redis sorted set's score (a float64 is exact up to 2⁵³).
const MaxPlaceSeq = 1<<(53-placeBits) - 1

// Joins is the data of a usher.joins.v2 message.
type Joins struct {
	Queue string `json:"queue"`
	Joins []Join `json:"joins"`
}

// Join is one join of a usher.joins.v2 message: a Joined without its
// queue, which the message names once.
type Join struct {
	User     string    `json:"user"`
	JoinedAt time.Time `json:"joinedAt"`
	Prev     uint64    `json:"prev,omitempty"`
	PreQueue bool      `json:"preQueue,omitempty"`
	Priority bool      `json:"priority,omitempty"`
}

// Joined is j as a join of queue q.
func (j Join) Joined(q string) Joined {
	return Joined{Queue: q, User: j.User, JoinedAt: j.JoinedAt, Prev: j.Prev, PreQueue: j.PreQueue, Priority: j.Priority}
}

// ErrJoins is what Validate says of a usher.joins.v2 message that lists no
// join or more than MaxJoins.
var ErrJoins = errors.New("a joins message lists 1 to 1024 joins")

// Validate checks what Place relies on: 1 to MaxJoins joins.
func (js Joins) Validate() error {
	if len(js.Joins) == 0 || len(js.Joins) > MaxJoins {
		return ErrJoins
	}
	return nil
}

// Place is the entry id of a join — what its ticket, its token id, its
// record in Redis and its score in the line carry — from where the stream
// holds it: the sequence seq of its message and its index in that message
// (0 for a usher.joined.v1 message, which holds one join).
//
// A place is seq × MaxJoins + index, except for a usher.joined.v1 message
// stored before the stream's first usher.joins.v2 message, whose place is
// seq itself: so every place given before joins came in groups keeps its
// value (tickets, tokens and the line in Redis need no migration), and
// places grow with the stream's order across the switch whichever version
// wrote each message. groupsSince is the sequence of the stream's first
// usher.joins.v2 message, 0 while there is none; a reader learns it from
// the stream, in order, and the line keeps it with its cursor.
func Place(seq uint64, index int, groupsSince uint64) uint64 {
	if groupsSince == 0 || seq < groupsSince {
		return seq
	}
	return seq<<placeBits | uint64(index)
}

// PlaceBound is the highest place a message at stream sequence seq or
// before can have: how far into the places a follower that applied the
// stream up to seq has put everyone in line.
func PlaceBound(seq, groupsSince uint64) uint64 {
	if groupsSince == 0 || seq < groupsSince {
		return seq
	}
	return seq<<placeBits | (MaxJoins - 1)
}

// Places gives the joins of one queue's enter messages, read in stream
// order from the stream's start, their places (Place): it learns where
// the queue's places start to count in groups from the first
// usher.joins.v2 message it is shown, as the line's follower does. The
// zero value is ready to use.
type Places struct{ since uint64 }

// Of is the place of the join at index i of the message at stream
// sequence seq (grouped: a usher.joins.v2 message).
func (p *Places) Of(seq uint64, i int, grouped bool) uint64 {
	if grouped && p.since == 0 {
		p.since = seq
	}
	return Place(seq, i, p.since)
}

// Since is the sequence of the first usher.joins.v2 message shown (0:
// none yet).
func (p *Places) Since() uint64 { return p.since }

// Bound is PlaceBound of seq, as far as p has learnt where places count in
// groups.
func (p *Places) Bound(seq uint64) uint64 { return PlaceBound(seq, p.since) }

// UnmarshalEnter decodes a message of an enter subject: a usher.joined.v1
// message, one join (grouped false), or a usher.joins.v2 message, the
// joins it lists in their order (grouped true: the place of joins[i] is
// Place(seq, i, …)). The joins are appended to dst[:0], so a reader of
// many messages reuses one slice. A usher.joins.v2 message that fails
// Validate is an error (ErrJoins): a reader applies it as nothing, as any
// message it cannot read.
func UnmarshalEnter(b []byte, dst []Joined) (env Envelope, joins []Joined, grouped bool, err error) {
	var j Joined
	env, err = Unmarshal(b, TypeJoined, &j)
	if err == nil {
		return env, append(dst[:0], j), false, nil
	}
	if !errors.Is(err, ErrType) || env.Type != TypeJoins {
		return env, dst[:0], false, err
	}
	var js Joins
	if err := json.Unmarshal(env.Data, &js); err != nil {
		return env, dst[:0], true, fmt.Errorf("decode %s: %w", TypeJoins, err)
	}
	if err := js.Validate(); err != nil {
		return env, dst[:0], true, fmt.Errorf("decode %s: %w", TypeJoins, err)
	}
	joins = dst[:0]
	for _, x := range js.Joins {
		joins = append(joins, x.Joined(js.Queue))
	}
	return env, joins, true, nil
}
