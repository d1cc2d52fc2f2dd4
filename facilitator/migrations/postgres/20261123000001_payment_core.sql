-- The payment core (issue 12).
--
-- A proof's claim is its payment row: one INSERT claims the proof and records the payment, so a
-- claim can never point at a payment that does not exist. Claims made by the old separate table
-- whose payment row was never written are dropped with it: those proofs become usable again.
CREATE UNIQUE INDEX payments_proof ON payments (proof_id) WHERE proof_id IS NOT NULL;
DROP TABLE proof_claims;

-- Whose side the owning account is on: `sent` (payer: hosted and local sends) or `received`
-- (payee: every receive, which is exactly the payments that carry a proof).
ALTER TABLE payments ADD COLUMN owner_side TEXT NOT NULL DEFAULT 'sent';
UPDATE payments SET owner_side = 'received' WHERE proof_id IS NOT NULL;

-- One transaction is the own transfer of at most one payment per account and side. Payments that
-- an earlier version recorded with the transaction of another payment of the same account and side
-- (concurrent identical sends signed the same transaction) moved no money of their own: they
-- become failed, naming the transaction they shared.
UPDATE payments
SET status = 'failed',
    error = 'recorded the transaction ' || tx_id || ' of an earlier payment; it moved no funds of its own',
    tx_id = NULL,
    confirmed_at = NULL
WHERE tx_id IS NOT NULL AND EXISTS (
    SELECT 1 FROM payments AS o
    WHERE o.owner_account = payments.owner_account AND o.network = payments.network
      AND o.tx_id = payments.tx_id AND o.owner_side = payments.owner_side AND o.seq < payments.seq
);
CREATE UNIQUE INDEX payments_transaction ON payments (owner_account, network, tx_id, owner_side)
    WHERE tx_id IS NOT NULL;

-- The signed transaction as broadcast (kept to tell, later, whether it can still land).
ALTER TABLE payments ADD COLUMN tx_raw BYTEA;

-- The reconciler's schedule: unfinished payments are looked at when due, most overdue first, and
-- put back with a growing delay while the chain has no verdict, so none can starve the others.
ALTER TABLE payments ADD COLUMN next_check_at BIGINT;
ALTER TABLE payments ADD COLUMN checks BIGINT NOT NULL DEFAULT 0;
UPDATE payments SET next_check_at = updated_at WHERE status IN ('verified', 'submitted', 'pending');
CREATE INDEX payments_due ON payments (next_check_at) WHERE next_check_at IS NOT NULL;
DROP INDEX payments_status;
