package httpapi

import (
	"net/netip"
	"strings"
	"testing"
)

func mustClientIPs(t testing.TB, proxies []string, header string) ClientIPs {
	t.Helper()
	ips, err := ParseClientIPs(proxies, header)
	if err != nil {
		t.Fatal(err)
	}
	return ips
}

func TestClientIP(t *testing.T) {
	behindLB := []string{"10.0.0.0/8", "2001:db8:ffff::/48"}
	tests := []struct {
		name    string
		proxies []string
		header  string
		peer    string
		values  []string
		want    string
	}{
		{"no proxies: the socket's peer, whatever the headers say", nil, "", "203.0.113.9", []string{"1.2.3.4"}, "203.0.113.9"},
		{"an untrusted peer's header is ignored", behindLB, "X-Forwarded-For", "203.0.113.9", []string{"1.2.3.4"}, "203.0.113.9"},
		{"behind the LB: the hop it appended", behindLB, "X-Forwarded-For", "10.1.1.1", []string{"198.51.100.7"}, "198.51.100.7"},
		{"what a client writes in front is not believed", behindLB, "X-Forwarded-For", "10.1.1.1", []string{"1.2.3.4, 198.51.100.7"}, "198.51.100.7"},
		{"trusted hops are skipped", behindLB, "X-Forwarded-For", "10.1.1.1", []string{"198.51.100.7, 10.2.2.2,10.3.3.3"}, "198.51.100.7"},
		{"several header lines read as one list", behindLB, "X-Forwarded-For", "10.1.1.1", []string{"198.51.100.7", "10.2.2.2"}, "198.51.100.7"},
		{"garbage stops at the nearest good hop", behindLB, "X-Forwarded-For", "10.1.1.1", []string{"<script>, 10.2.2.2"}, "10.2.2.2"},
		{"an empty header: the peer", behindLB, "X-Forwarded-For", "10.1.1.1", nil, "10.1.1.1"},
		{"every hop trusted: the farthest", behindLB, "X-Forwarded-For", "10.1.1.1", []string{"10.9.9.9"}, "10.9.9.9"},
		{"IPv6 and mapped IPv4", behindLB, "X-Forwarded-For", "::ffff:10.1.1.1", []string{"[2001:db8::1]", "2001:db8::2"}, "2001:db8::2"},
		{"a single-address header", []string{"173.245.48.0/20"}, "CF-Connecting-IP", "173.245.48.1", []string{" 198.51.100.7 "}, "198.51.100.7"},
		{"a single-address header twice is not believed", []string{"173.245.48.0/20"}, "CF-Connecting-IP", "173.245.48.1", []string{"1.1.1.1", "2.2.2.2"}, "173.245.48.1"},
		{"a single-address header with garbage", []string{"173.245.48.0/20"}, "CF-Connecting-IP", "173.245.48.1", []string{"nope"}, "173.245.48.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ips := mustClientIPs(t, tt.proxies, tt.header)
			var values [][]byte
			for _, v := range tt.values {
				values = append(values, []byte(v))
			}
			got := ips.Resolve(netip.MustParseAddr(tt.peer), values)
			if got.String() != tt.want {
				t.Errorf("resolve(%s, %q) = %s, want %s", tt.peer, tt.values, got, tt.want)
			}
		})
	}
}

func TestParseClientIPsRefuses(t *testing.T) {
	tests := []struct {
		name    string
		proxies []string
		header  string
	}{
		{"a header without trusted proxies", nil, "X-Forwarded-For"},
		{"a proxy that is no address", []string{"10.0.0.0/8", "lb.internal"}, ""},
		{"a header name with a space", []string{"10.0.0.0/8"}, "X Forwarded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ParseClientIPs(tt.proxies, tt.header); err == nil {
				t.Errorf("ParseClientIPs(%q, %q) = nil error", tt.proxies, tt.header)
			}
		})
	}
	ips := mustClientIPs(t, []string{"10.0.0.0/8"}, "")
	if ips.Header() != "X-Forwarded-For" {
		t.Errorf("header with proxies and none named = %q, want X-Forwarded-For", ips.Header())
	}
}

// Whatever a client writes into the header, the answer is the peer or one
// of the header's own entries, and the peer when it is not trusted.
func FuzzClientIP(f *testing.F) {
	ips := mustClientIPs(f, []string{"10.0.0.0/8", "fd00::/8"}, "X-Forwarded-For")
	f.Add("10.0.0.1", "1.2.3.4, 10.0.0.2")
	f.Add("203.0.113.1", "1.2.3.4")
	f.Add("fd00::1", ",,, ,[::1], fe80::1%eth0")
	f.Fuzz(func(t *testing.T, peer, header string) {
		p, err := netip.ParseAddr(peer)
		if err != nil {
			return
		}
		p = p.Unmap()
		got := ips.Resolve(p, [][]byte{[]byte(header)})
		if !ips.IsTrusted(p) && got != p {
			t.Fatalf("resolve(%s, %q) = %s: believed an untrusted peer's header", peer, header, got)
		}
		if got == p {
			return
		}
		for _, hop := range strings.Split(header, ",") {
			if a, err := netip.ParseAddr(strings.TrimSpace(hop)); err == nil && a.Unmap() == got {
				return
			}
		}
		t.Fatalf("resolve(%s, %q) = %s, an address from nowhere", peer, header, got)
	})
}
