//! Payments' lifecycle.
//!
//! [`state`] holds the one transition function; [`advance`] applies an event to a stored payment
//! with a compare-and-set, so concurrent writers cannot both move it; [`record_outcome`] records
//! what the chain says of a payment's transaction; [`reconcile`] finishes what a crash or a slow
//! chain left open.

pub mod reconcile;
pub mod state;

use chrono::{DateTime, Utc};
use tollgate_protocol::AtomicAmount;
use tollgate_protocol::gateway::PaymentStatus;

pub use self::state::{Event, TransitionError, transition};
use crate::chains::Landed;
use crate::store::{NewPayment, PaymentUpdate, Store, StoreError, StoredPayment};

/// Why an event could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum AdvanceError {
    /// The state machine forbids it from the current status.
    #[error(transparent)]
    Transition(#[from] TransitionError),
    /// Storage failed (or the payment does not exist).
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Applies `event` to payment `id` at `at`, re-reading and retrying if another writer moved it
/// meanwhile (the new status is re-checked against the state machine each time).
///
/// # Errors
/// [`AdvanceError::Transition`] when the event is not allowed from the current status,
/// [`AdvanceError::Store`] when the payment is missing or storage fails.
pub async fn advance(
    store: &dyn Store,
    id: &str,
    event: &Event,
    at: DateTime<Utc>,
) -> Result<StoredPayment, AdvanceError> {
    apply(store, id, None, event, at, None).await
}

/// [`advance`] from `seen`, the payment as the caller last wrote or read it: the first attempt
/// trusts its status (no read), the compare-and-set catches a payment moved on meanwhile, and only
/// then is it read again. Saves a read per step on the settlement path.
///
/// # Errors
/// As [`advance`].
pub async fn advance_seen(
    store: &dyn Store,
    seen: &StoredPayment,
    event: &Event,
    at: DateTime<Utc>,
) -> Result<StoredPayment, AdvanceError> {
    apply(store, &seen.payment.id, Some(seen.clone()), event, at, None).await
}

/// [`advance`], revealing the payment to `counterparty`'s account with this change when it has
/// no other side yet (a local build confirmed: its payee's account learns of it only then).
///
/// # Errors
/// As [`advance`].
pub async fn advance_revealing(
    store: &dyn Store,
    id: &str,
    event: &Event,
    at: DateTime<Utc>,
    counterparty: Option<&str>,
) -> Result<StoredPayment, AdvanceError> {
    apply(store, id, None, event, at, counterparty).await
}

/// The compare-and-set loop of [`advance`]: from `seen` first when given, else from a read.
async fn apply(
    store: &dyn Store,
    id: &str,
    mut seen: Option<StoredPayment>,
    event: &Event,
    at: DateTime<Utc>,
    counterparty: Option<&str>,
) -> Result<StoredPayment, AdvanceError> {
    // Each retry means another writer made progress; the state machine has no cycles, so
    // a payment can only move a handful of times (one more attempt when it starts from `seen`).
    for _ in 0..9 {
        let (current, read_now) = match seen.take() {
            Some(seen) => (seen, false),
            None => (store.get_payment(id).await?.ok_or(StoreError::NotFound)?, true),
        };
        let next = match transition(Some(current.payment.status), event) {
            Ok(next) => next,
            // What the caller saw is out of date: the payment as it stands decides.
            Err(_) if !read_now => continue,
            Err(e) => return Err(e.into()),
        };
        let update = PaymentUpdate {
            status: next,
            transaction: event.transaction(),
            fee_atomic: event.fee(),
            amount_atomic: event.arrived(),
            counterparty_account: counterparty
                .filter(|_| current.payment.counterparty_account.is_none())
                .map(str::to_owned),
            error: event.error(),
            // Never broadcast: the proof may be used again.
            release_proof: matches!(event, Event::Abandon { .. }),
            at,
        };
        match store.transition_payment(id, current.payment.status, &update).await {
            Ok(stored) => return Ok(stored),
            Err(StoreError::Conflict { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Err(StoreError::Database(format!("payment {id} kept changing under concurrent updates")).into())
}

/// The one reading of a landed transaction for a payment, whatever path found it (a settlement
/// watched, a hosted send, a receipt, the reconciler, a local-mode report): confirmed when at
/// least the payment's amount arrived at its payee, with what arrived recorded as its amount;
/// failed when it reverted, or when less arrived (a fee-on-transfer token, a transfer-fee mint,
/// a token that reports success and moves nothing), naming what arrived.
#[must_use]
pub fn verdict(payment: &NewPayment, landed: &Landed) -> Event {
    if let Some(reason) = &landed.error {
        return Event::Fail { reason: reason.clone() };
    }
    let asked = payment.amount_atomic.get();
    if landed.arrived < asked {
        return Event::Fail {
            reason: format!(
                "the transaction succeeded but only {} of the {asked} base units asked arrived at {}",
                landed.arrived, payment.to
            ),
        };
    }
    Event::Confirm { fee: landed.fee, arrived: Some(AtomicAmount(landed.arrived)) }
}

/// Records what the chain says of a payment's transaction ([`verdict`]; a `verified` payment is
/// submitted first: its transaction is on chain). A payment another writer moved on meanwhile is
/// returned as it stands: whoever records the chain's verdict first wins, the others report it.
///
/// # Errors
/// [`AdvanceError::Store`] when storage fails or the payment is missing.
pub async fn record_outcome(
    store: &dyn Store,
    id: &str,
    landed: &Landed,
    at: DateTime<Utc>,
) -> Result<StoredPayment, AdvanceError> {
    let current = store.get_payment(id).await?.ok_or(StoreError::NotFound)?;
    record_seen(store, current, landed, at, None).await
}

/// [`record_outcome`] from `seen`, the payment as the caller last wrote or read it (see
/// [`advance_seen`]): no read unless another writer moved it meanwhile.
///
/// # Errors
/// As [`record_outcome`].
pub async fn record_outcome_seen(
    store: &dyn Store,
    seen: &StoredPayment,
    landed: &Landed,
    at: DateTime<Utc>,
) -> Result<StoredPayment, AdvanceError> {
    record_seen(store, seen.clone(), landed, at, None).await
}

/// [`record_outcome`], revealing a confirmed payment to `counterparty`'s account (see
/// [`advance_revealing`]); a failed one stays unknown to it.
///
/// # Errors
/// As [`record_outcome`].
pub async fn record_outcome_revealing(
    store: &dyn Store,
    id: &str,
    landed: &Landed,
    at: DateTime<Utc>,
    counterparty: Option<&str>,
) -> Result<StoredPayment, AdvanceError> {
    let current = store.get_payment(id).await?.ok_or(StoreError::NotFound)?;
    record_seen(store, current, landed, at, counterparty).await
}

/// [`record_outcome_revealing`] from `seen`: its status decides whether to submit first (the
/// compare-and-sets correct it if it is out of date); its terms, which no step changes before
/// the verdict, decide the verdict.
async fn record_seen(
    store: &dyn Store,
    seen: StoredPayment,
    landed: &Landed,
    at: DateTime<Utc>,
    counterparty: Option<&str>,
) -> Result<StoredPayment, AdvanceError> {
    let id = seen.payment.id.clone();
    let event = verdict(&seen.payment, landed);
    let submit = seen.payment.transaction.clone().filter(|_| seen.payment.status == PaymentStatus::Verified);
    let mut latest = Some(seen);
    if let Some(transaction) = submit {
        match apply(store, &id, latest.take(), &Event::Submit { transaction }, at, None).await {
            Ok(submitted) => latest = Some(submitted),
            // Moved on by another writer: read again below.
            Err(AdvanceError::Transition(_)) => {}
            Err(e) => return Err(e),
        }
    }
    let counterparty = counterparty.filter(|_| matches!(event, Event::Confirm { .. }));
    match apply(store, &id, latest, &event, at, counterparty).await {
        Err(AdvanceError::Transition(e)) => {
            let current = store.get_payment(&id).await?.ok_or(StoreError::NotFound)?;
            tracing::debug!(payment_id = %id, error = %e, status = current.payment.status.as_str(), "moved on by another writer");
            Ok(current)
        }
        other => other,
    }
}

impl Event {
    fn transaction(&self) -> Option<String> {
        match self {
            Self::Submit { transaction } => Some(transaction.clone()),
            _ => None,
        }
    }

    fn fee(&self) -> Option<AtomicAmount> {
        match self {
            Self::Confirm { fee, .. } => *fee,
            _ => None,
        }
    }

    fn arrived(&self) -> Option<AtomicAmount> {
        match self {
            Self::Confirm { arrived, .. } => *arrived,
            _ => None,
        }
    }

    fn error(&self) -> Option<String> {
        match self {
            Self::Fail { reason } | Self::Expire { reason, .. } | Self::Abandon { reason } => Some(reason.clone()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tollgate_protocol::gateway::PaymentStatus;

    use super::*;
    use crate::store::suite::{TestDb, payment};

    #[tokio::test]
    async fn advance_walks_the_machine_and_refuses_illegal_moves() {
        let db = TestDb::sqlite().await;
        let store: Arc<dyn Store> = db.store.clone();
        let at = DateTime::from_timestamp(1_790_000_000, 0).unwrap();
        store.insert_payment(&payment("pay_1", "acct", "f", "t", at)).await.unwrap();

        let submitted = advance(&*store, "pay_1", &Event::Submit { transaction: "sig".into() }, at).await.unwrap();
        assert_eq!(submitted.payment.status, PaymentStatus::Submitted);
        let pending = advance(&*store, "pay_1", &Event::WaitTimedOut, at).await.unwrap();
        assert_eq!(pending.payment.status, PaymentStatus::Pending);
        let err = advance(&*store, "pay_1", &Event::Submit { transaction: "other".into() }, at).await.unwrap_err();
        assert!(matches!(err, AdvanceError::Transition(_)), "{err}");
        let done = advance(&*store, "pay_1", &Event::Confirm { fee: Some(AtomicAmount(5000)), arrived: None }, at)
            .await
            .unwrap();
        assert_eq!(done.payment.status, PaymentStatus::Confirmed);
        assert_eq!(done.payment.transaction.as_deref(), Some("sig"));
        assert!(matches!(
            advance(&*store, "pay_1", &Event::Fail { reason: "x".into() }, at).await,
            Err(AdvanceError::Transition(_))
        ));
        assert!(matches!(
            advance(&*store, "missing", &Event::WaitTimedOut, at).await,
            Err(AdvanceError::Store(StoreError::NotFound))
        ));
        db.cleanup().await;
    }

    /// The settlement path steps from the payment as it last wrote it, without reading it again;
    /// when another writer moved it meanwhile, the step goes by the payment as it stands.
    #[tokio::test]
    async fn a_step_from_an_out_of_date_view_goes_by_the_payment_as_it_stands() {
        let db = TestDb::sqlite().await;
        let store: Arc<dyn Store> = db.store.clone();
        let at = DateTime::from_timestamp(1_790_000_000, 0).unwrap();
        let row = NewPayment { transaction: Some("sig".into()), ..payment("pay_1", "acct", "f", "t", at) };
        let seen = store.insert_payment(&row).await.unwrap();
        assert_eq!(seen.payment.status, PaymentStatus::Verified);

        // Another writer submits it and gives up waiting: the view says verified, the row pending.
        advance(&*store, "pay_1", &Event::Submit { transaction: "sig".into() }, at).await.unwrap();
        advance(&*store, "pay_1", &Event::WaitTimedOut, at).await.unwrap();
        // A submit from the old view is refused (one broadcaster), the row untouched.
        let err = advance_seen(&*store, &seen, &Event::Submit { transaction: "other".into() }, at).await.unwrap_err();
        assert!(matches!(err, AdvanceError::Transition(_)), "{err}");
        let row = store.get_payment("pay_1").await.unwrap().unwrap();
        assert_eq!((row.payment.status, row.payment.transaction.as_deref()), (PaymentStatus::Pending, Some("sig")));
        // An event the old view forbids (verified cannot confirm) but the row allows: applied.
        let confirm = Event::Confirm { fee: None, arrived: Some(AtomicAmount(10_000_000)) };
        let done = advance_seen(&*store, &seen, &confirm, at).await.unwrap();
        assert_eq!(done.payment.status, PaymentStatus::Confirmed);
        assert_eq!(done.payment.transaction.as_deref(), Some("sig"));

        // The chain's verdict from the old view changes nothing now: the payment as it stands.
        let reverted = Landed {
            tx_id: "sig".into(),
            signed: String::new(),
            error: Some("reverted".into()),
            arrived: 0,
            fee: None,
        };
        let again = record_outcome_seen(&*store, &seen, &reverted, at).await.unwrap();
        assert_eq!((again.payment.status, again.updated_at), (PaymentStatus::Confirmed, done.updated_at));
        db.cleanup().await;
    }

    /// From a current view, a verdict on a verified payment submits it and records the verdict.
    #[tokio::test]
    async fn a_verdict_from_a_current_view_submits_then_records() {
        let db = TestDb::sqlite().await;
        let store: Arc<dyn Store> = db.store.clone();
        let at = DateTime::from_timestamp(1_790_000_000, 0).unwrap();
        let row = NewPayment { transaction: Some("sig".into()), ..payment("pay_1", "acct", "f", "t", at) };
        let seen = store.insert_payment(&row).await.unwrap();
        // Less arrived than asked: failed, naming what arrived.
        let short = Landed { tx_id: "sig".into(), signed: String::new(), error: None, arrived: 9_999_999, fee: None };
        let failed = record_outcome_seen(&*store, &seen, &short, at).await.unwrap();
        assert_eq!(failed.payment.status, PaymentStatus::Failed);
        assert!(failed.error.as_deref().unwrap_or_default().contains("9999999"), "{:?}", failed.error);
        db.cleanup().await;
    }
}
