-- usher:no-transaction
-- The limit per user (maxPerUser) sums a user's own orders of a SKU while
-- the SKU's stock row is locked: without this index that sum read the whole
-- table, every order serialised behind it (with 200,000 orders in the
-- table, 24 orders/s on one hot SKU; BenchmarkPlaceWithALimitPerUser).
--
-- Built CONCURRENTLY, outside a transaction: orders keep being written
-- while it builds (a plain CREATE INDEX blocks every write to orders for as
-- long as the build takes, on a large table the order path's outage). A
-- build that was interrupted leaves an invalid index under the name, which
-- IF NOT EXISTS would keep: it is dropped first (a moment's lock, no build).
DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
             WHERE c.relname = 'orders_user_sku' AND NOT i.indisvalid) THEN
    DROP INDEX orders_user_sku;
  END IF;
END $$;

CREATE INDEX CONCURRENTLY IF NOT EXISTS orders_user_sku ON orders (user_id, sku);
