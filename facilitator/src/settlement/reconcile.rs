//! Settling what was left unfinished: at start-up before serving, then periodically.
//!
//! A payment in `submitted` or `pending` has its transaction id stored (write-ahead), so the chain
//! can tell what became of it: confirmed, failed, or — once the chain is past the transaction's
//! last valid block height without it — expired. Without such evidence it stays as it is; the
//! clock alone never ends a payment.

use tollgate_protocol::ChainFamily;
use tollgate_protocol::gateway::PaymentStatus;

use super::state::ExpiryEvidence;
use super::{Event, advance};
use crate::chains::{Chains, Ledger, Target, TxOutcome};
use crate::clock::Clock;
use crate::store::{Store, StoreError, StoredPayment};

/// Most payments looked at in one pass.
pub const BATCH: u32 = 500;

/// What one pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Reconciled {
    /// Payments examined.
    pub examined: usize,
    /// Payments that reached a final status.
    pub finished: usize,
}

/// Examines every unfinished payment once.
///
/// # Errors
/// Storage failures; chain failures only leave payments for the next pass.
pub async fn reconcile_once(store: &dyn Store, clock: &dyn Clock, chains: &Chains) -> Result<Reconciled, StoreError> {
    let unfinished = store.unfinished_payments(BATCH).await?;
    let mut done = Reconciled { examined: unfinished.len(), finished: 0 };
    for payment in unfinished {
        match reconcile_payment(store, clock, chains, &payment).await {
            Ok(true) => done.finished += 1,
            Ok(false) => {}
            Err(e) => tracing::warn!(payment_id = %payment.payment.id, error = %e, "could not reconcile payment yet"),
        }
    }
    Ok(done)
}

async fn reconcile_payment(
    store: &dyn Store,
    clock: &dyn Clock,
    chains: &Chains,
    stored: &StoredPayment,
) -> Result<bool, String> {
    let p = &stored.payment;
    let Some(tx_id) = p.transaction.as_deref() else { return Ok(false) };
    if p.network.family() != ChainFamily::Solana {
        return Ok(false);
    }
    let backend = chains.solana(&Target::Network(p.network.clone())).map_err(|e| e.to_string())?;
    let event = match Ledger::outcome(&backend.rpc, tx_id).await.map_err(|e| e.0)? {
        Some(TxOutcome::Confirmed { fee }) => Event::Confirm { fee },
        Some(TxOutcome::Failed { reason }) => Event::Fail { reason },
        None => {
            let height = backend.rpc.block_height().await.map_err(|e| e.0)?;
            match p.last_valid_block_height {
                // Past the horizon and still unknown to the chain: it can no longer land. Ask once
                // more so a confirmation that raced the height check is not missed.
                Some(last_valid) if height > last_valid => {
                    match Ledger::outcome(&backend.rpc, tx_id).await.map_err(|e| e.0)? {
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
    let after = advance(store, &p.id, &event, clock.now()).await.map_err(|e| e.to_string())?;
    tracing::info!(payment_id = %p.id, status = after.payment.status.as_str(), "reconciled");
    Ok(after.payment.status.is_final())
}
