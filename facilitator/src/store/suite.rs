//! One storage test suite, run against every backend: a SQLite file, and PostgreSQL when
//! `TOLLGATE_TEST_POSTGRES_URL` is set (each test in a schema of its own, dropped afterwards).

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use tollgate_protocol::gateway::{Direction, PaymentStatus};
use tollgate_protocol::{AtomicAmount, Network};

use super::{
    AccountStore, IdempotencyBegin, IdempotencyStore, NewPayment, PaymentStore, PaymentUpdate, SqlStore, Store,
    StoreError, StoredApiKey, StoredPayment, StoredResponse,
};
use crate::config::DatabaseUrl;
use crate::plans::Plan;

fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp(1_790_000_000, 0).unwrap()
}

/// A store plus what must be cleaned up after it.
pub(crate) struct TestDb {
    pub store: Arc<SqlStore>,
    _dir: Option<tempfile::TempDir>,
    pg_admin: Option<(String, String)>,
}

impl TestDb {
    pub(crate) async fn sqlite() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let url = DatabaseUrl::parse(&format!("sqlite://{}", dir.path().join("test.db").display())).unwrap();
        let store = Arc::new(SqlStore::connect(&url).await.unwrap());
        Self { store, _dir: Some(dir), pg_admin: None }
    }

    /// `None` (and a notice on stderr) when no PostgreSQL is configured for tests.
    pub(crate) async fn postgres(test: &str) -> Option<Self> {
        let Some(base) = std::env::var("TOLLGATE_TEST_POSTGRES_URL").ok().filter(|v| !v.is_empty()) else {
            eprintln!("SKIPPED {test} on PostgreSQL: TOLLGATE_TEST_POSTGRES_URL is not set");
            return None;
        };
        sqlx::any::install_default_drivers();
        let schema = format!("tg_test_{}", ulid::Ulid::new().to_string().to_lowercase());
        let admin = sqlx::AnyPool::connect(&base).await.expect("TOLLGATE_TEST_POSTGRES_URL must be reachable");
        sqlx::query(&format!("CREATE SCHEMA {schema}")).execute(&admin).await.unwrap();
        admin.close().await;
        let sep = if base.contains('?') { '&' } else { '?' };
        let url = DatabaseUrl::parse(&format!("{base}{sep}options=-c%20search_path%3D{schema}")).unwrap();
        let store = Arc::new(SqlStore::connect(&url).await.unwrap());
        Some(Self { store, _dir: None, pg_admin: Some((base, schema)) })
    }

    pub(crate) async fn cleanup(self) {
        self.store.close().await;
        if let Some((base, schema)) = self.pg_admin {
            let admin = sqlx::AnyPool::connect(&base).await.unwrap();
            sqlx::query(&format!("DROP SCHEMA {schema} CASCADE")).execute(&admin).await.unwrap();
            admin.close().await;
        }
    }
}

fn key(id: &str, account: &str, lookup: &str) -> StoredApiKey {
    StoredApiKey {
        id: id.into(),
        account_id: account.into(),
        env: "test".into(),
        lookup: lookup.into(),
        hash: format!("{lookup}{}", "0".repeat(48)),
        hint: "abcd".into(),
        plan: Plan::Premium,
        rpm: None,
        label: Some("ci".into()),
        created_at: t0(),
        last_used_at: None,
    }
}

pub(crate) fn payment(id: &str, owner: &str, from: &str, to: &str, at: DateTime<Utc>) -> NewPayment {
    NewPayment {
        resource: Some("https://seller.example/report".into()),
        metadata: Some(serde_json::json!({"reference": "inv-42"}).as_object().unwrap().clone()),
        ..NewPayment::native(
            id,
            owner,
            Network::solana_devnet(),
            (from.into(), to.into()),
            AtomicAmount(10_000_000),
            at,
        )
    }
}

fn update(status: PaymentStatus) -> PaymentUpdate {
    PaymentUpdate::to(status, t0() + Duration::seconds(1))
}

async fn api_keys(store: Arc<SqlStore>) {
    store.create_account("acct_1", t0()).await.unwrap();
    assert!(store.account_exists("acct_1").await.unwrap());
    assert!(!store.account_exists("acct_2").await.unwrap());
    store.insert_api_key(&key("key_1", "acct_1", "aaaaaaaaaaaaaaaa")).await.unwrap();
    store.insert_api_key(&key("key_2", "acct_1", "bbbbbbbbbbbbbbbb")).await.unwrap();
    // The lookup is unique.
    assert!(store.insert_api_key(&key("key_3", "acct_1", "aaaaaaaaaaaaaaaa")).await.is_err());
    // A key needs an existing account.
    assert!(store.insert_api_key(&key("key_4", "acct_missing", "cccccccccccccccc")).await.is_err());

    let found = store.find_api_key("aaaaaaaaaaaaaaaa").await.unwrap().unwrap();
    assert_eq!(found, key("key_1", "acct_1", "aaaaaaaaaaaaaaaa"));
    assert_eq!(store.list_api_keys().await.unwrap().len(), 2);
    store.touch_api_key("key_1", t0() + Duration::minutes(5)).await.unwrap();
    let touched = store.find_api_key("aaaaaaaaaaaaaaaa").await.unwrap().unwrap();
    assert_eq!(touched.last_used_at, Some(t0() + Duration::minutes(5)));

    assert!(store.delete_api_key("key_1").await.unwrap());
    assert!(!store.delete_api_key("key_1").await.unwrap());
    assert!(store.find_api_key("aaaaaaaaaaaaaaaa").await.unwrap().is_none());
}

async fn payments_round_trip(store: Arc<SqlStore>) {
    let mut p = payment("pay_1", "acct_a", "from_w", "to_w", t0());
    p.counterparty_account = Some("acct_b".into());
    p.amount_atomic = AtomicAmount(u128::from(u64::MAX) * 1000);
    p.last_valid_block_height = Some(123_456);
    let stored = store.insert_payment(&p).await.unwrap();
    let got = store.get_payment("pay_1").await.unwrap().unwrap();
    assert_eq!(got, stored);
    assert_eq!(got.payment, p, "amounts above 64 bits and metadata survive storage");
    assert!(got.visible_to("acct_a") && got.visible_to("acct_b") && !got.visible_to("acct_c"));
    assert!(store.get_payment("pay_missing").await.unwrap().is_none());
    assert!(store.insert_payment(&p).await.is_err(), "payment ids are unique");
}

async fn transitions_are_compare_and_set(store: Arc<SqlStore>) {
    store.insert_payment(&payment("pay_1", "acct", "f", "t", t0())).await.unwrap();
    let mut submit = update(PaymentStatus::Submitted);
    submit.transaction = Some("sig1".into());
    let after = store.transition_payment("pay_1", PaymentStatus::Verified, &submit).await.unwrap();
    assert_eq!(after.payment.status, PaymentStatus::Submitted);
    assert_eq!(after.payment.transaction.as_deref(), Some("sig1"));
    assert_eq!(after.updated_at, t0() + Duration::seconds(1));

    match store.transition_payment("pay_1", PaymentStatus::Verified, &submit).await {
        Err(StoreError::Conflict { current }) => assert_eq!(current, PaymentStatus::Submitted),
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert!(matches!(
        store.transition_payment("pay_x", PaymentStatus::Verified, &submit).await,
        Err(StoreError::NotFound)
    ));
    let mut confirm = update(PaymentStatus::Confirmed);
    confirm.fee_atomic = Some(AtomicAmount(5000));
    let done = store.transition_payment("pay_1", PaymentStatus::Submitted, &confirm).await.unwrap();
    assert_eq!(done.confirmed_at, Some(confirm.at));
    assert_eq!(done.payment.transaction.as_deref(), Some("sig1"), "a later update without tx id keeps it");
    assert_eq!(done.to_record().fee.unwrap().to_string(), "0.000005");
}

/// The reconciler's schedule: due payments, most overdue first, only on served networks (but
/// `verified` ones without a transaction anywhere); put back when rescheduled; gone once final.
async fn unfinished_payments_are_due_in_order(store: Arc<SqlStore>) {
    let devnet = [Network::solana_devnet()];
    let ids = |v: Vec<StoredPayment>| v.into_iter().map(|p| p.payment.id).collect::<Vec<_>>();
    for (id, due, tx) in
        [("pay_late", 20, Some("sig_late")), ("pay_early", 10, Some("sig_early")), ("pay_bare", 15, None)]
    {
        let p = NewPayment {
            transaction: tx.map(str::to_owned),
            next_check_at: Some(t0() + Duration::seconds(due)),
            ..payment(id, "acct", "f", "t", t0())
        };
        store.insert_payment(&p).await.unwrap();
    }
    let unscheduled = payment("pay_built", "acct", "f", "t", t0());
    store.insert_payment(&unscheduled).await.unwrap();
    let at = |s: i64| t0() + Duration::seconds(s);
    // A claim that lapses at once: a look without holding anything.
    let due = |networks: &'static [Network], now| {
        let store = store.clone();
        async move { store.claim_due_payments(networks, now, 10, now).await.unwrap() }
    };
    static DEVNET: std::sync::LazyLock<[Network; 1]> = std::sync::LazyLock::new(|| [Network::solana_devnet()]);
    static MAINNET: std::sync::LazyLock<[Network; 1]> = std::sync::LazyLock::new(|| [Network::solana_mainnet()]);
    assert!(due(&*DEVNET, at(9)).await.is_empty(), "nothing due yet");
    assert_eq!(ids(due(&*DEVNET, at(30)).await), ["pay_early", "pay_bare", "pay_late"]);
    assert_eq!(ids(store.claim_due_payments(&devnet, at(30), 2, at(30)).await.unwrap()), ["pay_early", "pay_bare"]);
    // A network not served: only what needs no chain.
    assert_eq!(ids(due(&*MAINNET, at(30)).await), ["pay_bare"]);
    store.reschedule_payment("pay_early", at(100)).await.unwrap();
    assert_eq!(ids(due(&*DEVNET, at(30)).await), ["pay_bare", "pay_late"]);
    let rescheduled = store.get_payment("pay_early").await.unwrap().unwrap();
    assert_eq!((rescheduled.checks, rescheduled.payment.next_check_at), (1, Some(at(100))));
    let mut submit = update(PaymentStatus::Submitted);
    submit.transaction = Some("sig_late".into());
    store.transition_payment("pay_late", PaymentStatus::Verified, &submit).await.unwrap();
    let failed = store.transition_payment("pay_late", PaymentStatus::Submitted, &update(PaymentStatus::Failed)).await;
    assert_eq!(failed.unwrap().payment.next_check_at, None, "final payments leave the schedule");
    assert_eq!(ids(due(&*DEVNET, at(50)).await), ["pay_bare"]);
    // A restart: everything unfinished is due now, the finished and unscheduled stay off.
    assert_eq!(store.bring_checks_forward(at(51)).await.unwrap(), 1, "pay_early (due at 100)");
    assert_eq!(ids(due(&*DEVNET, at(51)).await), ["pay_bare", "pay_early"]);
}

/// Several reconcilers: a claimed payment is skipped by the others until its claim is released
/// (rescheduled) or lapses (its holder died); a restart does not bring claimed payments forward.
async fn a_due_payment_is_claimed_by_one_reconciler_at_a_time(store: Arc<SqlStore>) {
    let devnet = [Network::solana_devnet()];
    let at = |s: i64| t0() + Duration::seconds(s);
    for i in 0..3 {
        let p = NewPayment {
            transaction: Some(format!("sig_{i}")),
            next_check_at: Some(at(10 + i)),
            ..payment(&format!("pay_{i}"), "acct", "f", "t", t0())
        };
        store.insert_payment(&p).await.unwrap();
    }
    let ids = |v: Vec<StoredPayment>| v.into_iter().map(|p| p.payment.id).collect::<Vec<_>>();
    // Instance A claims two until 200; instance B, at the same moment, gets only the third.
    assert_eq!(ids(store.claim_due_payments(&devnet, at(20), 2, at(200)).await.unwrap()), ["pay_0", "pay_1"]);
    assert_eq!(ids(store.claim_due_payments(&devnet, at(20), 10, at(200)).await.unwrap()), ["pay_2"]);
    assert!(store.claim_due_payments(&devnet, at(21), 10, at(200)).await.unwrap().is_empty(), "all claimed");
    // A restart elsewhere leaves claimed payments alone.
    assert_eq!(store.bring_checks_forward(at(22)).await.unwrap(), 0);
    // A releases pay_0 (no verdict: back on the schedule for 60), and dies holding pay_1.
    store.reschedule_payment("pay_0", at(60)).await.unwrap();
    assert!(store.claim_due_payments(&devnet, at(59), 10, at(300)).await.unwrap().is_empty());
    assert_eq!(ids(store.claim_due_payments(&devnet, at(60), 10, at(300)).await.unwrap()), ["pay_0"]);
    // pay_1's and pay_2's claims lapse at 200: another instance takes them then.
    assert!(store.claim_due_payments(&devnet, at(199), 10, at(400)).await.unwrap().is_empty());
    assert_eq!(ids(store.claim_due_payments(&devnet, at(200), 10, at(400)).await.unwrap()), ["pay_1", "pay_2"]);
}

/// Many reconcilers claiming at once take every due payment exactly once.
async fn racing_claims_take_each_payment_once(store: Arc<SqlStore>) {
    let at = |s: i64| t0() + Duration::seconds(s);
    for i in 0..120 {
        let p = NewPayment {
            transaction: Some(format!("sig_{i}")),
            next_check_at: Some(at(i % 7)),
            ..payment(&format!("pay_{i:03}"), "acct", "f", "t", t0())
        };
        store.insert_payment(&p).await.unwrap();
    }
    let claimers: Vec<_> = (0..6)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut mine = Vec::new();
                loop {
                    let page = store.claim_due_payments(&[Network::solana_devnet()], at(10), 7, at(500)).await.unwrap();
                    if page.is_empty() {
                        return mine;
                    }
                    mine.extend(page.into_iter().map(|p| p.payment.id));
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    let mut all = Vec::new();
    for c in claimers {
        all.extend(c.await.unwrap());
    }
    let total = all.len();
    all.sort();
    all.dedup();
    assert_eq!((total, all.len()), (120, 120), "each payment claimed once, none left out");
}

/// PostgreSQL announces every payment change in commit order and every key deletion; SQLite
/// announces nothing (its one instance publishes its own).
async fn changes_are_announced_in_order(store: Arc<SqlStore>) {
    let Some(mut heard) = store.listen().await.unwrap() else {
        assert!(!store.announces_changes());
        return;
    };
    assert!(store.announces_changes());
    store.insert_payment(&payment("pay_1", "acct", "f", "t", t0())).await.unwrap();
    let mut submit = update(PaymentStatus::Submitted);
    submit.transaction = Some("sig1".into());
    store.transition_payment("pay_1", PaymentStatus::Verified, &submit).await.unwrap();
    // A lost compare-and-set announces nothing.
    assert!(store.transition_payment("pay_1", PaymentStatus::Verified, &submit).await.is_err());
    store.transition_payment("pay_1", PaymentStatus::Submitted, &update(PaymentStatus::Confirmed)).await.unwrap();
    store.create_account("acct", t0()).await.unwrap();
    store.insert_api_key(&key("key_1", "acct", "look0001")).await.unwrap();
    store.delete_api_key("key_1").await.unwrap();
    let mut statuses = Vec::new();
    for _ in 0..3 {
        match heard.next().await.unwrap() {
            super::Announcement::Payment(n) => {
                let r = &n.route;
                assert_eq!((r.payment_id.as_str(), r.owner_account.as_str()), ("pay_1", "acct"));
                assert_eq!(r.wallets, ["f".to_owned(), "t".to_owned()]);
                let body: serde_json::Value = serde_json::from_str(&n.message).unwrap();
                assert_eq!(body["event"], "payment.updated");
                assert_eq!(body["payment"]["status"], r.status.as_str());
                statuses.push(r.status);
            }
            other => panic!("expected a payment change, heard {other:?}"),
        }
    }
    assert_eq!(statuses, [PaymentStatus::Verified, PaymentStatus::Submitted, PaymentStatus::Confirmed]);
    assert_eq!(heard.next().await.unwrap(), super::Announcement::KeyDeleted("key_1".into()));
    assert_eq!(store.purge_announcements(t0() + Duration::seconds(2)).await.unwrap(), 3);
}

/// PostgreSQL: a change and its announcement are one write. When the announcement cannot be
/// written (a fault injected with a trigger), neither the payment nor its status change is
/// recorded, and nothing is announced; once the fault is gone, the same change goes through.
async fn a_change_whose_announcement_fails_is_not_recorded(store: Arc<SqlStore>) {
    if !store.announces_changes() {
        return;
    }
    let mut heard = store.listen().await.unwrap().unwrap();
    sqlx::query(
        "CREATE FUNCTION refuse_event() RETURNS trigger AS $$ BEGIN \
         RAISE EXCEPTION 'disk full (injected)'; END; $$ LANGUAGE plpgsql",
    )
    .execute(&store.pool)
    .await
    .unwrap();
    let fault =
        "CREATE TRIGGER refuse_event BEFORE INSERT ON payment_events FOR EACH ROW EXECUTE FUNCTION refuse_event()";
    sqlx::query(fault).execute(&store.pool).await.unwrap();
    // The insert fails whole: no payment, no claim on its proof, nothing announced.
    let p = NewPayment { proof_id: Some("proof_1".into()), ..payment("pay_1", "acct", "f", "t", t0()) };
    assert!(matches!(store.insert_payment(&p).await, Err(StoreError::Database(_))));
    assert!(store.get_payment("pay_1").await.unwrap().is_none());
    assert!(store.payment_by_proof("proof_1").await.unwrap().is_none(), "the proof is not held");
    sqlx::query("DROP TRIGGER refuse_event ON payment_events").execute(&store.pool).await.unwrap();
    store.insert_payment(&p).await.unwrap();
    // A transition fails whole: the status stays, nothing announced.
    sqlx::query(fault).execute(&store.pool).await.unwrap();
    let mut submit = update(PaymentStatus::Submitted);
    submit.transaction = Some("sig1".into());
    assert!(store.transition_payment("pay_1", PaymentStatus::Verified, &submit).await.is_err());
    let unchanged = store.get_payment("pay_1").await.unwrap().unwrap();
    assert_eq!((unchanged.payment.status, unchanged.payment.transaction), (PaymentStatus::Verified, None));
    sqlx::query("DROP TRIGGER refuse_event ON payment_events").execute(&store.pool).await.unwrap();
    store.transition_payment("pay_1", PaymentStatus::Verified, &submit).await.unwrap();
    // Heard: the insert and the transition that were recorded, nothing of the failed attempts.
    let statuses: Vec<_> = [heard.next().await.unwrap(), heard.next().await.unwrap()]
        .into_iter()
        .map(|a| match a {
            super::Announcement::Payment(n) => n.route.status,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(statuses, [PaymentStatus::Verified, PaymentStatus::Submitted]);
}

/// PostgreSQL: one holder of an account's nonce at a time, across connections (instances); a
/// lock dropped without advancing records nothing. SQLite refuses (one instance, in-process).
async fn a_nonce_is_held_by_one_sender_at_a_time(store: Arc<SqlStore>) {
    use super::NonceStore as _;
    let network = Network::eip155(31337);
    if !store.announces_changes() {
        assert!(store.lock_nonce(&network, "0xabc").await.is_err());
        return;
    }
    let first = store.lock_nonce(&network, "0xabc").await.unwrap();
    assert_eq!(first.recorded(), None, "nothing recorded: ask the chain");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let waiter = {
        let store = store.clone();
        let network = network.clone();
        tokio::spawn(async move {
            let second = store.lock_nonce(&network, "0xabc").await.unwrap();
            tx.send(second.recorded()).unwrap();
            drop(second); // released without advancing
        })
    };
    // Another account is not held up.
    let other = store.lock_nonce(&network, "0xdef").await.unwrap();
    other.advance(1, t0()).await.unwrap();
    assert!(rx.try_recv().is_err(), "the second sender waits while the first holds the row");
    first.advance(7, t0()).await.unwrap();
    waiter.await.unwrap();
    assert_eq!(rx.recv().await.unwrap(), Some((7, t0())), "it reads what the first recorded");
    let third = store.lock_nonce(&network, "0xabc").await.unwrap();
    assert_eq!(third.recorded(), Some((7, t0())), "a dropped lock changed nothing");
}
/// A key deleted (and its deletion announced) while a request was reading it is not trusted for a
/// cache period afterwards: the verdict read before the announcement is not cached.
async fn a_key_deleted_while_it_is_read_is_not_cached_as_valid(store: Arc<SqlStore>) {
    use crate::admin::{NewKey, create_key};
    use crate::auth::keys::KeyEnv;
    if !store.announces_changes() {
        return; // one SQLite instance deletes through itself and forgets at once
    }
    let new = NewKey { plan: Plan::Standard, rpm: None, label: None, account: None, env: KeyEnv::Test };
    let created = create_key(&*store, new, t0()).await.unwrap();
    let key = created.secret.expose().to_owned();
    let auth = Arc::new(crate::auth::Authenticator::new(
        store.clone(),
        crate::plans::Plans::default(),
        Arc::new(crate::auth::rate_limit::InMemoryRateLimiter::new()),
        Arc::new(crate::clock::SystemClock),
        std::time::Duration::from_secs(600),
    ));
    // Another instance deletes the key, not yet committed.
    let mut deleting = store.pool.begin().await.unwrap();
    sqlx::query("DELETE FROM api_keys WHERE id = $1").bind(&created.record.id).execute(&mut *deleting).await.unwrap();
    // This instance reads the key (still there) and waits to record its use behind the deletion.
    let reading = tokio::spawn({
        let (auth, key) = (auth.clone(), key.clone());
        async move { auth.authenticate_key(&key).await }
    });
    let waiting = "SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
                   AND query LIKE 'UPDATE api_keys SET last_used_at%'";
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while sqlx::Row::get::<i64, _>(&sqlx::query(waiting).fetch_one(&store.pool).await.unwrap(), "n") == 0 {
        assert!(std::time::Instant::now() < deadline, "the read never waited behind the deletion");
        tokio::task::yield_now().await;
    }
    // The deletion's announcement arrives first, then the deletion commits.
    auth.forget_cached_keys();
    deleting.commit().await.unwrap();
    assert!(reading.await.unwrap().is_ok(), "the request in flight read the key before it was deleted");
    assert!(auth.authenticate_key(&key).await.is_err(), "the next request reads again: deleted");
}

async fn two_contenders_one_transition(store: Arc<SqlStore>) {
    store.insert_payment(&payment("pay_1", "acct", "f", "t", t0())).await.unwrap();
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut u = update(PaymentStatus::Submitted);
                u.transaction = Some(format!("sig{i}"));
                store.transition_payment("pay_1", PaymentStatus::Verified, &u).await
            })
        })
        .collect();
    let mut winners = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => winners += 1,
            Err(StoreError::Conflict { current }) => assert_eq!(current, PaymentStatus::Submitted),
            Err(e) => panic!("unexpected error {e}"),
        }
    }
    assert_eq!(winners, 1);
}

/// Claiming a proof is inserting its payment: 32 contenders, one payment; the losers are told
/// which payment holds it, and wrote nothing.
async fn a_proof_is_claimed_once(store: Arc<SqlStore>) {
    let tasks: Vec<_> = (0..32)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let p = NewPayment {
                    proof_id: Some("proof-1".into()),
                    ..payment(&format!("pay_{i}"), "acct", "f", "t", t0())
                };
                store.insert_payment(&p).await
            })
        })
        .collect();
    let (mut winners, mut holders) = (Vec::new(), Vec::new());
    for t in tasks {
        match t.await.unwrap() {
            Ok(p) => winners.push(p.payment.id),
            Err(StoreError::ProofUsed { payment_id }) => holders.push(payment_id),
            Err(e) => panic!("unexpected {e}"),
        }
    }
    assert_eq!(winners.len(), 1);
    assert!(holders.iter().all(|h| *h == winners[0]), "every loser is told the winner");
    let holder = store.payment_by_proof("proof-1").await.unwrap().unwrap();
    assert_eq!(holder.payment.id, winners[0]);
    assert_eq!(store.history("acct", "f", None, 50, 0).await.unwrap().total, 1, "losers left no history");
    assert!(store.payment_by_proof("proof-2").await.unwrap().is_none());

    // A payment that never reached the chain gives its proof back.
    let mut abandon = update(PaymentStatus::Failed);
    abandon.release_proof = true;
    store.transition_payment(&winners[0], PaymentStatus::Verified, &abandon).await.unwrap();
    assert!(store.payment_by_proof("proof-1").await.unwrap().is_none());
    let again = NewPayment { proof_id: Some("proof-1".into()), ..payment("pay_again", "acct", "f", "t", t0()) };
    store.insert_payment(&again).await.unwrap();
}

/// A transaction is one payment's own transfer per side, whichever account records it: a second
/// send recording it is refused (by the index), in the same account or another, while the
/// payee's record of the same transfer is not.
async fn a_transaction_is_one_payments_own_transfer(store: Arc<SqlStore>) {
    let send =
        |id: &str, owner: &str| NewPayment { transaction: Some("sig_x".into()), ..payment(id, owner, "f", "t", t0()) };
    store.insert_payment(&send("pay_1", "acct_a")).await.unwrap();
    match store.insert_payment(&send("pay_2", "acct_a")).await {
        Err(StoreError::TransactionUsed { payment_id }) => assert_eq!(payment_id, "pay_1"),
        other => panic!("expected TransactionUsed, got {other:?}"),
    }
    assert!(store.get_payment("pay_2").await.unwrap().is_none());
    let receipt = NewPayment { owner_side: Direction::Received, ..send("pay_3", "acct_a") };
    store.insert_payment(&receipt).await.unwrap();
    match store.insert_payment(&send("pay_4", "acct_b")).await {
        Err(StoreError::TransactionUsed { payment_id }) => assert_eq!(payment_id, "pay_1"),
        other => panic!("another account's send of the same transfer: expected TransactionUsed, got {other:?}"),
    }
    let other_payee = NewPayment { owner_side: Direction::Received, ..send("pay_6", "acct_b") };
    assert!(
        matches!(store.insert_payment(&other_payee).await, Err(StoreError::TransactionUsed { .. })),
        "nor can a second account record itself as its payee"
    );
    // Reported later (local mode): the same rule.
    store.insert_payment(&payment("pay_5", "acct_a", "f", "t", t0())).await.unwrap();
    let mut submit = update(PaymentStatus::Submitted);
    submit.transaction = Some("sig_x".into());
    match store.transition_payment("pay_5", PaymentStatus::Verified, &submit).await {
        Err(StoreError::TransactionUsed { payment_id }) => assert_eq!(payment_id, "pay_1"),
        other => panic!("expected TransactionUsed, got {other:?}"),
    }
    assert_eq!(store.get_payment("pay_5").await.unwrap().unwrap().payment.status, PaymentStatus::Verified);
}

/// Sixteen accounts' local payments racing to report one transfer as theirs: one wins, the
/// others are told whose it is and stay as they were (a built transaction is also claimed once,
/// by the proof index: `a_proof_is_claimed_once`).
async fn racing_reports_of_one_transfer_settle_one_payment(store: Arc<SqlStore>) {
    for i in 0..16 {
        let built = NewPayment {
            status: PaymentStatus::Built,
            mode: tollgate_protocol::gateway::PaymentMode::Local,
            proof_id: Some(format!("built-{i}")),
            ..payment(&format!("pay_{i}"), &format!("acct_{i}"), "f", "t", t0())
        };
        store.insert_payment(&built).await.unwrap();
    }
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut submit = update(PaymentStatus::Submitted);
                submit.transaction = Some("sig_shared".into());
                store.transition_payment(&format!("pay_{i}"), PaymentStatus::Built, &submit).await
            })
        })
        .collect();
    let (mut winners, mut holders) = (Vec::new(), Vec::new());
    for t in tasks {
        match t.await.unwrap() {
            Ok(p) => winners.push(p.payment.id),
            Err(StoreError::TransactionUsed { payment_id }) => holders.push(payment_id),
            Err(e) => panic!("unexpected {e}"),
        }
    }
    assert_eq!(winners.len(), 1, "{winners:?}");
    assert!(holders.iter().all(|h| *h == winners[0]), "every loser is told the winner");
    for i in 0..16 {
        let p = store.get_payment(&format!("pay_{i}")).await.unwrap().unwrap().payment;
        let won = p.id == winners[0];
        assert_eq!((p.status == PaymentStatus::Submitted, p.transaction.is_some()), (won, won), "{}", p.id);
    }
}

/// Thirty-two settlements of one account racing for a daily fee budget that holds ten: ten are
/// counted, whatever the interleaving; another family, day or account has its own.
async fn racing_settlements_never_spend_past_the_sponsorship_budget(store: Arc<SqlStore>) {
    use tollgate_protocol::ChainFamily;
    let tasks: Vec<_> = (0..32)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move { store.reserve_sponsorship("acct", ChainFamily::Solana, 20_000, 10, 100).await })
        })
        .collect();
    let mut counted = 0;
    for t in tasks {
        if t.await.unwrap().unwrap().is_some() {
            counted += 1;
        }
    }
    assert_eq!(counted, 10);
    assert_eq!(store.sponsorship_spent("acct", ChainFamily::Solana, 20_000).await.unwrap(), (100, 10));
    assert_eq!(store.reserve_sponsorship("acct", ChainFamily::Solana, 20_000, 1, 100).await.unwrap(), None);
    assert_eq!(store.reserve_sponsorship("acct", ChainFamily::Evm, 20_000, 7, 100).await.unwrap(), Some(7));
    assert_eq!(store.reserve_sponsorship("acct", ChainFamily::Solana, 20_001, 7, 100).await.unwrap(), Some(7));
    assert_eq!(store.reserve_sponsorship("other", ChainFamily::Solana, 20_000, 7, 100).await.unwrap(), Some(7));
    assert_eq!(store.reserve_sponsorship("other", ChainFamily::Solana, 20_000, 101, 100).await.unwrap(), None);
    assert_eq!(store.sponsorship_spent("other", ChainFamily::Solana, 20_000).await.unwrap(), (7, 7));
    assert_eq!(store.sponsorship_spent("nobody", ChainFamily::Solana, 20_000).await.unwrap(), (0, 0));
    // Given back when nothing was sent: room again, never below nothing.
    store.release_sponsorship("other", ChainFamily::Solana, 20_000, 5).await.unwrap();
    assert_eq!(store.sponsorship_spent("other", ChainFamily::Solana, 20_000).await.unwrap().0, 2);
    store.release_sponsorship("other", ChainFamily::Solana, 20_000, 50).await.unwrap();
    assert_eq!(store.sponsorship_spent("other", ChainFamily::Solana, 20_000).await.unwrap().0, 0);
    store.release_sponsorship("nobody", ChainFamily::Solana, 20_000, 5).await.unwrap();
    assert_eq!(store.sponsorship_spent("nobody", ChainFamily::Solana, 20_000).await.unwrap(), (0, 0));
}

/// Payments A→B and B→A between two accounts' wallets, inserted concurrently, all land: their
/// counter updates take the same order, so PostgreSQL cannot deadlock them.
async fn opposite_payments_do_not_deadlock(store: Arc<SqlStore>) {
    let tasks: Vec<_> = (0..48)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let (owner, other, from, to) =
                    if i % 2 == 0 { ("acct_a", "acct_b", "A", "B") } else { ("acct_b", "acct_a", "B", "A") };
                let p = NewPayment {
                    counterparty_account: Some(other.into()),
                    ..payment(&format!("pay_{i}"), owner, from, to, t0())
                };
                store.insert_payment(&p).await
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    assert_eq!(store.history("acct_a", "A", None, 50, 0).await.unwrap().total, 48);
    assert_eq!(store.history("acct_b", "B", Some(Direction::Sent), 50, 0).await.unwrap().total, 24);
}

/// A write whose caller goes away while the database runs it (a client that hangs up) is written
/// whole or not at all, and the next writes go through: nothing is left open on the connection
/// payments are written with (SQLite keeps one for them; a transaction of its own begun there is
/// undone by the next borrower).
async fn a_write_whose_caller_left_is_whole_or_absent(store: Arc<SqlStore>) {
    let mut left = Vec::new();
    for i in 0..20 {
        let gone = payment(&format!("pay_gone{i}"), "acct_c", "F", "T", t0() + Duration::seconds(i));
        // Polled once (sent to the database), then dropped.
        let _ = tokio::time::timeout(std::time::Duration::ZERO, store.insert_payment(&gone)).await;
        if i % 2 == 0 {
            // ... and a transition, the same way.
            let moving = payment(&format!("pay_moving{i}"), "acct_c", "F", "T", t0() + Duration::seconds(i));
            store.insert_payment(&moving).await.unwrap();
            let _ = tokio::time::timeout(
                std::time::Duration::ZERO,
                store.transition_payment(&moving.id, PaymentStatus::Verified, &update(PaymentStatus::Submitted)),
            )
            .await;
            left.push(moving.id);
        }
        // The next writes go through, after whatever the dropped one left.
        let next = payment(&format!("pay_next{i}"), "acct_c", "F", "T", t0() + Duration::seconds(i));
        let next = store.insert_payment(&next).await.unwrap();
        store
            .transition_payment(&next.payment.id, PaymentStatus::Verified, &update(PaymentStatus::Submitted))
            .await
            .unwrap();
        left.push(gone.id);
    }
    // Each dropped write is whole or absent: every payment written is in the history, counted once.
    let mut written = 20;
    for id in &left {
        match store.get_payment(id).await.unwrap() {
            Some(p) => {
                written += 1;
                assert!(matches!(p.payment.status, PaymentStatus::Verified | PaymentStatus::Submitted), "{id}");
            }
            None => assert!(id.starts_with("pay_gone"), "{id} was inserted whole before"),
        }
    }
    let history = store.history("acct_c", "F", Some(Direction::Sent), 200, 0).await.unwrap();
    assert_eq!(history.total, written, "counted once per payment written");
    assert_eq!(history.entries.len() as u64, written, "listed once per payment written");
}

/// A write the database rolls back whole on its own (SQLite: a trigger's `RAISE(ROLLBACK)`, as a
/// full disk at `COMMIT` does; PostgreSQL: an error, which aborts the transaction), then a write
/// refused by its compare-and-set, leave the writes after them committed, seen by every other
/// connection. (The attack that found it, on 45bf136: the connection kept for payment writes
/// then stayed inside a transaction that never committed, and settlements answered success with
/// nothing recorded.)
async fn writes_after_one_the_database_rolled_back_are_committed(store: Arc<SqlStore>) {
    store.insert_payment(&payment("pay_a", "acct", "A", "B", t0())).await.unwrap();
    let mut ddl = store.pool.acquire().await.unwrap();
    let (fault, heal) = if store.announces_changes() {
        failing_inserts(&store, "wallet_payment_counts").await
    } else {
        (
            "CREATE TRIGGER refuse_boom BEFORE INSERT ON wallet_payment_counts WHEN NEW.wallet = 'BOOM' \
             BEGIN SELECT RAISE(ROLLBACK, 'disk full (injected)'); END"
                .to_owned(),
            "DROP TRIGGER refuse_boom".to_owned(),
        )
    };
    sqlx::query(&fault).execute(&mut *ddl).await.unwrap();
    let boom = payment("pay_boom", "acct", "BOOM", "B", t0());
    assert!(store.insert_payment(&boom).await.is_err());
    sqlx::query(&heal).execute(&mut *ddl).await.unwrap();
    let refused = store.transition_payment("pay_a", PaymentStatus::Submitted, &update(PaymentStatus::Pending)).await;
    assert!(matches!(refused, Err(StoreError::Conflict { current: PaymentStatus::Verified })), "{refused:?}");

    store.insert_payment(&payment("pay_c", "acct", "C", "B", t0())).await.unwrap();
    store.transition_payment("pay_c", PaymentStatus::Verified, &update(PaymentStatus::Submitted)).await.unwrap();
    // Read through the pool, whose connections are not the one payments are written with.
    let c = store.get_payment("pay_c").await.unwrap().expect("committed");
    assert_eq!(c.payment.status, PaymentStatus::Submitted);
    assert!(store.get_payment("pay_boom").await.unwrap().is_none());
    // And a write through the pool is not kept waiting by a transaction left open.
    sqlx::query("UPDATE payments SET checks = checks + 1 WHERE id = 'pay_c'").execute(&mut *ddl).await.unwrap();
}

/// SQLite: a pooled write whose transaction SQLite rolled back itself (a trigger's
/// `RAISE(ROLLBACK)`, as a full disk at `COMMIT` does) does not leave its connection in the pool
/// to swallow later writes (an attack on 002cbd4: webhook registrations answered 201 and were
/// never committed, and SQLite's write lock stayed held).
async fn pooled_writes_after_one_the_database_rolled_back_are_committed(store: Arc<SqlStore>) {
    use super::WebhookStore as _;
    if store.announces_changes() {
        return; // PostgreSQL ends an aborted transaction with the rollback sqlx sends.
    }
    store.create_account("acct", t0()).await.unwrap();
    let mut ddl = store.pool.acquire().await.unwrap();
    for trigger in [
        "CREATE TRIGGER refuse_boom BEFORE INSERT ON webhook_endpoints WHEN NEW.id = 'whe_boom' \
         BEGIN SELECT RAISE(ROLLBACK, 'disk full (injected)'); END",
        "CREATE TRIGGER refuse_abort BEFORE INSERT ON webhook_endpoints WHEN NEW.id = 'whe_abort' \
         BEGIN SELECT RAISE(ABORT, 'refused (injected)'); END",
    ] {
        sqlx::query(trigger).execute(&mut *ddl).await.unwrap();
    }
    drop(ddl);
    assert!(store.insert_webhook_endpoint(&endpoint("whe_boom", "acct"), 100).await.is_err());
    // Failed writes roll back (on a connection still counted in a transaction: to a savepoint,
    // leaving open the transaction that savepoint began).
    for _ in 0..8 {
        assert!(store.insert_webhook_endpoint(&endpoint("whe_abort", "acct"), 100).await.is_err());
    }
    // More writes than the pool has connections: each goes through one of them in turn.
    for i in 0..12 {
        assert!(store.insert_webhook_endpoint(&endpoint(&format!("whe_{i}"), "acct"), 100).await.unwrap());
    }
    // Seen by a store of its own on the same file: committed.
    let file: String = sqlx::query_scalar("SELECT file FROM pragma_database_list WHERE name = 'main'")
        .fetch_one(&store.pool)
        .await
        .unwrap();
    let other = SqlStore::connect(&DatabaseUrl::parse(&format!("sqlite://{file}")).unwrap()).await.unwrap();
    assert_eq!(other.webhook_endpoints(Some("acct")).await.unwrap().len(), 12);
    other.close().await;
}

async fn history_is_newest_first_filtered_and_private(store: Arc<SqlStore>) {
    // acct_a's wallet A pays B three times and receives from C twice; acct_z pays A once.
    for i in 0..3 {
        store
            .insert_payment(&payment(&format!("pay_s{i}"), "acct_a", "A", "B", t0() + Duration::seconds(i)))
            .await
            .unwrap();
    }
    for i in 0..2 {
        store
            .insert_payment(&payment(&format!("pay_r{i}"), "acct_a", "C", "A", t0() + Duration::seconds(10 + i)))
            .await
            .unwrap();
    }
    store.insert_payment(&payment("pay_z", "acct_z", "Z", "A", t0() + Duration::seconds(20))).await.unwrap();

    let all = store.history("acct_a", "A", None, 50, 0).await.unwrap();
    assert_eq!(all.total, 5, "acct_z's payment is not acct_a's");
    let ids: Vec<_> = all.entries.iter().map(|(p, d)| (p.payment.id.as_str(), *d)).collect();
    assert_eq!(
        ids,
        [
            ("pay_r1", Direction::Received),
            ("pay_r0", Direction::Received),
            ("pay_s2", Direction::Sent),
            ("pay_s1", Direction::Sent),
            ("pay_s0", Direction::Sent)
        ]
    );
    let sent = store.history("acct_a", "A", Some(Direction::Sent), 2, 1).await.unwrap();
    assert_eq!(sent.total, 3);
    let ids: Vec<_> = sent.entries.iter().map(|(p, _)| p.payment.id.as_str()).collect();
    assert_eq!(ids, ["pay_s1", "pay_s0"]);
    let received = store.history("acct_a", "A", Some(Direction::Received), 50, 0).await.unwrap();
    assert_eq!(received.total, 2);
    let past_end = store.history("acct_a", "A", None, 50, 10).await.unwrap();
    assert_eq!((past_end.total, past_end.entries.len()), (5, 0));
    let other = store.history("acct_z", "A", None, 50, 0).await.unwrap();
    assert_eq!(other.total, 1);
    assert_eq!(other.entries[0].1, Direction::Received);
    assert_eq!(store.history("acct_nobody", "A", None, 50, 0).await.unwrap().total, 0);

    // A payment to an account's own other wallet shows for both wallets, once each.
    let mut both = payment("pay_both", "acct_a", "A", "D", t0() + Duration::seconds(30));
    both.counterparty_account = Some("acct_d".into());
    store.insert_payment(&both).await.unwrap();
    assert_eq!(store.history("acct_d", "D", None, 50, 0).await.unwrap().total, 1);
    assert_eq!(store.history("acct_a", "A", None, 50, 0).await.unwrap().total, 6);
}

async fn idempotency_records(store: Arc<SqlStore>) {
    let expire = t0() - Duration::hours(24);
    let begin = |hash: &'static str, at: DateTime<Utc>, exp: DateTime<Utc>| {
        let store = store.clone();
        async move { store.idempotency_begin("key_1", "idem-1", hash, at, exp).await.unwrap() }
    };
    assert_eq!(begin("h1", t0(), expire).await, IdempotencyBegin::Started);
    assert_eq!(begin("h1", t0(), expire).await, IdempotencyBegin::InProgress { started: t0() });
    assert_eq!(begin("h2", t0(), expire).await, IdempotencyBegin::Mismatch);
    let response = StoredResponse { status: 200, body: r#"{"ok":true}"#.into() };
    store.idempotency_complete("key_1", "idem-1", &response).await.unwrap();
    assert_eq!(begin("h1", t0(), expire).await, IdempotencyBegin::Replay(response.clone()));
    assert_eq!(begin("h2", t0(), expire).await, IdempotencyBegin::Mismatch);
    // Another API key has its own namespace.
    assert_eq!(
        store.idempotency_begin("key_2", "idem-1", "h2", t0(), expire).await.unwrap(),
        IdempotencyBegin::Started
    );
    // Abandoned requests can start again; completed ones are not abandoned.
    store.idempotency_abandon("key_2", "idem-1").await.unwrap();
    assert_eq!(
        store.idempotency_begin("key_2", "idem-1", "h3", t0(), expire).await.unwrap(),
        IdempotencyBegin::Started
    );
    store.idempotency_abandon("key_1", "idem-1").await.unwrap();
    assert_eq!(begin("h1", t0(), expire).await, IdempotencyBegin::Replay(response));
    // After the retention period the key is free again.
    let later = t0() + Duration::hours(25);
    assert_eq!(begin("h9", later, later - Duration::hours(24)).await, IdempotencyBegin::Started);
    assert_eq!(store.idempotency_purge(later + Duration::seconds(1)).await.unwrap(), 2);
}

async fn wallets(store: Arc<SqlStore>) {
    use super::StoredWallet;
    use tollgate_protocol::ChainFamily;
    store.create_account("acct_w", t0()).await.unwrap();
    let w = StoredWallet {
        address: "W1".into(),
        account_id: "acct_w".into(),
        family: ChainFamily::Solana,
        sealed_secret: "sealed".into(),
        created_at: t0(),
    };
    assert_eq!(store.wallet_account("W1").await.unwrap(), None, "not yet a wallet");
    store.insert_wallet(&w).await.unwrap();
    assert_eq!(store.get_wallet("W1").await.unwrap(), Some(w.clone()));
    assert!(store.get_wallet("W2").await.unwrap().is_none());
    // The question a settlement asks of its payer (SQLite: read without the pool).
    assert_eq!(store.wallet_account("W1").await.unwrap().as_deref(), Some("acct_w"));
    assert_eq!(store.wallet_account("W2").await.unwrap(), None);
    assert!(store.insert_wallet(&w).await.is_err(), "one row per address");
    let orphan = StoredWallet { address: "W3".into(), account_id: "acct_missing".into(), ..w };
    assert!(store.insert_wallet(&orphan).await.is_err(), "a wallet belongs to an existing account");
    assert!(!format!("{orphan:?}").contains("sealed"), "Debug does not print the sealed key");
}

fn endpoint(id: &str, account: &str) -> super::StoredWebhookEndpoint {
    super::StoredWebhookEndpoint {
        id: id.into(),
        account_id: account.into(),
        url: format!("https://{id}.example/hook"),
        description: None,
        sealed_secret: "sealed".into(),
        created_at: t0(),
    }
}

/// Every change of a payment queues one delivery per endpoint of each account that may see it,
/// in the change's transaction; claims are exclusive until recorded or lapsed; outcomes are kept.
async fn payment_changes_queue_webhook_deliveries(store: Arc<SqlStore>) {
    use super::{DeliveryOutcome, WebhookStore as _};
    for account in ["acct_a", "acct_b", "acct_c"] {
        store.create_account(account, t0()).await.unwrap();
    }
    for (id, account) in [("whe_a1", "acct_a"), ("whe_a2", "acct_a"), ("whe_b", "acct_b"), ("whe_c", "acct_c")] {
        assert!(store.insert_webhook_endpoint(&endpoint(id, account), 2).await.unwrap());
    }
    assert_eq!(store.webhook_endpoints(Some("acct_a")).await.unwrap().len(), 2);
    assert!(!store.insert_webhook_endpoint(&endpoint("whe_a3", "acct_a"), 2).await.unwrap(), "at most 2 here");
    assert_eq!(store.webhook_endpoints(None).await.unwrap().len(), 4);
    // acct_a owns the payment, acct_b is the other side; acct_c sees nothing.
    let mut p = payment("pay_1", "acct_a", "f", "t", t0());
    p.counterparty_account = Some("acct_b".into());
    store.insert_payment(&p).await.unwrap();
    let mut submit = update(PaymentStatus::Submitted);
    submit.transaction = Some("sig1".into());
    store.transition_payment("pay_1", PaymentStatus::Verified, &submit).await.unwrap();
    assert_eq!(store.webhook_backlog().await.unwrap(), 6, "2 changes × 3 endpoints");
    assert!(store.webhook_deliveries(Some("whe_c"), 10).await.unwrap().is_empty());
    let log = store.webhook_deliveries(Some("whe_b"), 10).await.unwrap();
    let events: Vec<_> = log.iter().map(|d| (d.event_id.as_str(), d.event_type.as_str())).collect();
    assert_eq!(events, [("evt_pay_1_submitted", "payment.submitted"), ("evt_pay_1_verified", "payment.verified")]);

    // Claimed rows are skipped by another claimer until released or lapsed.
    let now = t0() + Duration::seconds(1);
    let first = store.claim_webhook_deliveries(now, 4, now + Duration::seconds(60), &[]).await.unwrap();
    let second = store.claim_webhook_deliveries(now, 10, now + Duration::seconds(60), &[]).await.unwrap();
    assert_eq!((first.len(), second.len()), (4, 2));
    assert!(store.claim_webhook_deliveries(now, 10, now + Duration::seconds(60), &[]).await.unwrap().is_empty());
    let body: serde_json::Value = serde_json::from_str(&first[0].body).unwrap();
    assert_eq!(body["type"], "payment.verified");
    assert_eq!(body["data"]["payment"]["paymentId"], "pay_1");
    assert_eq!(body["id"].as_str(), Some(first[0].event_id.as_str()));
    // Outcomes: delivered; retried later; failed.
    store.record_webhook_attempt(first[0].id, now, &DeliveryOutcome::Delivered { status: 204 }).await.unwrap();
    let retry_at = now + Duration::seconds(10);
    let retry =
        DeliveryOutcome::Retry { status: Some(500), error: "the endpoint answered 500".into(), next_at: retry_at };
    store.record_webhook_attempt(first[1].id, now, &retry).await.unwrap();
    let failed = DeliveryOutcome::Failed { status: None, error: "x".repeat(1000) };
    store.record_webhook_attempt(first[2].id, now, &failed).await.unwrap();
    let all = store.webhook_deliveries(None, 10).await.unwrap();
    let row = |id: i64| all.iter().find(|d| d.id == id).unwrap().clone();
    let delivered = row(first[0].id);
    assert_eq!((delivered.state.as_str(), delivered.attempts, delivered.last_status), ("delivered", 1, Some(204)));
    assert_eq!(delivered.delivered_at, Some(now));
    let pending = row(first[1].id);
    assert_eq!(
        (pending.state.as_str(), pending.next_attempt_at, pending.last_status),
        ("pending", Some(retry_at), Some(500))
    );
    let gone = row(first[2].id);
    assert_eq!((gone.state.as_str(), gone.last_error.map(|e| e.len())), ("failed", Some(300)));
    // The retried row is due again at its time, not before; a lapsed claim is taken again.
    assert!(store.claim_webhook_deliveries(now, 10, now + Duration::seconds(60), &[]).await.unwrap().is_empty());
    let later = now + Duration::seconds(61);
    let again = store.claim_webhook_deliveries(later, 10, later + Duration::seconds(60), &[]).await.unwrap();
    let mut ids: Vec<i64> = again.iter().map(|d| d.id).collect();
    ids.sort_unstable();
    let mut expected = vec![first[1].id, first[3].id, second[0].id, second[1].id];
    expected.sort_unstable();
    assert_eq!(ids, expected, "the retry and the three whose claims lapsed");
    assert_eq!(again.iter().find(|d| d.id == first[1].id).unwrap().attempts, 1);
    // Released claims are due again at once; a sender skips the endpoints it is busy with.
    let ids: Vec<i64> = again.iter().map(|d| d.id).collect();
    store.release_webhook_claims(&ids).await.unwrap();
    let busy = vec!["whe_a1".to_owned()];
    let skipped = store.claim_webhook_deliveries(later, 10, later + Duration::seconds(60), &busy).await.unwrap();
    assert_eq!(skipped.len(), again.iter().filter(|d| d.endpoint_id != "whe_a1").count());
    assert!(skipped.iter().all(|d| d.endpoint_id != "whe_a1"));
    // Deleting an endpoint removes its deliveries; another account cannot delete it.
    assert!(!store.delete_webhook_endpoint("acct_c", "whe_b").await.unwrap());
    assert!(store.delete_webhook_endpoint("acct_b", "whe_b").await.unwrap());
    assert!(store.webhook_deliveries(Some("whe_b"), 10).await.unwrap().is_empty());
    assert!(store.webhook_endpoint("whe_b").await.unwrap().is_none());
}

/// The per-account endpoint limit holds when registrations race (several instances at once).
async fn racing_registrations_respect_the_endpoint_limit(store: Arc<SqlStore>) {
    use super::WebhookStore as _;
    store.create_account("acct_r", t0()).await.unwrap();
    let racers = (0..24).map(|i| {
        let store = store.clone();
        tokio::spawn(async move { store.insert_webhook_endpoint(&endpoint(&format!("whe_r{i}"), "acct_r"), 16).await })
    });
    let mut accepted = 0;
    for racer in racers {
        if racer.await.unwrap().unwrap() {
            accepted += 1;
        }
    }
    assert_eq!(accepted, 16);
    assert_eq!(store.webhook_endpoints(Some("acct_r")).await.unwrap().len(), 16);
}

/// A payment change and its webhook deliveries are one write: when the outbox cannot be written
/// (a fault injected with a trigger), the change is not recorded either.
async fn a_change_whose_webhooks_cannot_be_queued_is_not_recorded(store: Arc<SqlStore>) {
    use super::WebhookStore as _;
    store.create_account("acct", t0()).await.unwrap();
    assert!(store.insert_webhook_endpoint(&endpoint("whe_1", "acct"), 16).await.unwrap());
    // One connection makes and drops the fault: SQLite may prepare DDL against a connection's
    // cached schema, which another connection's change leaves stale.
    let mut ddl = store.pool.acquire().await.unwrap();
    let (fault, heal) = &failing_inserts(&store, "webhook_deliveries").await;
    sqlx::query(fault).execute(&mut *ddl).await.unwrap();
    let p = NewPayment { proof_id: Some("proof_1".into()), ..payment("pay_1", "acct", "f", "t", t0()) };
    assert!(store.insert_payment(&p).await.is_err());
    assert!(store.get_payment("pay_1").await.unwrap().is_none(), "no payment without its deliveries");
    assert!(store.payment_by_proof("proof_1").await.unwrap().is_none(), "the proof is not held");
    sqlx::query(heal).execute(&mut *ddl).await.unwrap();
    store.insert_payment(&p).await.unwrap();
    sqlx::query(fault).execute(&mut *ddl).await.unwrap();
    let mut submit = update(PaymentStatus::Submitted);
    submit.transaction = Some("sig1".into());
    assert!(store.transition_payment("pay_1", PaymentStatus::Verified, &submit).await.is_err());
    assert_eq!(store.get_payment("pay_1").await.unwrap().unwrap().payment.status, PaymentStatus::Verified);
    sqlx::query(heal).execute(&mut *ddl).await.unwrap();
    store.transition_payment("pay_1", PaymentStatus::Verified, &submit).await.unwrap();
    let log = store.webhook_deliveries(Some("whe_1"), 10).await.unwrap();
    let events: Vec<_> = log.iter().map(|d| d.event_type.as_str()).collect();
    assert_eq!(events, ["payment.submitted", "payment.verified"], "each recorded change once, nothing of the failures");
}

fn ticket(uses: u32, seconds: u64, request: &str) -> tollgate_protocol::ticket::Ticket {
    tollgate_protocol::ticket::Ticket { uses, seconds, request: Some(request.into()), pass: None }
}

/// A payment inserted with its ticket has its first answer counted; repeats are counted for the
/// same request within the window, up to its uses; an answer given back may be served again,
/// and with nothing served any request opens the ticket anew; the first terms hold.
async fn a_payments_answers_are_counted_by_its_ticket(store: Arc<SqlStore>) {
    use super::{AnswerClaim, AnswerStore as _};
    use tollgate_protocol::ticket::Answered;
    let p = NewPayment { ticket: Some(ticket(2, 60, "a")), ..payment("pay_1", "acct", "f", "t", t0()) };
    store.insert_payment(&p).await.unwrap();
    let at = |secs: i64| t0() + Duration::seconds(secs);
    let answered = |served| AnswerClaim::Claimed(Answered { served, uses: 2 });
    assert_eq!(store.claim_answer("pay_1", &ticket(2, 60, "b"), at(1)).await.unwrap(), AnswerClaim::OtherRequest);
    // Another seller setting (more uses) does not change the ticket.
    assert_eq!(store.claim_answer("pay_1", &ticket(9, 600, "a"), at(1)).await.unwrap(), answered(2));
    assert_eq!(
        store.claim_answer("pay_1", &ticket(2, 60, "a"), at(2)).await.unwrap(),
        AnswerClaim::UsedUp(Answered { served: 2, uses: 2 })
    );
    assert_eq!(store.release_answer("pay_1").await.unwrap(), Some(Answered { served: 1, uses: 2 }));
    assert_eq!(
        store.claim_answer("pay_1", &ticket(2, 60, "a"), at(61)).await.unwrap(),
        AnswerClaim::Expired { seconds: 60 }
    );
    assert_eq!(store.claim_answer("pay_1", &ticket(2, 60, "a"), at(59)).await.unwrap(), answered(2));
    // Both given back: nothing reached the buyer; the next request opens the ticket, whatever it is.
    store.release_answer("pay_1").await.unwrap();
    assert_eq!(store.release_answer("pay_1").await.unwrap(), Some(Answered { served: 0, uses: 2 }));
    assert_eq!(store.release_answer("pay_1").await.unwrap(), Some(Answered { served: 0, uses: 2 }), "never below none");
    assert_eq!(store.claim_answer("pay_1", &ticket(2, 60, "b"), at(500)).await.unwrap(), answered(1));
    assert_eq!(store.claim_answer("pay_1", &ticket(2, 60, "b"), at(520)).await.unwrap(), answered(2));
    // A payment recorded without a ticket gets one at its first claim; a request that cannot be
    // told again is served once.
    store.insert_payment(&payment("pay_2", "acct", "f", "t", t0())).await.unwrap();
    assert_eq!(store.release_answer("pay_2").await.unwrap(), None);
    let once = tollgate_protocol::ticket::Ticket { uses: 3, seconds: 60, request: None, pass: None };
    assert_eq!(
        store.claim_answer("pay_2", &once, at(1)).await.unwrap(),
        AnswerClaim::Claimed(Answered { served: 1, uses: 3 })
    );
    assert_eq!(store.claim_answer("pay_2", &once, at(2)).await.unwrap(), AnswerClaim::OtherRequest);
}

/// Sixty-four claims of one payment's answers at once: exactly its uses are counted.
async fn racing_claims_count_a_tickets_answers_once(store: Arc<SqlStore>) {
    use super::{AnswerClaim, AnswerStore as _};
    let p = NewPayment { ticket: Some(ticket(5, 60, "a")), ..payment("pay_1", "acct", "f", "t", t0()) };
    store.insert_payment(&p).await.unwrap();
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move { store.claim_answer("pay_1", &ticket(5, 60, "a"), t0()).await.unwrap() })
        })
        .collect();
    let mut claimed = Vec::new();
    for t in tasks {
        if let AnswerClaim::Claimed(answered) = t.await.unwrap() {
            claimed.push(answered.served);
        }
    }
    claimed.sort_unstable();
    assert_eq!(claimed, [2, 3, 4, 5], "the first answer came with the payment; four more, each once");
}

/// A payment whose ticket cannot be written is not recorded either (one transaction): its proof
/// stays free, and nothing is counted.
async fn a_payment_whose_first_answer_cannot_be_counted_is_not_recorded(store: Arc<SqlStore>) {
    use super::AnswerStore as _;
    let mut ddl = store.pool.acquire().await.unwrap();
    let (fault, heal) = &failing_inserts(&store, "answers").await;
    sqlx::query(fault).execute(&mut *ddl).await.unwrap();
    let p = NewPayment {
        proof_id: Some("proof_1".into()),
        ticket: Some(ticket(2, 60, "a")),
        ..payment("pay_1", "acct", "f", "t", t0())
    };
    assert!(store.insert_payment(&p).await.is_err());
    assert!(store.get_payment("pay_1").await.unwrap().is_none(), "no payment without its first answer");
    assert!(store.payment_by_proof("proof_1").await.unwrap().is_none(), "the proof is not held");
    sqlx::query(heal).execute(&mut *ddl).await.unwrap();
    store.insert_payment(&p).await.unwrap();
    assert_eq!(
        store.release_answer("pay_1").await.unwrap(),
        Some(tollgate_protocol::ticket::Answered { served: 0, uses: 2 })
    );
}

/// A pass is recorded with the payment that buys it, and opens its scope to its payer while that
/// payment is confirmed and the pass runs; the longest-running pass is found.
async fn a_pass_opens_its_scope_to_its_payer_while_confirmed(store: Arc<SqlStore>) {
    use super::AnswerStore as _;
    use tollgate_protocol::ticket::PassTerms;
    let scope = "https://seller.example/report";
    let pass = |seconds| Some(PassTerms { scope: scope.into(), seconds });
    let bought = |id: &str, seconds| NewPayment {
        ticket: Some(tollgate_protocol::ticket::Ticket { pass: pass(seconds), ..ticket(2, 60, "a") }),
        ..payment(id, "acct", "payer", "seller", t0())
    };
    store.insert_payment(&bought("pay_1", 3_600)).await.unwrap();
    let at = |secs: i64| t0() + Duration::seconds(secs);
    assert_eq!(store.find_pass("acct", scope, "payer", at(1)).await.unwrap(), None, "not confirmed yet");
    let mut submit = update(PaymentStatus::Submitted);
    submit.transaction = Some("sig1".into());
    store.transition_payment("pay_1", PaymentStatus::Verified, &submit).await.unwrap();
    store.transition_payment("pay_1", PaymentStatus::Submitted, &update(PaymentStatus::Confirmed)).await.unwrap();
    let found = store.find_pass("acct", scope, "payer", at(1)).await.unwrap().unwrap();
    assert_eq!((found.payment_id.as_str(), found.valid_until), ("pay_1", at(3_600)));
    assert_eq!(found.network, Network::solana_devnet());
    for (account, scope, payer) in
        [("other", scope, "payer"), ("acct", "https://seller.example/x", "payer"), ("acct", scope, "x")]
    {
        assert_eq!(store.find_pass(account, scope, payer, at(1)).await.unwrap(), None, "{account} {scope} {payer}");
    }
    assert_eq!(store.find_pass("acct", scope, "payer", at(3_600)).await.unwrap(), None, "ended");
    // A longer pass of the same payer, confirmed: found first.
    store.insert_payment(&NewPayment { transaction: Some("sig2".into()), ..bought("pay_2", 7_200) }).await.unwrap();
    let mut submit = update(PaymentStatus::Submitted);
    submit.transaction = Some("sig2".into());
    store.transition_payment("pay_2", PaymentStatus::Verified, &submit).await.unwrap();
    store.transition_payment("pay_2", PaymentStatus::Submitted, &update(PaymentStatus::Confirmed)).await.unwrap();
    assert_eq!(store.find_pass("acct", scope, "payer", at(10)).await.unwrap().unwrap().payment_id, "pay_2");
}

/// A sign-in message's nonce is claimed once per seller account, by one of racing claims;
/// claims past their expiry are purged.
async fn a_sign_in_nonce_is_used_once(store: Arc<SqlStore>) {
    use super::AnswerStore as _;
    let at = |secs: i64| t0() + Duration::seconds(secs);
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move { store.claim_sign_in_nonce("acct", "n0nce123", at(300), at(0)).await.unwrap() })
        })
        .collect();
    let mut won = 0;
    for t in tasks {
        won += usize::from(t.await.unwrap());
    }
    assert_eq!(won, 1);
    assert!(store.claim_sign_in_nonce("other", "n0nce123", at(300), at(0)).await.unwrap(), "another seller's");
    assert!(!store.claim_sign_in_nonce("acct", "n0nce123", at(300), at(299)).await.unwrap());
    assert!(store.claim_sign_in_nonce("acct", "n0nce123", at(900), at(301)).await.unwrap(), "purged once expired");
}

/// The statements that make inserts into `table` fail ("disk full", injected with a trigger) and
/// that heal it, for the store's engine.
/// A catalog entry of `account` for `url`, settled `at`, paid to `pay_to` in `scheme`.
fn cataloged(account: &str, url: &str, scheme: &str, pay_to: &str, at: DateTime<Utc>) -> crate::store::NewCatalogEntry {
    let requirement = serde_json::from_value(serde_json::json!({"scheme": scheme, "network": "eip155:8453",
        "amount": "1000", "asset": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", "payTo": pay_to, "maxTimeoutSeconds": 60}))
    .unwrap();
    let mut extensions = serde_json::Map::new();
    extensions.insert(
        "bazaar".into(),
        serde_json::json!({"info": {"input": {"type": "http", "method": "GET"}}, "schema": {}}),
    );
    crate::store::NewCatalogEntry {
        id: format!("dres_{}", ulid::Ulid::new()),
        account_id: account.into(),
        url: url.into(),
        tool_name: String::new(),
        kind: "http".into(),
        x402_version: 2,
        description: format!("about {url}"),
        mime_type: "application/json".into(),
        service: tollgate_protocol::x402::bazaar::ServiceMetadata::default(),
        accept: requirement,
        extensions,
        search_text: format!("about {url} 100%_sure"),
        at,
    }
}

const PAY_A: &str = "0x1111111111111111111111111111111111111111";
const PAY_B: &str = "0x2222222222222222222222222222222222222222";

async fn the_catalog_keeps_one_entry_per_resource_its_first_seller_owns(store: Arc<SqlStore>) {
    use crate::store::CatalogFilter as Filter;
    use crate::store::CatalogStore as _;
    let all = Filter { settled_since: 0, limit: 100, ..Filter::default() };
    store.catalog(&cataloged("a", "https://w.example/weather", "exact", PAY_A, t0())).await.unwrap();
    // Settled again, later, in another scheme and with a new description: one entry, two ways.
    let mut again = cataloged("a", "https://w.example/weather", "upto", PAY_A, t0() + Duration::seconds(5));
    again.description = "now with forecasts".into();
    again.search_text = "now with forecasts".into();
    store.catalog(&again).await.unwrap();
    // Another account naming a's URL catalogs nothing: the first account to catalog a resource
    // keeps it (the database's unique index), and a's entry is untouched.
    store
        .catalog(&cataloged("b", "https://w.example/weather", "exact", PAY_B, t0() + Duration::seconds(9)))
        .await
        .unwrap();
    assert!(store.catalog_of("b").await.unwrap().is_empty(), "b took a's resource");
    // b's own resource is b's.
    store
        .catalog(&cataloged("b", "https://b.example/weather", "exact", PAY_B, t0() + Duration::seconds(9)))
        .await
        .unwrap();
    let (entries, total) = store.catalog_list(&all).await.unwrap();
    assert_eq!(total, 2);
    let a = entries.iter().find(|e| e.account_id == "a").unwrap();
    assert_eq!(a.description, "now with forecasts");
    assert_eq!(a.accepts.iter().map(|r| r.scheme.as_str()).collect::<Vec<_>>(), ["upto", "exact"]);
    assert_eq!(a.last_settled_at, t0() + Duration::seconds(5));
    // Newest settlement first.
    assert_eq!(entries[0].account_id, "b");
    // A late write of an older settlement changes nothing of the entry.
    store.catalog(&cataloged("a", "https://w.example/weather", "exact", PAY_A, t0())).await.unwrap();
    let own = store.catalog_of("a").await.unwrap();
    assert_eq!(own.len(), 1);
    assert_eq!(own[0].last_settled_at, t0() + Duration::seconds(5));
    assert_eq!(own[0].description, "now with forecasts");
    // Filters: scheme, recipient, type, extension, age; words, with LIKE's wildcards escaped.
    let by = |f: Filter| {
        let store = store.clone();
        async move { store.catalog_list(&Filter { limit: 100, ..f }).await.unwrap().1 }
    };
    assert_eq!(by(Filter { scheme: Some("upto".into()), ..Filter::default() }).await, 1);
    assert_eq!(by(Filter { pay_to: Some(PAY_B.into()), ..Filter::default() }).await, 1);
    assert_eq!(by(Filter { scheme: Some("upto".into()), pay_to: Some(PAY_B.into()), ..Filter::default() }).await, 0);
    assert_eq!(by(Filter { kind: Some("mcp".into()), ..Filter::default() }).await, 0);
    assert_eq!(by(Filter { extension: Some("bazaar".into()), ..Filter::default() }).await, 2);
    assert_eq!(by(Filter { extension: Some("sign-in-with-x".into()), ..Filter::default() }).await, 0);
    let since = (t0() + Duration::seconds(6)).timestamp_millis();
    assert_eq!(by(Filter { settled_since: since, ..Filter::default() }).await, 1);
    assert_eq!(by(Filter { words: vec!["forecasts".into()], ..Filter::default() }).await, 1);
    assert_eq!(by(Filter { words: vec!["about".into(), "weather".into()], ..Filter::default() }).await, 1);
    assert_eq!(by(Filter { words: vec!["100%_sure".into()], ..Filter::default() }).await, 1);
    assert_eq!(by(Filter { words: vec!["100__sure".into()], ..Filter::default() }).await, 0);
    assert_eq!(by(Filter { words: vec!["%".into()], ..Filter::default() }).await, 1);
    assert_eq!(by(Filter { words: vec!["_".into(), "forecasts".into()], ..Filter::default() }).await, 0);
    // Paging.
    let (page, total) = store.catalog_list(&Filter { limit: 1, offset: 1, ..all.clone() }).await.unwrap();
    assert_eq!((page.len(), total, page[0].account_id.as_str()), (1, 2, "a"));
}

async fn a_seller_hides_and_deletes_only_its_own_entries(store: Arc<SqlStore>) {
    use crate::store::CatalogFilter as Filter;
    use crate::store::CatalogStore as _;
    let all = Filter { settled_since: 0, limit: 100, ..Filter::default() };
    store.catalog(&cataloged("a", "https://a.example/x", "exact", PAY_A, t0())).await.unwrap();
    store.catalog(&cataloged("b", "https://b.example/y", "exact", PAY_B, t0())).await.unwrap();
    let a = store.catalog_of("a").await.unwrap().remove(0);
    assert!(!store.catalog_hide("b", &a.id, true).await.unwrap(), "b hid a's entry");
    assert!(!store.catalog_delete("b", &a.id).await.unwrap(), "b deleted a's entry");
    assert!(store.catalog_hide("a", &a.id, true).await.unwrap());
    assert_eq!(store.catalog_list(&all).await.unwrap().1, 1);
    assert!(store.catalog_of("a").await.unwrap()[0].hidden);
    // Settling again does not list a hidden entry again: hiding is the seller's choice.
    store.catalog(&cataloged("a", "https://a.example/x", "exact", PAY_A, t0() + Duration::seconds(1))).await.unwrap();
    assert_eq!(store.catalog_list(&all).await.unwrap().1, 1);
    assert!(store.catalog_hide("a", &a.id, false).await.unwrap());
    assert_eq!(store.catalog_list(&all).await.unwrap().1, 2);
    assert!(store.catalog_delete("a", &a.id).await.unwrap());
    assert!(store.catalog_of("a").await.unwrap().is_empty());
    // Aged out: entries last settled before the cut are purged with their ways to pay.
    assert_eq!(store.catalog_purge((t0() + Duration::seconds(1)).timestamp_millis()).await.unwrap(), 1);
    assert_eq!(store.catalog_list(&all).await.unwrap().1, 0);
}

async fn racing_settlements_of_one_resource_make_one_entry(store: Arc<SqlStore>) {
    use crate::store::CatalogStore as _;
    let writes = (0..16).map(|i| {
        let store = store.clone();
        let scheme = if i % 2 == 0 { "exact" } else { "upto" };
        tokio::spawn(async move {
            store.catalog(&cataloged("a", "https://r.example/x", scheme, PAY_A, t0() + Duration::seconds(i))).await
        })
    });
    for write in futures_util::future::join_all(writes).await {
        write.unwrap().unwrap();
    }
    let own = store.catalog_of("a").await.unwrap();
    assert_eq!(own.len(), 1);
    assert_eq!(own[0].accepts.len(), 2);
    assert_eq!(own[0].last_settled_at, t0() + Duration::seconds(15));
}

async fn failing_inserts(store: &SqlStore, table: &str) -> (String, String) {
    if store.announces_changes() {
        let function = format!(
            "CREATE OR REPLACE FUNCTION refuse_{table}() RETURNS trigger AS $$ BEGIN \
             RAISE EXCEPTION 'disk full (injected)'; END; $$ LANGUAGE plpgsql"
        );
        sqlx::query(&function).execute(&store.pool).await.unwrap();
        (
            format!(
                "CREATE TRIGGER refuse_{table} BEFORE INSERT ON {table} FOR EACH ROW EXECUTE FUNCTION refuse_{table}()"
            ),
            format!("DROP TRIGGER refuse_{table} ON {table}"),
        )
    } else {
        (
            format!(
                "CREATE TRIGGER refuse_{table} BEFORE INSERT ON {table} BEGIN SELECT RAISE(ABORT, 'disk full (injected)'); END"
            ),
            format!("DROP TRIGGER refuse_{table}"),
        )
    }
}

macro_rules! suite {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let db = super::TestDb::sqlite().await;
                    super::$name(db.store.clone()).await;
                    db.cleanup().await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let Some(db) = super::TestDb::postgres(stringify!($name)).await else { return };
                    super::$name(db.store.clone()).await;
                    db.cleanup().await;
                }
            )*
        }
    };
}

suite!(
    api_keys,
    payments_round_trip,
    transitions_are_compare_and_set,
    unfinished_payments_are_due_in_order,
    a_due_payment_is_claimed_by_one_reconciler_at_a_time,
    racing_claims_take_each_payment_once,
    changes_are_announced_in_order,
    a_change_whose_announcement_fails_is_not_recorded,
    a_nonce_is_held_by_one_sender_at_a_time,
    a_key_deleted_while_it_is_read_is_not_cached_as_valid,
    two_contenders_one_transition,
    a_proof_is_claimed_once,
    a_transaction_is_one_payments_own_transfer,
    racing_reports_of_one_transfer_settle_one_payment,
    racing_settlements_never_spend_past_the_sponsorship_budget,
    opposite_payments_do_not_deadlock,
    history_is_newest_first_filtered_and_private,
    a_write_whose_caller_left_is_whole_or_absent,
    writes_after_one_the_database_rolled_back_are_committed,
    pooled_writes_after_one_the_database_rolled_back_are_committed,
    idempotency_records,
    wallets,
    payment_changes_queue_webhook_deliveries,
    a_change_whose_webhooks_cannot_be_queued_is_not_recorded,
    racing_registrations_respect_the_endpoint_limit,
    a_payments_answers_are_counted_by_its_ticket,
    racing_claims_count_a_tickets_answers_once,
    a_payment_whose_first_answer_cannot_be_counted_is_not_recorded,
    a_pass_opens_its_scope_to_its_payer_while_confirmed,
    a_sign_in_nonce_is_used_once,
    the_catalog_keeps_one_entry_per_resource_its_first_seller_owns,
    a_seller_hides_and_deletes_only_its_own_entries,
    racing_settlements_of_one_resource_make_one_entry,
);

#[tokio::test]
async fn sqlite_file_is_created_in_wal_mode_and_migrations_rerun_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fresh.db");
    let url = DatabaseUrl::parse(path.to_str().unwrap()).unwrap();
    let store = SqlStore::connect(&url).await.unwrap();
    store.close().await;
    assert!(path.exists());
    let again = SqlStore::connect(&url).await.unwrap();
    again.ping().await.unwrap();
    assert!(again.reads_directly(), "a SQLite file gets the direct reads");
    let mode: String = sqlx::Row::get(&sqlx::query("PRAGMA journal_mode").fetch_one(&again.pool).await.unwrap(), 0);
    assert_eq!(mode, "wal");
}
