-- Several instances on one database (issue 14). SQLite serves one instance; the claim column
-- exists so both engines share the reconciler's queries.

-- The reconciler's claim (ms): the others skip a payment claimed until a later time.
ALTER TABLE payments ADD COLUMN claimed_until BIGINT;
