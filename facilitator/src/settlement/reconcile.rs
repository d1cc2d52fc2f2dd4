//! Settling what was left unfinished: at start-up before serving, then periodically.
//!
//! A payment in `submitted` or `pending` has its transaction id stored (write-ahead), so the chain
//! can tell what became of it: confirmed, failed, or — once the chain is past the transaction's
//! last valid block height without it — expired. Without such evidence it stays as it is; the
//! clock alone never ends a broadcast payment.
//!
//! A payment still `verified` without a transaction id after [`ABANDONED_AFTER`] was left by a
//! crash between its insert and the write-ahead of its id: it was never broadcast, so it fails
//! ("abandoned before broadcast") instead of hanging with its proof claimed.

use tollgate_protocol::gateway::PaymentStatus;

use super::state::ExpiryEvidence;
use super::{Event, advance};
use crate::chains::{Backend, Chains, Target, TxOutcome};
use crate::clock::Clock;
use crate::store::{Store, StoreError, StoredPayment};

/// Most payments looked at in one pass.
pub const BATCH: u32 = 500;

/// How long a `verified` payment without a transaction id may stay so before it counts as
/// abandoned. Settling writes the id milliseconds after the insert; this leaves ample room for
/// a slow database and for another instance mid-settlement.
pub const ABANDONED_AFTER: chrono::Duration = chrono::Duration::seconds(60);

/// What one pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Reconciled {
    /// Payments examined.
    pub examined: usize,
    /// Payments that reached a final status.
    pub finished: usize,
    /// Payments whose network has no backend (not selected by the query; counted if one slips
    /// through).
    pub unserved: usize,
}

/// Why one payment was not reconciled in this pass.
enum Skip {
    /// Its network has no backend here.
    Unserved,
    /// The chain or storage failed; the next pass retries.
    Failed(String),
}

/// Examines every unfinished payment once.
///
/// # Errors
/// Storage failures; chain failures only leave payments for the next pass.
pub async fn reconcile_once(store: &dyn Store, clock: &dyn Clock, chains: &Chains) -> Result<Reconciled, StoreError> {
    let unfinished = store.unfinished_payments(&chains.served(), BATCH).await?;
    let mut done = Reconciled { examined: unfinished.len(), ..Reconciled::default() };
    for payment in unfinished {
        match reconcile_payment(store, clock, chains, &payment).await {
            Ok(true) => done.finished += 1,
            Ok(false) => {}
            Err(Skip::Unserved) => done.unserved += 1,
            Err(Skip::Failed(e)) => {
                tracing::warn!(payment_id = %payment.payment.id, error = %e, "could not reconcile payment yet");
            }
        }
    }
    Ok(done)
}

async fn reconcile_payment(
    store: &dyn Store,
    clock: &dyn Clock,
    chains: &Chains,
    stored: &StoredPayment,
) -> Result<bool, Skip> {
    let p = &stored.payment;
    let Some(tx_id) = p.transaction.as_deref() else {
        if p.status == PaymentStatus::Verified && clock.now() - stored.updated_at > ABANDONED_AFTER {
            let event = Event::Abandon { reason: "abandoned before broadcast (the facilitator stopped)".into() };
            advance(store, &p.id, &event, clock.now()).await.map_err(|e| Skip::Failed(e.to_string()))?;
            tracing::warn!(payment_id = %p.id, "payment was never broadcast: failed as abandoned");
            return Ok(true);
        }
        return Ok(false);
    };
    let backend = chains.backend(&Target::Network(p.network.clone())).map_err(|_| Skip::Unserved)?;
    let ledger = backend.ledger();
    let chain = |e: crate::chains::ChainError| Skip::Failed(e.0);
    let event = match ledger.outcome(tx_id).await.map_err(chain)? {
        Some(TxOutcome::Confirmed { fee }) => Event::Confirm { fee },
        Some(TxOutcome::Failed { reason }) => Event::Fail { reason },
        None => {
            // Solana transactions carry a horizon: past it, one the chain never saw cannot land.
            let height = match (&backend, p.last_valid_block_height) {
                (Backend::Solana(b), Some(_)) => Some(b.rpc.block_height().await.map_err(chain)?),
                _ => None,
            };
            match (height, p.last_valid_block_height) {
                // Past the horizon and still unknown to the chain: it can no longer land. Ask once
                // more so a confirmation that raced the height check is not missed.
                (Some(height), Some(last_valid)) if height > last_valid => {
                    match ledger.outcome(tx_id).await.map_err(chain)? {
                        Some(TxOutcome::Confirmed { fee }) => Event::Confirm { fee },
                        Some(TxOutcome::Failed { reason }) => Event::Fail { reason },
                        None => Event::Expire {
                            evidence: ExpiryEvidence::Chain,
                            reason: format!("block height {height} passed {last_valid} without the transaction"),
                        },
                    }
                }
                _ if p.status == PaymentStatus::Submitted => Event::WaitTimedOut,
                _ => return Ok(false),
            }
        }
    };
    let after = match advance(store, &p.id, &event, clock.now()).await {
        Ok(after) => after,
        // The settlement that broadcast it recorded the verdict first: nothing left to do.
        Err(super::AdvanceError::Transition(_)) => return Ok(false),
        Err(e) => return Err(Skip::Failed(e.to_string())),
    };
    tracing::info!(payment_id = %p.id, status = after.payment.status.as_str(), "reconciled");
    Ok(after.payment.status.is_final())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::clock::ManualClock;
    use crate::store::suite::{TestDb, payment};

    /// A payment left `verified` without a transaction id fails once it is clearly abandoned,
    /// never earlier; one with an id is left to the chain.
    #[tokio::test]
    async fn payments_never_broadcast_fail_as_abandoned() {
        let db = TestDb::sqlite().await;
        let store: Arc<dyn Store> = db.store.clone();
        let t0 = chrono::DateTime::from_timestamp(1_790_000_000, 0).unwrap();
        let clock = ManualClock::new(t0);
        store.insert_payment(&payment("pay_stuck", "acct", "f", "t", t0)).await.unwrap();
        let chains = Chains::none();

        clock.advance(std::time::Duration::from_secs(59));
        reconcile_once(&*store, &clock, &chains).await.unwrap();
        let early = store.get_payment("pay_stuck").await.unwrap().unwrap();
        assert_eq!(early.payment.status, PaymentStatus::Verified, "another instance may be mid-settlement");

        clock.advance(std::time::Duration::from_secs(2));
        let pass = reconcile_once(&*store, &clock, &chains).await.unwrap();
        assert_eq!(pass, Reconciled { examined: 1, finished: 1, unserved: 0 });
        let failed = store.get_payment("pay_stuck").await.unwrap().unwrap();
        assert_eq!(failed.payment.status, PaymentStatus::Failed);
        assert!(failed.error.unwrap().contains("abandoned before broadcast"));
        db.cleanup().await;
    }
}
