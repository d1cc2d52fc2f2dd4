-- The discovery catalog (x402 `bazaar`): what sellers settle through this facilitator and declared
-- findable. One row per (seller account, resource URL, MCP tool name; '' for an HTTP route),
-- written from the seller's side of a confirmed settlement: the resource and declaration the
-- seller's call names, never a buyer's echo. A seller's entry is its own: another account naming
-- the same URL gets a row of its own and cannot change this one.
CREATE TABLE discovery_resources (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL,
    url TEXT NOT NULL,
    tool_name TEXT NOT NULL,
    -- `http` or `mcp`.
    kind TEXT NOT NULL,
    x402_version BIGINT NOT NULL,
    description TEXT NOT NULL,
    mime_type TEXT NOT NULL,
    -- Service metadata, soft-dropped by the bazaar rules before it is written.
    service_name TEXT,
    tags TEXT NOT NULL,
    icon_url TEXT,
    -- The declaration (JSON: {"bazaar": {...}}).
    extensions TEXT NOT NULL,
    -- Lower-case words searched by `GET /discovery/search`.
    search_text TEXT NOT NULL,
    -- 1: the seller took it out of the lists (its own list still shows it).
    hidden BIGINT NOT NULL DEFAULT 0,
    created_at BIGINT NOT NULL,
    -- Unix ms of the last settlement: entries not settled for `[discovery] max_age_days` are not
    -- listed, then purged.
    last_settled_at BIGINT NOT NULL,
    UNIQUE (account_id, url, tool_name)
);
CREATE INDEX discovery_resources_listed ON discovery_resources (hidden, last_settled_at);

-- The ways to pay an entry was settled in (its `accepts`, and the list's `scheme`, `network` and
-- `payTo` filters): one row per (scheme, network, recipient, asset), the newest requirement of
-- each, at most 8 per entry (the most recently settled).
CREATE TABLE discovery_accepts (
    resource_id TEXT NOT NULL,
    scheme TEXT NOT NULL,
    network TEXT NOT NULL,
    pay_to TEXT NOT NULL,
    asset TEXT NOT NULL,
    -- The requirement as settled (JSON).
    requirement TEXT NOT NULL,
    settled_at BIGINT NOT NULL,
    PRIMARY KEY (resource_id, scheme, network, pay_to, asset)
);
CREATE INDEX discovery_accepts_filter ON discovery_accepts (scheme, network, pay_to);
