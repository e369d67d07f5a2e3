package catalog_test

import (
	"fmt"
	"testing"

	"usher/shared/catalog"
)

// A queue shares its SKUs' units with every other queue that follows
// stock and sells any of them, variants included; a queue that does not
// follow stock neither shares nor is shared with.
func TestStockPeersAreTheStockAwareQueuesSellingASharedSKU(t *testing.T) {
	off := false
	q := func(name string, skus ...string) catalog.Config {
		c := catalog.Defaults(name)
		c.SKUs = skus
		return c
	}
	plain := q("plain", "x")
	plain.StockAware = &off
	all := []catalog.Config{q("a", "x"), q("b", "x", "y"), q("c", "y"), q("d", "z"), q("e"), plain}
	tests := []struct {
		cfg  catalog.Config
		want string
	}{
		{all[0], "[b]"},
		{all[1], "[a c]"},
		{all[2], "[b]"},
		{all[3], "[]"},
		{all[4], "[]"},
		{plain, "[]"},
	}
	for _, tt := range tests {
		if got := fmt.Sprint(catalog.StockPeers(tt.cfg, all)); got != tt.want {
			t.Errorf("StockPeers(%s) = %s, want %s", tt.cfg.Name, got, tt.want)
		}
	}
}
