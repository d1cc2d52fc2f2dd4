//! Steps 4 and 5 of every job that moves money: claim and record in one write, then submit,
//! broadcast and watch — and the same steps resumed for a payment left unfinished.
//!
//! Write-ahead: the transaction's id and bytes are in the payment's row before it is broadcast,
//! and the payment is `submitted` before it is broadcast. Whoever moves it `verified → submitted`
//! (a compare-and-set) is the one that broadcasts, so a retry racing the first attempt never
//! sends twice. After a broadcast only the chain ends a payment: its verdict within the wait
//! budget, else `pending` for the reconciler.

use std::time::Duration;

use tollgate_protocol::gateway::PaymentStatus;

use super::{PaymentError, Payments, RECONCILE_AFTER_WAIT};
use crate::chains::{Chain, Landed, Outgoing, SendError, Sent, Signable, TxStatus, Watched};
use crate::settlement::{AdvanceError, Event, advance, advance_seen, record_outcome_seen};
use crate::store::{NewPayment, StoreError, StoredPayment};

/// The longest pause between two asks for a verdict while waiting (the first ones are shorter: see
/// [`crate::chains::poll_delay`]).
pub const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Where a payment's transaction comes from.
pub(super) enum Source {
    /// Signed already (by the buyer).
    Ready(Outgoing),
    /// Signed by the facilitator, anew on each attempt.
    Sign(Box<dyn Signable>),
}

/// Most attempts at a transaction of one's own when the store says another payment recorded it.
pub(super) const SIGN_ATTEMPTS: usize = 3;

impl Payments {
    /// Claims, records and settles a new payment with `source`'s transaction on `chain`.
    ///
    /// # Errors
    /// [`PaymentError::ProofUsed`] when another payment holds the proof (nothing was sent);
    /// [`PaymentError::Unavailable`] when signing needs the chain and it cannot be asked;
    /// [`PaymentError::Internal`] when storage fails.
    pub(super) async fn settle_new(
        &self,
        chain: &dyn Chain,
        payment: NewPayment,
        source: Source,
        wait: Duration,
    ) -> Result<StoredPayment, PaymentError> {
        let (mut ready, signer) = match source {
            Source::Ready(outgoing) => (Some(outgoing), None),
            Source::Sign(signer) => (None, Some(signer)),
        };
        for attempt in 1..=SIGN_ATTEMPTS {
            let outgoing = match (ready.take(), &signer) {
                (Some(o), _) => o,
                (None, Some(s)) => s.sign().await?,
                (None, None) => break,
            };
            let row = NewPayment {
                transaction: Some(outgoing.tx_id.clone()),
                tx_raw: Some(outgoing.raw.clone()),
                last_valid_block_height: outgoing.horizon.or(payment.last_valid_block_height),
                next_check_at: Some(self.now() + wait + RECONCILE_AFTER_WAIT),
                ..payment.clone()
            };
            match self.store().insert_payment(&row).await {
                Ok(stored) => return self.drive(chain, stored, outgoing, wait).await,
                // Two sends drew the same unique transaction (rare): sign another.
                Err(StoreError::TransactionUsed { payment_id }) if signer.is_some() && attempt < SIGN_ATTEMPTS => {
                    tracing::info!(payment_id = %payment.id, other = %payment_id, "transaction already recorded; signing another");
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(PaymentError::Internal(format!("payment {}: no transaction of its own after retries", payment.id)))
    }

    /// Records a payment whose transfer is already confirmed (a receipt): claim and record, then
    /// the chain's verdict, read as for any other payment.
    pub(super) async fn record_confirmed(
        &self,
        chain: &dyn Chain,
        payment: NewPayment,
        tx_id: String,
    ) -> Result<StoredPayment, PaymentError> {
        let row =
            NewPayment { transaction: Some(tx_id), next_check_at: Some(self.now() + RECONCILE_AFTER_WAIT), ..payment };
        let stored = self.store().insert_payment(&row).await?;
        self.resume(chain, stored, Duration::ZERO).await
    }

    /// Step 5: submit (the compare-and-set that elects the broadcaster), broadcast, watch.
    async fn drive(
        &self,
        chain: &dyn Chain,
        stored: StoredPayment,
        mut outgoing: Outgoing,
        wait: Duration,
    ) -> Result<StoredPayment, PaymentError> {
        let id = stored.payment.id.clone();
        let submit = Event::Submit { transaction: outgoing.tx_id.clone() };
        let submitted = match advance_seen(self.store(), &stored, &submit, self.now()).await {
            Ok(submitted) => submitted,
            // Another attempt at this payment submitted it first and broadcasts it.
            Err(AdvanceError::Transition(_)) => return self.watch(chain, &stored, wait).await,
            Err(e) => return Err(PaymentError::Internal(e.to_string())),
        };
        match chain.broadcast(&outgoing.raw).await {
            Ok(()) => outgoing.release(Sent::Accepted).await,
            Err(SendError::Uncertain(reason)) => {
                tracing::warn!(payment_id = %id, %reason, "broadcast outcome unknown; watching the chain");
                outgoing.release(Sent::Unknown).await;
            }
            Err(SendError::Rejected(reason)) => {
                outgoing.release(Sent::Unknown).await;
                return self.refused_by_node(chain, &submitted, &outgoing, reason).await;
            }
        }
        self.watch(chain, &submitted, wait).await
    }

    /// The node refused the broadcast. The transaction may be on chain all the same (the buyer
    /// sent it too, or an earlier attempt did): the chain decides; only a transaction it does not
    /// have fails.
    async fn refused_by_node(
        &self,
        chain: &dyn Chain,
        stored: &StoredPayment,
        outgoing: &Outgoing,
        reason: String,
    ) -> Result<StoredPayment, PaymentError> {
        let id = &stored.payment.id;
        match chain.status(&Watched::of(&stored.payment, &outgoing.tx_id)).await {
            Ok(TxStatus::Landed(landed)) => self.record(stored, &landed).await,
            Ok(TxStatus::Unseen | TxStatus::Dropped { .. }) => {
                tracing::info!(payment_id = %id, %reason, "transaction refused by the node");
                self.advance(id, &Event::Fail { reason }).await
            }
            Err(e) => {
                // Unknown either way: the reconciler will ask again.
                tracing::warn!(payment_id = %id, %reason, error = %e, "refused by the node, and the chain cannot be read");
                self.current(id).await
            }
        }
    }

    /// Polls the chain for a verdict on payment `seen`'s transaction for at most `wait`; records
    /// it, or moves the payment to `pending` when the budget runs out. `seen` is the payment as
    /// last written or read here (another writer may have moved it since: the records correct it).
    pub(super) async fn watch(
        &self,
        chain: &dyn Chain,
        seen: &StoredPayment,
        wait: Duration,
    ) -> Result<StoredPayment, PaymentError> {
        let p = &seen.payment;
        let id = &p.id;
        let Some(tx_id) = p.transaction.as_deref() else { return self.current(id).await };
        let watched = Watched::of(p, tx_id);
        let deadline = tokio::time::Instant::now() + wait;
        let mut attempt = 0;
        while !wait.is_zero() {
            match chain.outcome(&watched).await {
                Ok(Some(landed)) => return self.record(seen, &landed).await,
                Ok(None) => {}
                Err(e) => tracing::warn!(payment_id = %id, error = %e, "cannot read the transaction's status yet"),
            }
            let delay = crate::chains::poll_delay(attempt, POLL_INTERVAL);
            if tokio::time::Instant::now() + delay > deadline {
                break;
            }
            tokio::time::sleep(delay).await;
            attempt += 1;
        }
        // Moved on meanwhile (a verdict recorded by the reconciler or a twin request): as it stands.
        self.advance(id, &Event::WaitTimedOut).await
    }

    /// [`advance`], a payment moved on by another writer reported as it stands.
    pub(super) async fn advance(&self, id: &str, event: &Event) -> Result<StoredPayment, PaymentError> {
        match advance(self.store(), id, event, self.now()).await {
            Ok(p) => Ok(p),
            Err(AdvanceError::Transition(_)) => self.current(id).await,
            Err(e) => Err(PaymentError::Internal(e.to_string())),
        }
    }

    /// Records the chain's verdict on `seen`; a payment another writer moved on is reported as it
    /// stands.
    async fn record(&self, seen: &StoredPayment, landed: &Landed) -> Result<StoredPayment, PaymentError> {
        record_outcome_seen(self.store(), seen, landed, self.now())
            .await
            .map_err(|e| PaymentError::Internal(e.to_string()))
    }

    async fn current(&self, id: &str) -> Result<StoredPayment, PaymentError> {
        self.store().get_payment(id).await?.ok_or_else(|| PaymentError::Internal(format!("payment {id} vanished")))
    }

    /// A payment of the caller's, claimed before and not finished (its request failed between
    /// two steps, or is still running): broadcast it if it never was, then watch it.
    pub(super) async fn resume(
        &self,
        chain: &dyn Chain,
        stored: StoredPayment,
        wait: Duration,
    ) -> Result<StoredPayment, PaymentError> {
        let p = &stored.payment;
        let Some(tx_id) = p.transaction.clone() else { return Ok(stored) };
        match (p.status, p.tx_raw.clone()) {
            (PaymentStatus::Verified, Some(raw)) => {
                let outgoing = Outgoing::ready(tx_id, raw, p.last_valid_block_height);
                self.drive(chain, stored, outgoing, wait).await
            }
            // A receipt whose confirmation was not recorded: the chain has it.
            (PaymentStatus::Verified, None) => match chain.status(&Watched::of(p, &tx_id)).await? {
                TxStatus::Landed(landed) => self.record(&stored, &landed).await,
                TxStatus::Unseen | TxStatus::Dropped { .. } => Ok(stored),
            },
            _ => self.watch(chain, &stored, wait).await,
        }
    }
}
