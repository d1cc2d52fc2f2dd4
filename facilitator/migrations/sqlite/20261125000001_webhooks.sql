-- Signed webhooks (issue 15).

-- An account's endpoints. The signing secret is sealed under the master key (the endpoint id is
-- the associated data), because the daemon must sign with it: it cannot be hashed.
CREATE TABLE webhook_endpoints (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL,
    url TEXT NOT NULL,
    description TEXT,
    sealed_secret TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX webhook_endpoints_account ON webhook_endpoints (account_id);

-- The outbox: one row per (endpoint, event), written in the transaction that changes the payment,
-- so a change is never recorded without its deliveries, nor a delivery without its change.
-- A sender claims due rows (`claimed_until`), so two senders do not
-- send one row at once; a claim left by an instance that died lapses, and the row is sent again
-- (at least once).
CREATE TABLE webhook_deliveries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    endpoint_id TEXT NOT NULL,
    account_id TEXT NOT NULL,
    event_id TEXT NOT NULL,
    event_type TEXT NOT NULL,
    body TEXT NOT NULL,
    state TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at BIGINT NOT NULL,
    claimed_until BIGINT,
    last_status INTEGER,
    last_error TEXT,
    created_at BIGINT NOT NULL,
    delivered_at BIGINT,
    UNIQUE (endpoint_id, event_id)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (state, next_attempt_at);
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (endpoint_id, id);
