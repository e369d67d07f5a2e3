package catalog

import "slices"

// StockPeers is the names of the queues in all, other than cfg's, that
// follow stock and sell any of cfg's SKUs: the queues that share those
// SKUs' units with cfg (see waitqueue.Share). None unless cfg itself
// follows stock.
func StockPeers(cfg Config, all []Config) []string {
	if !cfg.StockAwareness() {
		return nil
	}
	mine := cfg.Products()
	var peers []string
	for _, o := range all {
		if o.Name == cfg.Name || !o.StockAwareness() {
			continue
		}
		if slices.ContainsFunc(o.Products(), func(sku string) bool { return slices.Contains(mine, sku) }) {
			peers = append(peers, o.Name)
		}
	}
	return peers
}
