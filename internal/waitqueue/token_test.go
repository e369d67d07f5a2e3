package waitqueue_test

import (
	"testing"
	"usher/internal/waitqueue"
)

func TestParseTokenID(t *testing.T) {
	tests := []struct {
		in    string
		q     string
		epoch string
		seq   uint64
		valid bool
	}{
		{"demo:lq3k2m1x:42", "demo", "lq3k2m1x", 42, true},
		{"a-b_c:e1:1", "a-b_c", "e1", 1, true},
		{"demo:42", "", "", 0, false}, // before epochs
		{"demo", "", "", 0, false},
		{":e1:1", "", "", 0, false},
		{"demo::1", "", "", 0, false},
		{"demo:e1:x", "", "", 0, false},
		{"demo:e1:0", "", "", 0, false},
		{"demo:e1:1:2", "", "", 0, false},
	}
	for _, tt := range tests {
		q, ep, seq, ok := waitqueue.ParseTokenID(tt.in)
		if q != tt.q || ep != tt.epoch || seq != tt.seq || ok != tt.valid {
			t.Errorf("ParseTokenID(%q) = %q, %q, %d, %v, want %q, %q, %d, %v", tt.in, q, ep, seq, ok, tt.q, tt.epoch, tt.seq, tt.valid)
		}
		if ok && waitqueue.TokenID(q, ep, seq) != tt.in {
			t.Errorf("TokenID(ParseTokenID(%q)) = %q", tt.in, waitqueue.TokenID(q, ep, seq))
		}
	}
}
