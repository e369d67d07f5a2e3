-- The limit per user (maxPerUser) sums a user's own orders of a SKU while
-- the SKU's stock row is locked: without this index that sum read the whole
-- table, every order serialised behind it (with 200,000 orders in the
-- table, 24 orders/s on one hot SKU; BenchmarkPlaceWithALimitPerUser).
CREATE INDEX IF NOT EXISTS orders_user_sku ON orders (user_id, sku);
