//! Settling one signed transaction, the same way on every chain.
//!
//! 1. Claim the proof's identity (a unique row): a second request with the same proof stops
//!    here and gets the stored outcome — nothing is broadcast twice.
//! 2. Record the payment (`verified`), then the transaction id (`submitted`) *before*
//!    broadcasting: after a crash the id is known and the chain can be asked about it.
//! 3. Broadcast. A refusal by the node fails the payment; a lost answer does not (it may land).
//! 4. Watch for a verdict until the wait budget ends; without one the payment is `pending`,
//!    never `failed`, and a later check settles it from chain evidence.

use std::time::Duration;

use super::{AdvanceError, Event, advance};
use crate::chains::{ChainError, Ledger, SendError, TxOutcome};
use crate::clock::Clock;
use crate::store::{NewPayment, Store, StoreError, StoredPayment};

/// The longest pause between two asks for a verdict while waiting (the first ones are shorter: see
/// [`crate::chains::poll_delay`]).
pub const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// What to settle.
#[derive(Debug, Clone)]
pub struct Settlement {
    /// The payment to record (status `verified`); `proof_id` is claimed first when set.
    pub payment: NewPayment,
    /// The transaction's id (Solana signature, EVM hash), known before broadcasting.
    pub tx_id: String,
    /// The signed transaction, in the chain's wire format.
    pub tx_bytes: Vec<u8>,
    /// How long to wait for a verdict before answering `pending`.
    pub wait: Duration,
}

/// Why settlement did not produce a record.
#[derive(Debug, thiserror::Error)]
pub enum SettleError {
    /// The proof was claimed before, by this payment.
    #[error("proof already used (payment {payment_id})")]
    AlreadyClaimed {
        /// The payment that claimed it.
        payment_id: String,
    },
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The transaction could not be serialized for broadcasting.
    #[error("cannot encode the transaction: {0}")]
    Encode(String),
    /// The chain could not be asked what building the transaction needs; nothing was sent.
    #[error("{0}")]
    Chain(String),
    /// The state machine refused a step (another writer moved the payment).
    #[error(transparent)]
    Advance(#[from] AdvanceError),
}

impl From<SettleError> for crate::error::ApiError {
    /// 502 when the chain could not be asked, 402 for a used proof, 500 (no detail) otherwise.
    fn from(e: SettleError) -> Self {
        match e {
            SettleError::Chain(message) => Self::verification_failed(message),
            SettleError::AlreadyClaimed { payment_id } => Self::new(
                tollgate_protocol::ErrorCode::InvalidPaymentProof,
                format!("proof already used (payment {payment_id})"),
            ),
            other => Self::internal(other),
        }
    }
}

/// Settles `s` on `ledger`, returning the payment as it stands when the wait ends.
///
/// # Errors
/// [`SettleError::AlreadyClaimed`] for a proof used before; storage failures otherwise. Chain
/// failures are not errors: they end in the payment's status (`failed`, or `pending` when unknown).
pub async fn settle(
    store: &dyn Store,
    clock: &dyn Clock,
    ledger: &dyn Ledger,
    s: Settlement,
) -> Result<StoredPayment, SettleError> {
    match submit(store, clock, ledger, &s).await? {
        Submitted::Refused(failed) => Ok(*failed),
        Submitted::Broadcast => Ok(wait_for_verdict(store, clock, ledger, &s.payment.id, &s.tx_id, s.wait).await?),
    }
}

/// How [`submit`] ended.
#[derive(Debug)]
pub enum Submitted {
    /// Broadcast (or possibly broadcast): wait for the verdict.
    Broadcast,
    /// The node refused it: the payment is `failed`.
    Refused(Box<StoredPayment>),
}

/// Steps 1–3 of [`settle`] without the wait: claim, record, write the id ahead, broadcast. For
/// callers that must hold a lock until the broadcast (an account's nonce) but not during the wait.
///
/// # Errors
/// [`SettleError::AlreadyClaimed`] for a proof used before; storage failures otherwise.
pub async fn submit(
    store: &dyn Store,
    clock: &dyn Clock,
    ledger: &dyn Ledger,
    s: &Settlement,
) -> Result<Submitted, SettleError> {
    let id = &s.payment.id;
    claim_and_record(store, clock, &s.payment, &s.tx_id).await?;
    match ledger.broadcast(&s.tx_bytes).await {
        Ok(()) => Ok(Submitted::Broadcast),
        Err(SendError::Rejected(reason)) => {
            tracing::info!(payment_id = %id, %reason, "transaction refused by the node");
            Ok(Submitted::Refused(Box::new(advance(store, id, &Event::Fail { reason }, clock.now()).await?)))
        }
        Err(SendError::Uncertain(reason)) => {
            tracing::warn!(payment_id = %id, %reason, "broadcast outcome unknown; watching the chain");
            Ok(Submitted::Broadcast)
        }
    }
}

/// Records a payment whose transaction the chain has already confirmed (a receipt): claims the
/// proof, then walks `verified → submitted → confirmed`.
///
/// # Errors
/// [`SettleError::AlreadyClaimed`] for a proof used before; storage failures otherwise.
pub async fn record_confirmed(
    store: &dyn Store,
    clock: &dyn Clock,
    payment: NewPayment,
    tx_id: &str,
    fee: Option<tollgate_protocol::AtomicAmount>,
) -> Result<StoredPayment, SettleError> {
    claim_and_record(store, clock, &payment, tx_id).await?;
    Ok(advance(store, &payment.id, &Event::Confirm { fee }, clock.now()).await?)
}

/// Steps 1 and 2: claim the proof (when there is one), record the payment, then its transaction
/// id — all before anything reaches the chain.
async fn claim_and_record(
    store: &dyn Store,
    clock: &dyn Clock,
    payment: &NewPayment,
    tx_id: &str,
) -> Result<(), SettleError> {
    if let Some(proof) = &payment.proof_id
        && !store.claim_proof(proof, &payment.id, clock.now()).await?
    {
        let payment_id = store.proof_claim(proof).await?.unwrap_or_default();
        return Err(SettleError::AlreadyClaimed { payment_id });
    }
    store.insert_payment(payment).await?;
    advance(store, &payment.id, &Event::Submit { transaction: tx_id.to_owned() }, clock.now()).await?;
    Ok(())
}

/// Polls the chain for a submitted payment's verdict for at most `wait`; records it, or moves
/// the payment to `pending` when the budget runs out.
///
/// # Errors
/// Storage failures and refused transitions.
pub async fn wait_for_verdict(
    store: &dyn Store,
    clock: &dyn Clock,
    ledger: &dyn Ledger,
    id: &str,
    tx_id: &str,
    wait: Duration,
) -> Result<StoredPayment, AdvanceError> {
    if wait.is_zero() {
        return advance_or_settled(store, id, &Event::WaitTimedOut, clock.now()).await;
    }
    let deadline = tokio::time::Instant::now() + wait;
    for attempt in 0.. {
        match ledger.outcome(tx_id).await {
            Ok(Some(outcome)) => return record(store, clock, id, outcome).await,
            Ok(None) => {}
            Err(ChainError(e)) => {
                tracing::warn!(payment_id = %id, error = %e, "cannot read the transaction's status yet")
            }
        }
        let delay = crate::chains::poll_delay(attempt, POLL_INTERVAL);
        if tokio::time::Instant::now() + delay > deadline {
            break;
        }
        tokio::time::sleep(delay).await;
    }
    advance_or_settled(store, id, &Event::WaitTimedOut, clock.now()).await
}

async fn record(
    store: &dyn Store,
    clock: &dyn Clock,
    id: &str,
    outcome: TxOutcome,
) -> Result<StoredPayment, AdvanceError> {
    let event = match outcome {
        TxOutcome::Confirmed { fee } => Event::Confirm { fee },
        TxOutcome::Failed { reason } => Event::Fail { reason },
    };
    advance_or_settled(store, id, &event, clock.now()).await
}

/// [`advance`], except that a payment another writer (the reconciler, a twin request) moved on
/// meanwhile is returned as it stands instead of failing: once broadcast, whoever records the
/// chain's verdict first wins, and the others report that verdict.
async fn advance_or_settled(
    store: &dyn Store,
    id: &str,
    event: &Event,
    at: chrono::DateTime<chrono::Utc>,
) -> Result<StoredPayment, AdvanceError> {
    match advance(store, id, event, at).await {
        Err(AdvanceError::Transition(e)) => {
            let current = store.get_payment(id).await?.ok_or(StoreError::NotFound)?;
            tracing::debug!(payment_id = %id, error = %e, status = current.payment.status.as_str(), "moved on by another writer");
            Ok(current)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use async_trait::async_trait;
    use tollgate_protocol::gateway::PaymentStatus;
    use tollgate_protocol::{AtomicAmount, Network};

    use super::*;
    use crate::clock::ManualClock;
    use crate::store::suite::{TestDb, payment};

    /// A chain that has confirmed everything.
    struct Confirmed;

    #[async_trait]
    impl Ledger for Confirmed {
        fn network(&self) -> &Network {
            static DEVNET: std::sync::OnceLock<Network> = std::sync::OnceLock::new();
            DEVNET.get_or_init(Network::solana_devnet)
        }
        async fn broadcast(&self, _tx: &[u8]) -> Result<(), SendError> {
            Ok(())
        }
        async fn outcome(&self, _tx_id: &str) -> Result<Option<TxOutcome>, ChainError> {
            Ok(Some(TxOutcome::Confirmed { fee: Some(AtomicAmount(5000)) }))
        }
    }

    /// The reconciler may record the verdict while the settling request waits for it; the
    /// request then reports that verdict instead of failing.
    #[tokio::test]
    async fn a_verdict_recorded_by_another_writer_is_reported_not_failed() {
        let db = TestDb::sqlite().await;
        let store: Arc<dyn Store> = db.store.clone();
        let t0 = chrono::DateTime::from_timestamp(1_790_000_000, 0).unwrap();
        let clock = ManualClock::new(t0);
        store.insert_payment(&payment("pay_1", "acct", "f", "t", t0)).await.unwrap();
        advance(&*store, "pay_1", &Event::Submit { transaction: "sig".into() }, t0).await.unwrap();
        // The reconciler gets there first.
        advance(&*store, "pay_1", &Event::Confirm { fee: None }, t0).await.unwrap();
        let seen = wait_for_verdict(&*store, &clock, &Confirmed, "pay_1", "sig", Duration::from_secs(1)).await.unwrap();
        assert_eq!(seen.payment.status, PaymentStatus::Confirmed);
        // Same when only the wait ran out.
        let seen = wait_for_verdict(&*store, &clock, &Confirmed, "pay_1", "sig", Duration::ZERO).await.unwrap();
        assert_eq!(seen.payment.status, PaymentStatus::Confirmed);
        db.cleanup().await;
    }
}
