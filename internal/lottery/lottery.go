// Package lottery is the draw of a scheduled drop's pre-queue: everyone who
// joined before the drop opened gets a place in an order nobody could
// influence and anyone can check.
//
// When the drop is scheduled usher draws a secret 32-byte seed and
// publishes its commitment, SHA-256(seed) in lowercase hex. At the opening
// the pre-queued shoppers are sorted ascending by HMAC-SHA256(key = seed,
// message = user id in UTF-8), compared as bytes, places 1..n in that
// order, and the seed is revealed. Refreshing, rejoining or arriving at
// 09:59:59.9 wins nothing: the order depends on the user id and a seed
// fixed (and committed to) before anyone queued.
package lottery

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
)

// SeedSize is the length of a seed in bytes.
const SeedSize = 32

// NewSeed draws a secret seed.
func NewSeed() ([]byte, error) {
	b := make([]byte, SeedSize)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("lottery seed: %w", err)
	}
	return b, nil
}

// Commitment is SHA-256 of the seed in lowercase hex.
func Commitment(seed []byte) string {
	sum := sha256.Sum256(seed)
	return hex.EncodeToString(sum[:])
}

// ErrCommitment: the seed is not the one committed to.
var ErrCommitment = errors.New("the seed does not match the commitment")

// Reveal decodes a revealed seed (lowercase hex) and checks it against the
// commitment published before.
func Reveal(seedHex, commitment string) ([]byte, error) {
	seed, err := hex.DecodeString(seedHex)
	if err != nil || len(seed) != SeedSize {
		return nil, fmt.Errorf("lottery seed %q: want %d bytes in hex", seedHex, SeedSize)
	}
	if Commitment(seed) != commitment {
		return nil, ErrCommitment
	}
	return seed, nil
}

// Ticket is one pre-queued shopper's lottery ticket.
func Ticket(seed []byte, user string) []byte {
	m := hmac.New(sha256.New, seed)
	m.Write([]byte(user))
	return m.Sum(nil)
}

// Entry is one pre-queued shopper: their place's sequence and user id.
type Entry struct {
	Seq  uint64
	User string
}

// Order returns the sequences of entries in lottery order. Two entries of
// one user (which the line never holds) keep their join order.
func Order(seed []byte, entries []Entry) []uint64 {
	sorted := Sorted(seed, entries)
	out := make([]uint64, len(sorted))
	for i, e := range sorted {
		out[i] = e.Seq
	}
	return out
}

// Digest is SHA-256 (lowercase hex) of the user ids of entries in the
// order given, each followed by a newline: what "sha256sum" prints for the
// list anyone recomputes (see docs/events.md, "Verifying a draw").
func Digest(entries []Entry) string {
	h := sha256.New()
	for _, e := range entries {
		h.Write([]byte(e.User))
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Sorted returns entries in lottery order.
func Sorted(seed []byte, entries []Entry) []Entry {
	type drawn struct {
		ticket []byte
		e      Entry
	}
	d := make([]drawn, len(entries))
	for i, e := range entries {
		d[i] = drawn{Ticket(seed, e.User), e}
	}
	sort.Slice(d, func(i, j int) bool {
		if c := bytes.Compare(d[i].ticket, d[j].ticket); c != 0 {
			return c < 0
		}
		return d[i].e.Seq < d[j].e.Seq
	})
	out := make([]Entry, len(d))
	for i, x := range d {
		out[i] = x.e
	}
	return out
}
