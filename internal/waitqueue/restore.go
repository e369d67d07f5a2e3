package waitqueue

import (
	"context"
	"fmt"
	"strconv"
	"time"
	"usher/internal/keyspace"

	"github.com/redis/go-redis/v9"
)

// Record is one entry as a rebuild recreates it from the event streams: the
// same fields the live scripts would have written for it.
type Record struct {
	Seq    uint64
	Status Status // Waiting, PreQueued, Admitted, Expired, Used or Left; ignored for an alias
	User   string
	// Alias is the earlier entry this join duplicates (a second join of a
	// user already in line); 0 for an entry of its own.
	Alias     uint64
	TokenID   string // set for every entry that was admitted
	OrderID   string // the order that redeemed the token (status Used)
	ReadyAt   time.Time
	ExpiresAt time.Time
	// Score is a waiting entry's score in line when it is not its
	// sequence: a drawn place (place / (n + 1)) or a join allowed past the
	// line (seq - 2^52). 0: its sequence (FIFO).
	Score float64
}

// RestoreResult says what Restore wrote.
type RestoreResult struct {
	Created map[Status]int // new records by status; aliases count under "alias"
	Kept    int            // records that existed already and were left alone
}

// Alias is the key under which RestoreResult counts aliases: a record that
// names another entry rather than having a status of its own.
const Alias Status = "alias"

// restoreBatch is how many records go into one script call: big enough to
// amortise the round trip, small enough not to block Redis for long (and
// below what Lua's unpack takes: the script unpacks two values a record).
const restoreBatch = 256

// Restore writes records that Redis lost, in the order given, creating each
// only if it is absent. It is idempotent and safe to run while the gateway
// and admitters work on the same queue: it never overwrites a record and
// never moves anyone in the line. Give admitted records first, so an
// admitter ticking meanwhile sees every held slot before it sees the line.
// A user's pointer is set for entries of their own (not aliases), to the
// latest sequence. An entry given twice is written as it was given first
// (the second finds it and counts as kept).
//
// The script calls go out in order, a round of them at a time on one
// connection, so Redis applies them in the order given; the next round's
// arguments are made while Redis runs the one before.
func (s *Store) Restore(ctx context.Context, q string, recs []Record) (RestoreResult, error) {
	res := RestoreResult{Created: map[Status]int{}}
	recs, res.Kept = firstOfEach(recs)
	if err := restoreScript.Load(ctx, s.rdb).Err(); err != nil {
		return res, fmt.Errorf("load restore script: %w", err)
	}
	k := keyspace.Of(q)
	keys := stdKeys(k)
	rounds := make(chan restoreRound, 1)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() { // owned by this call: it ends when the records do or the call returns
		defer close(done)
		defer close(rounds)
		for len(recs) > 0 {
			var r restoreRound
			for len(r.calls) < restorePipelined && len(recs) > 0 {
				n := min(restoreBatch, len(recs))
				r.calls = append(r.calls, recs[:n])
				r.args = append(r.args, restoreArgs(k.Prefix(), s.ttl, recs[:n]))
				recs = recs[n:]
			}
			select {
			case rounds <- r:
			case <-stop:
				return
			}
		}
	}()
	defer func() { close(stop); <-done }()
	for r := range rounds {
		cmds := make([]*redis.Cmd, len(r.calls))
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, args := range r.args {
				cmds[i] = restoreScript.EvalSha(ctx, p, keys, args...)
			}
			return nil
		})
		if err != nil {
			return res, fmt.Errorf("restore %s: %w", q, err)
		}
		for i, batch := range r.calls {
			created, err := cmds[i].Int64Slice()
			if err != nil {
				return res, fmt.Errorf("restore %s: %w", q, err)
			}
			for j, rec := range batch {
				switch {
				case j >= len(created) || created[j] == 0:
					res.Kept++
				case rec.Alias != 0:
					res.Created[Alias]++
				default:
					res.Created[rec.Status]++
				}
			}
		}
	}
	return res, nil
}

// firstOfEach is recs without the records of an entry given before, and
// how many it left out: the script trusts each call's seqs to be distinct.
// recs itself when they are, as a rebuild's are.
func firstOfEach(recs []Record) ([]Record, int) {
	seen := make(map[uint64]struct{}, len(recs))
	var out []Record // nil until the first repeat
	for i, r := range recs {
		if _, dup := seen[r.Seq]; dup {
			if out == nil {
				out = append(make([]Record, 0, len(recs)), recs[:i]...)
			}
			continue
		}
		seen[r.Seq] = struct{}{}
		if out != nil {
			out = append(out, r)
		}
	}
	if out == nil {
		return recs, 0
	}
	return out, len(recs) - len(out)
}

// restorePipelined is how many script calls go in one round trip.
const restorePipelined = 16

// restoreRound is one round trip of script calls: their records and
// arguments.
type restoreRound struct {
	calls [][]Record
	args  [][]any
}

func restoreArgs(prefix string, ttl int, batch []Record) []any {
	args := make([]any, 0, 3+9*len(batch))
	users := make(map[string]struct{}, len(batch))
	for _, r := range batch {
		users[r.User] = struct{}{}
	}
	unique := "0"
	if len(users) == len(batch) {
		unique = "1"
	}
	args = append(args, prefix, ttl, unique)
	for _, r := range batch {
		alias, ready, exp, score := "", "", "", ""
		if r.Alias != 0 {
			alias = strconv.FormatUint(r.Alias, 10)
		}
		if r.TokenID != "" {
			ready = strconv.FormatInt(r.ReadyAt.UnixMilli(), 10)
			exp = strconv.FormatInt(r.ExpiresAt.UnixMilli(), 10)
		}
		if r.Score != 0 {
			score = strconv.FormatFloat(r.Score, 'g', -1, 64) // exactly the double the live scripts wrote
		}
		if r.Status == Waiting && alias == "" && r.TokenID == "" && r.OrderID == "" && score == "" {
			args = append(args, strconv.FormatUint(r.Seq, 10), "w", r.User)
			continue
		}
		args = append(args, strconv.FormatUint(r.Seq, 10), string(r.Status), r.User, alias, r.TokenID, ready, exp, r.OrderID, score)
	}
	return args
}

// RestoreDraw records q's draw (from its usher.lottery.drawn.v1 event)
// unless Redis has one recorded, and says whether it did. A rebuild calls
// it before restoring the drawn, so that no admitter draws the pre-queue
// again meanwhile and a pre-queue join restored after it queues FIFO.
func (s *Store) RestoreDraw(ctx context.Context, q string, d Drawing) (bool, error) {
	n, err := restoreDrawScript.Run(ctx, s.rdb, []string{keyspace.Of(q).Stats()}, d.Entries, d.Cursor, d.Digest).Int()
	if err != nil {
		return false, fmt.Errorf("restore the draw of %s: %w", q, err)
	}
	return n == 1, nil
}

// Existing counts how many of the given entries Redis has a record of. A
// rebuild uses it to tell a queue that lost its state from an intact one.
func (s *Store) Existing(ctx context.Context, q string, seqs []uint64) (int, error) {
	if len(seqs) == 0 {
		return 0, nil
	}
	k := keyspace.Of(q)
	keys := make([]string, len(seqs))
	for i, sq := range seqs {
		keys[i] = k.Entry(sq)
	}
	// One EXISTS per key: a multi-key EXISTS would cross slots on a cluster
	// only if the hash tag were missing, but one per key keeps it obvious.
	cmds := make([]*redis.IntCmd, len(keys))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, key := range keys {
			cmds[i] = p.Exists(ctx, key)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("existing %s: %w", q, err)
	}
	n := 0
	for _, c := range cmds {
		n += int(c.Val())
	}
	return n, nil
}
