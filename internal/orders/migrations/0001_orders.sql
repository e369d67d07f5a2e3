-- Stock per SKU. available never goes negative: the CHECK is the backstop,
-- the conditional UPDATE (available >= n) is what keeps it so.
CREATE TABLE stock (
    sku        text PRIMARY KEY,
    available  bigint NOT NULL CHECK (available >= 0),
    price      bigint NOT NULL DEFAULT 1000 CHECK (price > 0),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- One row per order. The order id derives from the token id, and the
-- unique key on token_id is the last guard of "one token, one order".
CREATE TABLE orders (
    id         text PRIMARY KEY,
    token_id   text NOT NULL UNIQUE,
    queue      text NOT NULL,
    user_id    text NOT NULL,
    sku        text NOT NULL,
    quantity   integer NOT NULL CHECK (quantity > 0),
    amount     bigint NOT NULL,
    status     text NOT NULL CHECK (status IN ('PENDING', 'PAID', 'FAILED', 'REJECTED')),
    reason     text NOT NULL DEFAULT '',
    payment_id text NOT NULL DEFAULT '',
    deadline   timestamptz NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
