-- Network fees the facilitator pays for an account's settlements (x402 `exact`), per chain family
-- and UTC day (days since the Unix epoch), in native base units; each settlement adds the most
-- it can cost before it is sent, and only while the sum stays within the plan's daily budget.
-- `largest` is the dearest single settlement counted that day: a verify is refused when the
-- budget left would not cover another like it.
CREATE TABLE sponsorship (
    account_id TEXT NOT NULL,
    family TEXT NOT NULL,
    day BIGINT NOT NULL,
    spent BIGINT NOT NULL,
    largest BIGINT NOT NULL,
    PRIMARY KEY (account_id, family, day)
);
