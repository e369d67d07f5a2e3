package catalog

import (
	"iter"
	"maps"
	"slices"
)

// StockPeers is the names of the queues in all, other than cfg's, that
// follow stock and sell any of cfg's SKUs, sorted: the queues that share
// those SKUs' units with cfg (see waitqueue.Share). None unless cfg itself
// follows stock.
func StockPeers(cfg Config, all []Config) []string {
	return stockPeers(cfg, slices.Values(all))
}

// StockPeers is StockPeers of the queues the catalog holds, read in place:
// every tick of a stock-aware queue asks, and copying the whole catalog
// (List) for it would cost as much as the tick.
func (c *Catalog) StockPeers(cfg Config) []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return stockPeers(cfg, maps.Values(c.queues))
}

func stockPeers(cfg Config, all iter.Seq[Config]) []string {
	if !cfg.StockAwareness() {
		return nil
	}
	mine := cfg.Products()
	var peers []string
	for o := range all {
		if o.Name == cfg.Name || !o.StockAwareness() {
			continue
		}
		if slices.ContainsFunc(o.Products(), func(sku string) bool { return slices.Contains(mine, sku) }) {
			peers = append(peers, o.Name)
		}
	}
	slices.Sort(peers)
	return peers
}
