-- Every change of a SKU's stock bumps its version, so that the copies kept
-- elsewhere (each queue's line in Redis, for stock-aware admission) apply
-- changes in the order they happened, whoever reports them.
ALTER TABLE stock ADD COLUMN version bigint NOT NULL DEFAULT 1;
