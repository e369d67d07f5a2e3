// Package linetest helps tests drive a line in a real Redis (package
// testenv's): every role of the line on the test's own queue, a tick's
// settings, joins applied as the admitter's follower applies them, and the
// line read back front to back.
package linetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"usher/internal/keyspace"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/roles"

	"github.com/redis/go-redis/v9"
)

// Epoch is the entries stream's identity the helpers' lines count in.
const Epoch = testenv.Epoch

// New returns every role of the line on the test's Redis, and a queue name
// of the test's own.
func New(t testing.TB) (*roles.All, string) {
	t.Helper()
	return roles.New(testenv.Redis(t)), testenv.Name(t)
}

// Tick is a tick of 20 ms with 300 s tokens, admitting up to target.
func Tick(target int) waitqueue.Tick {
	return waitqueue.Tick{Epoch: Epoch, TargetActive: target, TickLength: 20 * time.Millisecond, TokenTTL: 300 * time.Second}
}

// JoinAll puts users in line as the follower does (joins at stream
// sequences 1..n), so the entries cursor covers them.
func JoinAll(t testing.TB, s *roles.All, q string, users ...string) {
	t.Helper()
	evs := make([]waitqueue.EntryEvent, len(users))
	for i, u := range users {
		evs[i] = waitqueue.EntryEvent{StreamSeq: uint64(i + 1), User: u}
	}
	if _, err := s.ApplyEntries(context.Background(), q, Epoch, 0, evs); err != nil {
		t.Fatal(err)
	}
}

// Users are n users: u1, u2, …
func Users(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("u%d", i+1)
	}
	return out
}

// ApplyKind applies joins of one kind at the given stream sequences, each
// by user u<seq>; prev is the last sequence applied before them.
func ApplyKind(t testing.TB, s *roles.All, q string, prev uint64, kind waitqueue.JoinKind, seqs ...uint64) {
	t.Helper()
	evs := make([]waitqueue.EntryEvent, len(seqs))
	for i, seq := range seqs {
		evs[i] = waitqueue.EntryEvent{StreamSeq: seq, User: fmt.Sprintf("u%d", seq), Kind: kind}
	}
	if _, err := s.ApplyEntries(context.Background(), q, Epoch, prev, evs); err != nil {
		t.Fatal(err)
	}
}

// Line reads the waiting line front to back as sequences, of those given.
func Line(t testing.TB, s *roles.All, q string, seqs ...uint64) []uint64 {
	t.Helper()
	out := make([]uint64, 0, len(seqs))
	for pos := int64(1); pos <= int64(len(seqs)); pos++ {
		for _, seq := range seqs {
			e, err := s.Poll(context.Background(), q, seq)
			if err != nil {
				t.Fatal(err)
			}
			if e.Status == waitqueue.Waiting && e.Position == pos {
				out = append(out, seq)
			}
		}
	}
	return out
}

// Order is an order of one unit of "sku" by user u for token tok.
func Order(tok, id string) waitqueue.Order {
	return waitqueue.Order{ID: id, TokenID: tok, User: "u", SKU: "sku", Quantity: 1}
}

// HeldIndex is the line's held index (linescript's HELD: what each slot
// holds of the stock), as the stock-aware tick reads it.
func HeldIndex(t testing.TB, rdb redis.UniversalClient, k keyspace.Queue) map[string]string {
	t.Helper()
	m, err := rdb.HGetAll(context.Background(), k.Held()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Leave is a shopper's leave as the gateway makes it once the entries
// stream stored it: the line takes it, then frees the slot an admitted
// entry kept until the record (Leave, LeaveRecorded). It returns the
// status the entry had.
func Leave(ctx context.Context, s *roles.All, q string, seq uint64, user string) (waitqueue.Status, error) {
	had, toRecord, err := s.Leave(ctx, q, seq, user)
	if err != nil || !toRecord {
		return had, err
	}
	return had, s.LeaveRecorded(ctx, q, waitqueue.UnrecordedLeave{Seq: seq, User: user})
}
