//! The reconciler's schedule: payments that stay stuck cannot starve newer ones, a payment never
//! broadcast is given up (its proof usable again), and a payment is looked at again later, not at
//! every pass. Time is a manual clock; the chain is the fake one.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use common::fake::{FakeChain, network};
use tollgate_facilitator::chains::Chains;
use tollgate_facilitator::clock::ManualClock;
use tollgate_facilitator::config::DatabaseUrl;
use tollgate_facilitator::settlement::reconcile::{ABANDONED_AFTER, reconcile_once};
use tollgate_facilitator::store::{AccountStore as _, NewPayment, PaymentStore as _, SqlStore};
use tollgate_protocol::gateway::PaymentStatus;
use tollgate_protocol::{Address, AtomicAmount};

fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000, 0).unwrap()
}

/// A broadcast payment waiting for its verdict, due at `due`.
fn unfinished(n: usize, status: PaymentStatus, tx: Option<&str>, due: DateTime<Utc>) -> NewPayment {
    NewPayment {
        status,
        transaction: tx.map(str::to_owned),
        proof_id: Some(format!("proof-{n}")),
        next_check_at: Some(due),
        ..NewPayment::native(
            format!("pay_{n:04}"),
            "acct",
            network(),
            (Address::Solana([1; 32]).to_string(), Address::Solana([2; 32]).to_string()),
            AtomicAmount(1_000),
            t0(),
        )
    }
}

async fn setup() -> (tempfile::TempDir, Arc<SqlStore>, Chains, Arc<FakeChain>) {
    let dir = tempfile::tempdir().unwrap();
    let url = DatabaseUrl::parse(dir.path().join("r.db").to_str().unwrap()).unwrap();
    let store = Arc::new(SqlStore::connect(&url).await.unwrap());
    store.create_account("acct", t0()).await.unwrap();
    let chain = Arc::new(FakeChain::default());
    let chains = Chains::none().with(chain.clone());
    (dir, store, chains, chain)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_hundred_stuck_payments_do_not_delay_a_newer_one() {
    let (_dir, store, chains, chain) = setup().await;
    // 600 transactions the chain never sees, all due before the newer one.
    for n in 0..600 {
        let stuck = unfinished(n, PaymentStatus::Pending, Some(&format!("stuck-{n}")), t0());
        store.insert_payment(&stuck).await.unwrap();
    }
    let newer = unfinished(600, PaymentStatus::Pending, Some("landed-1000"), t0() + chrono::Duration::seconds(30));
    store.insert_payment(&newer).await.unwrap();
    chain.broadcasts.lock().unwrap().push("landed-1000".into());

    let clock = ManualClock::new(t0() + chrono::Duration::seconds(31));
    let started = std::time::Instant::now();
    let pass = reconcile_once(&*store, &clock, &chains).await.unwrap();
    eprintln!("one pass over 601 due payments: {:?}", started.elapsed());
    assert_eq!((pass.examined, pass.finished), (601, 1));
    assert_eq!(store.get_payment("pay_0600").await.unwrap().unwrap().payment.status, PaymentStatus::Confirmed);

    // The stuck ones went back on the schedule, with a growing delay: not looked at again at once.
    let again = reconcile_once(&*store, &clock, &chains).await.unwrap();
    assert_eq!(again.examined, 0, "nothing is due right after a pass");
    let stuck = store.get_payment("pay_0000").await.unwrap().unwrap();
    assert_eq!((stuck.payment.status, stuck.checks), (PaymentStatus::Pending, 1));
    clock.advance(Duration::from_secs(5));
    assert_eq!(reconcile_once(&*store, &clock, &chains).await.unwrap().examined, 600, "due again after 5 s");
    clock.advance(Duration::from_secs(5));
    assert_eq!(reconcile_once(&*store, &clock, &chains).await.unwrap().examined, 0, "then after 10 s");
    clock.advance(Duration::from_secs(5));
    assert_eq!(reconcile_once(&*store, &clock, &chains).await.unwrap().examined, 600);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payment_never_broadcast_is_given_up_and_its_proof_freed() {
    let (_dir, store, chains, _chain) = setup().await;
    // Left `verified` without a transaction id (a stop between two writes of an earlier version).
    store.insert_payment(&unfinished(1, PaymentStatus::Verified, None, t0())).await.unwrap();
    let clock = ManualClock::new(t0());
    reconcile_once(&*store, &clock, &chains).await.unwrap();
    let kept = store.get_payment("pay_0001").await.unwrap().unwrap();
    assert_eq!(kept.payment.status, PaymentStatus::Verified, "a request may still be about to broadcast it");

    clock.advance((ABANDONED_AFTER + chrono::Duration::seconds(10)).to_std().unwrap());
    let pass = reconcile_once(&*store, &clock, &chains).await.unwrap();
    assert_eq!(pass.finished, 1);
    let given_up = store.get_payment("pay_0001").await.unwrap().unwrap();
    assert_eq!(given_up.payment.status, PaymentStatus::Failed);
    assert!(given_up.error.as_deref().unwrap_or_default().contains("abandoned"), "{given_up:?}");
    assert!(store.payment_by_proof("proof-1").await.unwrap().is_none(), "the proof may be presented again");
}
