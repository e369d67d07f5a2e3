package lottery_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"usher/internal/lottery"
)

// The order is what anyone recomputes from the revealed seed with standard
// tools: here an independent implementation — hex strings of the HMACs
// compared as text (lowercase hex keeps byte order).
func TestTheOrderIsTheOneAnyoneRecomputes(t *testing.T) {
	seed, err := lottery.NewSeed()
	if err != nil {
		t.Fatal(err)
	}
	var entries []lottery.Entry
	for i := range 1000 {
		entries = append(entries, lottery.Entry{Seq: uint64(100 + i), User: fmt.Sprintf("user-%d@example.com", i)})
	}
	got := lottery.Order(seed, entries)

	type row struct {
		hmacHex string
		seq     uint64
	}
	var rows []row
	for _, e := range entries {
		m := hmac.New(sha256.New, seed)
		m.Write([]byte(e.User))
		rows = append(rows, row{hex.EncodeToString(m.Sum(nil)), e.Seq})
	}
	sort.Slice(rows, func(i, j int) bool { return strings.Compare(rows[i].hmacHex, rows[j].hmacHex) < 0 })
	want := make([]uint64, len(rows))
	for i, r := range rows {
		want[i] = r.seq
	}
	if !slices.Equal(got, want) {
		t.Fatal("Order differs from the independent recomputation")
	}
	if slices.IsSorted(got) {
		t.Error("the lottery order is the join order: nothing was drawn")
	}
}

func TestRevealChecksTheCommitment(t *testing.T) {
	seed, _ := lottery.NewSeed()
	c := lottery.Commitment(seed)
	if got, err := lottery.Reveal(hex.EncodeToString(seed), c); err != nil || !slices.Equal(got, seed) {
		t.Fatalf("Reveal(the seed) = %x, %v", got, err)
	}
	other, _ := lottery.NewSeed()
	if _, err := lottery.Reveal(hex.EncodeToString(other), c); !errors.Is(err, lottery.ErrCommitment) {
		t.Fatalf("Reveal(another seed) = %v, want ErrCommitment", err)
	}
	if _, err := lottery.Reveal("zz", c); err == nil {
		t.Fatal("Reveal(not hex) accepted")
	}
}

// The digest is what sha256sum prints for the ordered user ids, one per
// line.
func TestDigestIsSha256sumOfTheOrderedUsers(t *testing.T) {
	entries := []lottery.Entry{{Seq: 1, User: "alice"}, {Seq: 2, User: "bob"}}
	// printf 'alice\nbob\n' | sha256sum
	sum := sha256.Sum256([]byte("alice\nbob\n"))
	if got := lottery.Digest(entries); got != hex.EncodeToString(sum[:]) {
		t.Fatalf("Digest = %s, want %x", got, sum)
	}
}
