//! Settling what was left unfinished, in the background: right after start-up, then periodically.
//!
//! Every unfinished payment has a due time (`next_check_at`): set past the wait of the request
//! that settles it, and pushed back with a growing delay each time the chain has no verdict yet.
//! A pass claims every payment due, most overdue first, a page at a time, and asks the chain about
//! several at once; a payment with no verdict goes back on the schedule, so payments that stay
//! stuck (a transaction that never mines) cannot starve newer ones.
//!
//! Several instances share the work: a page is *claimed* for [`CLAIM_FOR`]
//! ([`crate::store::PaymentStore::claim_due_payments`], `FOR UPDATE SKIP LOCKED` on PostgreSQL),
//! and another instance's pass skips claimed payments, so one payment is asked about by one
//! instance at a time. Putting it back on the schedule releases the claim; the claim of an
//! instance that died lapses after [`CLAIM_FOR`], and another instance takes the payment.
//!
//! What the chain can say ([`Chain::status`], which searches its whole history):
//! * the transaction landed — the verdict is recorded, however long ago it landed;
//! * it can no longer land (Solana: past its last valid block height; EVM: its sender's nonce
//!   taken by another transaction) — a broadcast payment expires; one never broadcast (still
//!   `verified`) fails as abandoned and its proof may be used again;
//! * nothing yet — a `submitted` payment whose request has ended becomes `pending`.
//!
//! The clock alone never ends a broadcast payment. A `verified` payment without a transaction id
//! (left by an earlier version between two writes) fails as abandoned after [`ABANDONED_AFTER`].

use std::time::Duration;

use futures_util::StreamExt as _;
use tollgate_protocol::gateway::PaymentStatus;

use super::state::ExpiryEvidence;
use super::{AdvanceError, Event, advance, record_outcome};
use crate::chains::{Chains, TxStatus, Watched};
use crate::clock::Clock;
use crate::store::{Store, StoreError, StoredPayment};

/// Payments read per page of a pass.
pub const PAGE: u32 = 200;
/// Payments asked about at once.
pub const CONCURRENCY: usize = 16;
/// How long a pass holds the payments it claimed before another instance may take them (far
/// longer than a page's chain look-ups, which time out within seconds).
pub const CLAIM_FOR: Duration = Duration::from_secs(120);
/// Most pages in one pass (a bound on a pass's length, whatever happens to the schedule).
const MAX_PAGES: usize = 1_000;

/// How long a `verified` payment without a transaction id may stay so before it counts as
/// abandoned.
pub const ABANDONED_AFTER: chrono::Duration = chrono::Duration::seconds(60);

/// The delay before the next look at a payment the chain had no verdict for `checks` times:
/// 5 s, doubling, at most 10 minutes.
#[must_use]
pub fn next_look(checks: u32) -> Duration {
    Duration::from_secs(5).saturating_mul(1u32 << checks.min(10)).min(Duration::from_secs(600))
}

/// What one pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Reconciled {
    /// Payments examined.
    pub examined: usize,
    /// Payments that reached a final status.
    pub finished: usize,
}

/// Examines every payment due now once.
///
/// # Errors
/// Storage failures reading the schedule; a payment whose chain or storage fails is put back on
/// the schedule.
pub async fn reconcile_once(store: &dyn Store, clock: &dyn Clock, chains: &Chains) -> Result<Reconciled, StoreError> {
    let now = clock.now();
    let served = chains.served();
    let mut done = Reconciled::default();
    for _ in 0..MAX_PAGES {
        let claim_until = now + chrono::Duration::from_std(CLAIM_FOR).unwrap_or(chrono::Duration::MAX);
        let page = store.claim_due_payments(&served, now, PAGE, claim_until).await?;
        let full = page.len() == usize::try_from(PAGE).unwrap_or(usize::MAX);
        done.examined += page.len();
        let results: Vec<bool> = futures_util::stream::iter(page)
            .map(|p| reconcile_payment(store, clock, chains, p))
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        done.finished += results.into_iter().filter(|finished| *finished).count();
        if !full {
            break;
        }
    }
    Ok(done)
}

/// Looks at one payment; true when it reached a final status. Whatever does not end it puts it
/// back on the schedule.
async fn reconcile_payment(store: &dyn Store, clock: &dyn Clock, chains: &Chains, stored: StoredPayment) -> bool {
    let p = &stored.payment;
    match look(store, clock, chains, &stored).await {
        Ok(Some(after)) if after.payment.status.is_final() => {
            tracing::info!(payment_id = %p.id, status = after.payment.status.as_str(), "reconciled");
            return true;
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(payment_id = %p.id, error = %e, "could not reconcile payment yet"),
    }
    let at = clock.now() + next_look(stored.checks);
    if let Err(e) = store.reschedule_payment(&p.id, at).await {
        tracing::warn!(payment_id = %p.id, error = %e, "could not reschedule payment");
    }
    false
}

/// What the chain says of one payment, recorded; `None` when nothing could be said.
async fn look(
    store: &dyn Store,
    clock: &dyn Clock,
    chains: &Chains,
    stored: &StoredPayment,
) -> Result<Option<StoredPayment>, String> {
    let p = &stored.payment;
    let advance = |event: Event| async move {
        match advance(store, &p.id, &event, clock.now()).await {
            Ok(after) => Ok(Some(after)),
            // The request that settles it recorded something first.
            Err(AdvanceError::Transition(_)) => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    };
    let Some(tx_id) = p.transaction.as_deref() else {
        if p.status == PaymentStatus::Verified && clock.now() - stored.updated_at > ABANDONED_AFTER {
            tracing::warn!(payment_id = %p.id, "payment was never broadcast: failed as abandoned");
            return advance(Event::Abandon { reason: "abandoned before broadcast (the facilitator stopped)".into() })
                .await;
        }
        return Ok(None);
    };
    let chain = chains.get(&p.network).map_err(|e| e.to_string())?;
    match chain.status(&Watched::of(p, tx_id)).await.map_err(|e| e.to_string())? {
        TxStatus::Landed(landed) => {
            record_outcome(store, &p.id, &landed, clock.now()).await.map(Some).map_err(|e| e.to_string())
        }
        TxStatus::Dropped { reason } if p.status == PaymentStatus::Verified => {
            advance(Event::Abandon { reason: format!("never broadcast, and it can no longer land: {reason}") }).await
        }
        TxStatus::Dropped { reason } => {
            if p.status == PaymentStatus::Submitted {
                advance(Event::WaitTimedOut).await?;
            }
            advance(Event::Expire { evidence: ExpiryEvidence::Chain, reason }).await
        }
        TxStatus::Unseen if p.status == PaymentStatus::Submitted => advance(Event::WaitTimedOut).await,
        TxStatus::Unseen => Ok(None),
    }
}
