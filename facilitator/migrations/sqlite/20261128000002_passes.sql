-- Access for a period, sold to the wallet that paid (`tollgate_protocol::ticket::PassTerms`): one
-- row per payment that bought a pass, written in the transaction that records the payment. A
-- sign-in (`sign-in-with-x`) of that wallet for the same seller account and scope is served until
-- `valid_until` (Unix ms), while the payment is confirmed.
CREATE TABLE passes (
    payment_id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL,
    scope TEXT NOT NULL,
    payer TEXT NOT NULL,
    network TEXT NOT NULL,
    valid_until BIGINT NOT NULL
);
CREATE INDEX passes_holder ON passes (account_id, scope, payer, valid_until);

-- Each signed sign-in message is used once, across every instance: its nonce is claimed here (per
-- seller account) by an insert that a second claim cannot repeat. Rows past `expires_at` (Unix ms,
-- when the message could no longer be used) are purged.
CREATE TABLE sign_in_nonces (
    account_id TEXT NOT NULL,
    nonce TEXT NOT NULL,
    expires_at BIGINT NOT NULL,
    PRIMARY KEY (account_id, nonce)
);
CREATE INDEX sign_in_nonces_expiry ON sign_in_nonces (expires_at);
