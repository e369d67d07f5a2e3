package throttle

import (
	"net/netip"
	"testing"
)

func TestIPKey(t *testing.T) {
	tests := []struct{ in, want string }{
		{"192.0.2.1", "192.0.2.1"},
		{"2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"},
	}
	for _, tt := range tests {
		if got := ipKey(netip.MustParseAddr(tt.in)); got != tt.want {
			t.Errorf("ipKey(%s) = %s, want %s", tt.in, got, tt.want)
		}
	}
}
