-- Custodial wallets: the secret key is sealed under the master key (XChaCha20-Poly1305,
-- the address as associated data); only the owning account may spend from it.
CREATE TABLE wallets (
    address TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts (id),
    family TEXT NOT NULL,
    sealed_secret TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX wallets_account ON wallets (account_id);
