package catalog_test

import (
	"fmt"
	"testing"

	"usher/internal/catalog"
	"usher/internal/testenv"
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

// The catalog answers it from the queues it holds, as List would.
func TestTheCatalogNamesAQueuesStockPeers(t *testing.T) {
	c := open(t, broker(t, testenv.NATS(t)))
	p := testenv.Name(t)
	for _, q := range []struct{ name, sku string }{{p + "-a", p + "-x"}, {p + "-b", p + "-x"}, {p + "-c", p + "-y"}} {
		cfg := catalog.Defaults(q.name)
		cfg.SKU = q.sku
		if _, err := c.Put(t.Context(), cfg); err != nil {
			t.Fatal(err)
		}
	}
	a, _ := c.Get(p + "-a")
	if got, want := fmt.Sprint(c.StockPeers(a)), fmt.Sprint(catalog.StockPeers(a, c.List())); got != want || got != "["+p+"-b]" {
		t.Fatalf("StockPeers(%s) = %s, List says %s; want [%s-b]", a.Name, got, want, p)
	}
}
