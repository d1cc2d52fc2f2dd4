-- x402 batch-settlement channels this facilitator settled a deposit into, and the seller account
-- whose deposit it was (the first one recorded). That account alone may ask the facilitator, as
-- the channels' delegated receiver authorizer, to sign claims for them: a claim raises what the
-- payer owes within the payer's voucher, so nobody else's word may move it.
CREATE TABLE batch_channels (
    network TEXT NOT NULL,
    channel_id TEXT NOT NULL,
    account_id TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (network, channel_id)
);
