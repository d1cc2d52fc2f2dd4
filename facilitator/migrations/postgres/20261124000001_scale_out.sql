-- Several instances on one database (issue 14).

-- The reconciler's claim: an instance that takes a due payment marks it claimed until this time
-- (ms), so the others skip it (`FOR UPDATE SKIP LOCKED` while claiming); a claim left by an
-- instance that died lapses and the payment is taken again.
ALTER TABLE payments ADD COLUMN claimed_until BIGINT;

-- The next nonce of each EVM account the facilitator sends from (custodial wallets and the
-- EIP-3009 signer). A sender holds the row locked (`SELECT … FOR UPDATE`) from reading it to
-- knowing its broadcast reached the node, so no two instances sign with one nonce. NULL: ask the
-- chain.
CREATE TABLE evm_nonces (
    network TEXT NOT NULL,
    address TEXT NOT NULL,
    next_nonce BIGINT,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (network, address)
);

-- Every payment change, written in the transaction that makes it, and announced on
-- `tollgate_payment_events` (`<schema>:<id>`: channels are database-wide, and instances of another
-- schema ignore it) when that transaction commits: every instance's WebSocket
-- feed follows every change, in commit order, each once.
CREATE TABLE payment_events (
    id BIGSERIAL PRIMARY KEY,
    payment_id TEXT NOT NULL,
    owner_account TEXT NOT NULL,
    counterparty_account TEXT,
    from_address TEXT NOT NULL,
    to_address TEXT NOT NULL,
    status TEXT NOT NULL,
    body TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX payment_events_created ON payment_events (created_at);

CREATE FUNCTION tollgate_announce_payment_event() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('tollgate_payment_events', TG_TABLE_SCHEMA || ':' || NEW.id::text);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER payment_events_announce AFTER INSERT ON payment_events
    FOR EACH ROW EXECUTE FUNCTION tollgate_announce_payment_event();

-- A deleted key is announced on `tollgate_api_keys` (`<schema>:<key id>`), whoever deletes it (an instance or the CLI),
-- so every instance drops its cached verdicts at once.
CREATE FUNCTION tollgate_announce_key_deleted() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('tollgate_api_keys', TG_TABLE_SCHEMA || ':' || OLD.id);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER api_keys_announce_delete AFTER DELETE ON api_keys
    FOR EACH ROW EXECUTE FUNCTION tollgate_announce_key_deleted();
