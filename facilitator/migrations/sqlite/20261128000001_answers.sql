-- What a payment bought, counted where every instance sees it (`tollgate_protocol::ticket`): the
-- answers a seller's layer served for it. The first is claimed with the payment (in the same
-- transaction as its insert), each repeat by one guarded upsert that only applies while the
-- ticket has answers left, within its window, for the request answered first; an answer that
-- never reached its buyer is given back. `uses` and `window_ms` are the seller's terms as first
-- given; `opened_at` is when the ticket last went from no answer served to one (Unix ms).
CREATE TABLE answers (
    payment_id TEXT PRIMARY KEY,
    uses BIGINT NOT NULL,
    served BIGINT NOT NULL,
    request TEXT,
    window_ms BIGINT NOT NULL,
    opened_at BIGINT NOT NULL
);
