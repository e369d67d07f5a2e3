-- usher:no-transaction
-- The units a queue sold (the sales view: the admin view and the ops
-- dashboard read it, the dashboard once a second) sum that queue's PAID
-- orders: without this index the sum read the whole table, every queue's
-- orders ever taken (1,000,000 rows: 115 ms and three processes, a
-- parallel scan; with it, the queue's own 100,000: 29 ms). The key holds
-- columns an order never changes, so paying or failing one still updates
-- it in place (a HOT update, no index touched); an index whose predicate
-- names the status (WHERE status = 'PAID') would make each of those
-- updates write every index of the table.
--
-- Built CONCURRENTLY for the reasons 0005 gives: orders keep being
-- written while it builds, and an invalid index an interrupted build left
-- is dropped first.
DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
             WHERE c.relname = 'orders_queue_sku' AND NOT i.indisvalid) THEN
    DROP INDEX orders_queue_sku;
  END IF;
END $$;

CREATE INDEX CONCURRENTLY IF NOT EXISTS orders_queue_sku ON orders (queue, sku);
