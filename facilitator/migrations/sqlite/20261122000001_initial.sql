-- Accounts own API keys, custodial wallets and payments.
CREATE TABLE accounts (
    id TEXT PRIMARY KEY,
    created_at BIGINT NOT NULL
);

-- API keys: only a SHA-256 hash is kept; `lookup` (a prefix of it) finds the row.
CREATE TABLE api_keys (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts (id),
    env TEXT NOT NULL,
    lookup TEXT NOT NULL UNIQUE,
    hash TEXT NOT NULL,
    hint TEXT NOT NULL,
    plan TEXT NOT NULL,
    rpm BIGINT,
    label TEXT,
    created_at BIGINT NOT NULL,
    last_used_at BIGINT
);
CREATE INDEX api_keys_account ON api_keys (account_id);

CREATE TABLE payments (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    owner_account TEXT NOT NULL,
    counterparty_account TEXT,
    status TEXT NOT NULL,
    mode TEXT NOT NULL,
    network TEXT NOT NULL,
    from_address TEXT NOT NULL,
    to_address TEXT NOT NULL,
    amount_atomic TEXT NOT NULL,
    asset TEXT NOT NULL,
    decimals BIGINT NOT NULL,
    fee_atomic TEXT,
    tx_id TEXT,
    resource TEXT,
    metadata TEXT,
    proof_id TEXT,
    expires_at BIGINT,
    last_valid_block_height BIGINT,
    error TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    confirmed_at BIGINT
);
-- Unfinished payments are reconciled at start-up.
CREATE INDEX payments_status ON payments (status);

-- History index: one row per (owning account, wallet, side) of each payment.
CREATE TABLE wallet_payments (
    account_id TEXT NOT NULL,
    wallet TEXT NOT NULL,
    direction TEXT NOT NULL,
    seq BIGINT NOT NULL,
    PRIMARY KEY (account_id, wallet, direction, seq)
) WITHOUT ROWID;
CREATE INDEX wallet_payments_all ON wallet_payments (account_id, wallet, seq, direction);

-- Running totals so that `total` in history answers costs one row read.
CREATE TABLE wallet_payment_counts (
    account_id TEXT NOT NULL,
    wallet TEXT NOT NULL,
    direction TEXT NOT NULL,
    n BIGINT NOT NULL,
    PRIMARY KEY (account_id, wallet, direction)
) WITHOUT ROWID;

-- A proof settles at most once: its identity is claimed here before any chain call.
CREATE TABLE proof_claims (
    proof_id TEXT PRIMARY KEY,
    payment_id TEXT NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE idempotency_keys (
    key_id TEXT NOT NULL,
    idem_key TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    state TEXT NOT NULL,
    status BIGINT,
    body TEXT,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (key_id, idem_key)
);
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);
