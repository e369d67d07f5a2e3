package ticket_test

import (
	"errors"
	"strings"
	"testing"

	"usher/internal/ticket"
)

func newSigner(t testing.TB, secret string) *ticket.Signer {
	t.Helper()
	s, err := ticket.NewSigner([]byte(strings.Repeat(secret, 32)))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestIssueThenParse(t *testing.T) {
	s := newSigner(t, "k")
	want := ticket.Ticket{Queue: "demo", User: "alice@example.com", Epoch: "lq3k2m1x", Seq: 42}
	str := s.Issue(want)
	if strings.ContainsAny(str, "/+=?#% ") {
		t.Errorf("Issue = %q, want URL-safe", str)
	}
	got, err := s.Parse(str)
	if err != nil || got != want {
		t.Fatalf("Parse(Issue(%v)) = %v, %v", want, got, err)
	}
}

func TestParseRejects(t *testing.T) {
	s := newSigner(t, "k")
	good := s.Issue(ticket.Ticket{Queue: "demo", User: "alice", Epoch: "e1", Seq: 7})
	other := newSigner(t, "z").Issue(ticket.Ticket{Queue: "demo", User: "alice", Epoch: "e1", Seq: 7})
	parts := strings.Split(good, ".")
	tests := []struct {
		name, in string
	}{
		{"empty", ""},
		{"garbage", "hello"},
		{"other secret", other},
		{"moved in line", strings.Join([]string{parts[0], parts[1], parts[2], parts[3], "6", parts[5]}, ".")},
		{"leading zero seq", strings.Join([]string{parts[0], parts[1], parts[2], parts[3], "07", parts[5]}, ".")},
		{"other user", strings.Join([]string{parts[0], parts[1], "Ym9i", parts[3], parts[4], parts[5]}, ".")},
		{"another incarnation of the stream", strings.Join([]string{parts[0], parts[1], parts[2], "e2", parts[4], parts[5]}, ".")},
		{"an epoch that is not base 36", strings.Join([]string{parts[0], parts[1], parts[2], "E1", parts[4], parts[5]}, ".")},
		{"the old format", strings.Join([]string{"t1", parts[1], parts[2], parts[4], parts[5]}, ".")},
		{"truncated mac", good[:len(good)-2]},
		{"extra part", good + ".x"},
		{"too long", good + strings.Repeat("A", ticket.MaxLen)},
		{"a newline inside a part", strings.Replace(good, "ZGVt", "ZG\nVt", 1)},
		{"unused bits set in a part's last character (found by FuzzParse)", strings.Join([]string{parts[0], "ZGVtb0", parts[2], parts[3], parts[4], parts[5]}, ".")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, err := s.Parse(tt.in); !errors.Is(err, ticket.ErrInvalid) {
				t.Errorf("Parse(%q) = %v, %v, want ErrInvalid", tt.in, got, err)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	s := newSigner(f, "k")
	f.Add(s.Issue(ticket.Ticket{Queue: "demo", User: "alice", Epoch: "e1", Seq: 1}))
	f.Add("t2.....")
	f.Add("t2.ZGVtbw.YWxpY2U.e1.1.AAAAAAAAAAAAAAAAAAAAAA")
	f.Fuzz(func(t *testing.T, in string) {
		got, err := s.Parse(in)
		if err != nil {
			return
		}
		// Whatever parses must be exactly what this signer issues for it.
		if again := s.Issue(got); again != in {
			t.Fatalf("Parse(%q) accepted a ticket the signer would write as %q", in, again)
		}
	})
}

func BenchmarkParse(b *testing.B) {
	s := newSigner(b, "k")
	str := s.Issue(ticket.Ticket{Queue: "demo", User: "user-123456", Epoch: "lq3k2m1x", Seq: 123456789})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Parse(str); err != nil {
			b.Fatal(err)
		}
	}
}
