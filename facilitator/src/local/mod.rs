//! Local mode: the facilitator builds unsigned transactions; the caller signs and broadcasts them
//! with their own wallet and RPC, then reports the transaction so status and history cover them.

pub mod evm;
pub mod solana;

use tollgate_protocol::AtomicAmount;
use tollgate_protocol::ChainFamily;
use tollgate_protocol::gateway::PaymentStatus;

use crate::AppState;
use crate::error::ApiError;
use crate::settlement::state::ExpiryEvidence;
use crate::settlement::{Event, advance};
use crate::store::StoredPayment;

/// How long an unsigned transaction is offered for (Solana's own limit, ~150 blocks, is about
/// as long).
pub const VALIDITY: chrono::Duration = chrono::Duration::seconds(60);

/// What the chain says about a reported transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// The chain does not have it; its head is at `height`.
    Absent {
        /// Current block height (Solana) or number (EVM).
        height: u64,
    },
    /// It landed.
    Landed {
        /// Whether it pays the payment (payer, recipient, asset, at least the amount).
        pays: bool,
        /// Why it failed, when it did.
        error: Option<String>,
        /// Fee paid.
        fee: Option<AtomicAmount>,
    },
}

/// Checks a reported transaction against a local payment on chain and records what it finds:
/// `confirmed` / `failed` when the chain has it, `expired` when the chain is past the payment's
/// horizon without it, unchanged otherwise. One transaction settles one payment.
///
/// # Errors
/// 400 when the transaction does not pay this payment or was reported for another one; 502 on
/// chain failures.
pub async fn confirm(state: &AppState, payment: StoredPayment, transaction: &str) -> Result<StoredPayment, ApiError> {
    if payment.payment.status.is_final() {
        return Ok(payment);
    }
    let p = &payment.payment;
    let (tx_id, seen) = match p.network.family() {
        ChainFamily::Solana => solana::observe(state, p, transaction).await?,
        ChainFamily::Evm => evm::observe(state, p, transaction).await?,
    };
    let now = || state.clock.now();
    let (error, fee) = match seen {
        Seen::Absent { height } => {
            if p.status == PaymentStatus::Built && p.last_valid_block_height.is_some_and(|last| height > last) {
                let reason = format!("block {height} passed the transaction's last valid block without it");
                let event = Event::Expire { evidence: ExpiryEvidence::Chain, reason };
                return advance(&*state.store, &p.id, &event, now()).await.map_err(ApiError::internal);
            }
            // Not on chain (yet): nothing to record.
            return Ok(payment);
        }
        Seen::Landed { pays: false, .. } => {
            return Err(ApiError::invalid_params(
                "that transaction does not pay this payment (payer, recipient or amount differ)",
            ));
        }
        Seen::Landed { pays: true, error, fee } => (error, fee),
    };
    let proof = format!("{}:{tx_id}", p.network);
    if !state.store.claim_proof(&proof, &p.id, now()).await.map_err(ApiError::internal)? {
        let holder = state.store.proof_claim(&proof).await.map_err(ApiError::internal)?;
        if holder.as_deref() != Some(&p.id) {
            return Err(ApiError::invalid_params("that transaction was already reported for another payment"));
        }
    }
    let mut current = payment;
    if current.payment.status == PaymentStatus::Built {
        current = advance(&*state.store, &current.payment.id, &Event::Submit { transaction: tx_id }, now())
            .await
            .map_err(ApiError::internal)?;
    }
    let event = match error {
        None => Event::Confirm { fee },
        Some(reason) => Event::Fail { reason },
    };
    advance(&*state.store, &current.payment.id, &event, now()).await.map_err(ApiError::internal)
}
