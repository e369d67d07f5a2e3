-- What each queue sold, per SKU: the ops dashboard reads it. A view, so
-- the gateway's role reads these sums and not the orders (no user ids).
CREATE VIEW sales AS
  SELECT queue, sku, sum(quantity)::bigint AS sold
  FROM orders WHERE status = 'PAID'
  GROUP BY queue, sku;
REVOKE ALL ON sales FROM PUBLIC;
GRANT SELECT ON sales TO usher_gateway;
