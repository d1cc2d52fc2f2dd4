-- One transaction is the own transfer of at most one payment per side (payer's, payee's),
-- whichever account records it. Before, the rule held per account: another account could build
-- a local-mode payment with the same wallets and amount and confirm it with a transfer already
-- recorded (a hosted send, say), making one transfer look like two payments to its payee.
-- Rows recorded that way moved no money of their own: they become failed, naming the
-- transaction they shared with an earlier payment.
UPDATE payments
SET status = 'failed',
    error = 'recorded the transaction ' || tx_id || ' of an earlier payment; it moved no funds of its own',
    tx_id = NULL,
    confirmed_at = NULL,
    next_check_at = NULL
WHERE tx_id IS NOT NULL AND EXISTS (
    SELECT 1 FROM payments AS o
    WHERE o.network = payments.network AND o.tx_id = payments.tx_id
      AND o.owner_side = payments.owner_side AND o.seq < payments.seq
);
DROP INDEX payments_transaction;
CREATE UNIQUE INDEX payments_transaction ON payments (network, tx_id, owner_side) WHERE tx_id IS NOT NULL;
