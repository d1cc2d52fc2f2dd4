//! The event bus behind `GET /ws`.
//!
//! Every change of a payment goes through the [`Store`] and reaches the instance's tokio
//! broadcast channel ([`EventBus`]) once, serialized once whatever the number of listeners:
//! * on SQLite (one instance), [`PublishingStore`] wraps the store and publishes each inserted
//!   payment and each state transition it makes;
//! * on PostgreSQL (any number of instances), the database announces every change, written in
//!   the transaction that makes it, and [`follow_announcements`] publishes what it hears on every
//!   instance — so a listener on one instance sees a payment settled through another, in commit
//!   order, each change once. Key deletions are announced the same way and drop the instance's
//!   cached keys at once. If the listening connection drops, whatever was announced meanwhile is
//!   lost: cached keys are dropped and every WebSocket follower is told to reconnect.
//!
//! The channel keeps the last [`DEFAULT_CAPACITY`] events for all listeners together, so memory
//! does not grow with slow listeners: one that falls that far behind loses events and is told
//! so (the WebSocket feed then closes its connection).

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio::sync::{broadcast, watch};
use tollgate_protocol::gateway::{Direction, PaymentStatus};
use tollgate_protocol::{ChainFamily, Network};

use crate::store::{
    AccountStore, Announcement, Announcements, DeliveryOutcome, DeliveryRecord, DueDelivery, HistoryPage,
    IdempotencyBegin, IdempotencyStore, NewPayment, PaymentNotice, PaymentRoute, PaymentStore, PaymentUpdate, Store,
    StoreResult, StoredApiKey, StoredPayment, StoredResponse, StoredWallet, StoredWebhookEndpoint, WebhookStore,
};

/// Events kept for listeners that are behind.
pub const DEFAULT_CAPACITY: usize = 4_096;
pub use crate::store::PAYMENT_UPDATED;

/// One payment change, with who may see it.
#[derive(Debug)]
pub struct PaymentEvent {
    /// Which payment, to what status, seen by whom.
    pub route: PaymentRoute,
    /// `{"event": "payment.updated", "payment": <record>}`, serialized once; every connection
    /// sends the same bytes (a clone is a reference count).
    pub message: axum::extract::ws::Utf8Bytes,
    /// When it was published (for delivery-latency measurements).
    pub published: std::time::Instant,
}

impl PaymentEvent {
    fn from_notice(notice: PaymentNotice) -> Self {
        Self {
            route: notice.route,
            message: axum::extract::ws::Utf8Bytes::from(notice.message),
            published: std::time::Instant::now(),
        }
    }
}

/// Publishes payment changes to every listener of this instance.
#[derive(Debug, Clone)]
pub struct EventBus {
    sender: broadcast::Sender<Arc<PaymentEvent>>,
    /// Counts the times events may have been lost (the database's announcements were cut).
    gaps: Arc<watch::Sender<u64>>,
    /// Ids of API keys deleted (here, or on any instance when the database announces it): their
    /// live connections close.
    revoked: broadcast::Sender<Arc<str>>,
}

impl Default for EventBus {
    fn default() -> Self {
        Self::new(DEFAULT_CAPACITY)
    }
}

impl EventBus {
    /// A bus keeping the last `capacity` events for listeners that are behind.
    #[must_use]
    pub fn new(capacity: usize) -> Self {
        Self {
            sender: broadcast::channel(capacity.max(1)).0,
            gaps: Arc::new(watch::channel(0).0),
            revoked: broadcast::channel(REVOCATIONS).0,
        }
    }

    /// Announces that API key `key_id` was deleted: its live connections close.
    pub fn revoke(&self, key_id: &str) {
        let _ = self.revoked.send(Arc::from(key_id));
    }

    /// Learns of deleted keys from now on.
    #[must_use]
    pub fn subscribe_revocations(&self) -> broadcast::Receiver<Arc<str>> {
        self.revoked.subscribe()
    }

    /// Publishes a payment's current state (nobody listening is fine).
    pub fn publish(&self, stored: &StoredPayment) {
        if self.sender.receiver_count() == 0 {
            return;
        }
        self.publish_notice(PaymentNotice::of(stored));
    }

    /// Publishes a payment change announced by the database.
    pub fn publish_notice(&self, notice: PaymentNotice) {
        if self.sender.receiver_count() == 0 {
            return;
        }
        // An error means every listener left meanwhile: nothing to do.
        let _ = self.sender.send(Arc::new(PaymentEvent::from_notice(notice)));
    }

    /// Tells every listener that events may have been lost (they must resubscribe).
    pub fn gap(&self) {
        self.gaps.send_modify(|n| *n += 1);
    }

    /// Learns of gaps from now on.
    #[must_use]
    pub fn subscribe_gaps(&self) -> watch::Receiver<u64> {
        self.gaps.subscribe()
    }

    /// A new listener, receiving what is published from now on.
    #[must_use]
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<PaymentEvent>> {
        self.sender.subscribe()
    }

    /// Listeners right now.
    #[must_use]
    pub fn listeners(&self) -> usize {
        self.sender.receiver_count()
    }
}

/// A [`Store`] that publishes every payment it inserts or moves on an [`EventBus`] — unless the
/// database announces them itself ([`Store::announces_changes`]), which [`follow_announcements`]
/// then publishes.
pub struct PublishingStore {
    inner: Arc<dyn Store>,
    bus: EventBus,
    publish: bool,
}

impl std::fmt::Debug for PublishingStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PublishingStore").finish_non_exhaustive()
    }
}

impl PublishingStore {
    /// Wraps `inner`; its payment changes go to `bus`.
    #[must_use]
    pub fn new(inner: Arc<dyn Store>, bus: EventBus) -> Self {
        let publish = !inner.announces_changes();
        Self { inner, bus, publish }
    }

    fn publish(&self, stored: &StoredPayment) {
        // Each instance counts the changes it makes (announced ones are counted where made).
        crate::telemetry::payment_changed(stored);
        if self.publish {
            self.bus.publish(stored);
        }
    }
}

#[async_trait]
impl Store for PublishingStore {
    async fn ping(&self) -> StoreResult<()> {
        self.inner.ping().await
    }
    fn announces_changes(&self) -> bool {
        self.inner.announces_changes()
    }
    async fn listen(&self) -> StoreResult<Option<Box<dyn Announcements>>> {
        self.inner.listen().await
    }
    async fn purge_announcements(&self, before: DateTime<Utc>) -> StoreResult<u64> {
        self.inner.purge_announcements(before).await
    }
}

#[async_trait]
impl AccountStore for PublishingStore {
    async fn create_account(&self, id: &str, at: DateTime<Utc>) -> StoreResult<()> {
        self.inner.create_account(id, at).await
    }
    async fn account_exists(&self, id: &str) -> StoreResult<bool> {
        self.inner.account_exists(id).await
    }
    async fn insert_api_key(&self, key: &StoredApiKey) -> StoreResult<()> {
        self.inner.insert_api_key(key).await
    }
    async fn find_api_key(&self, lookup: &str) -> StoreResult<Option<StoredApiKey>> {
        self.inner.find_api_key(lookup).await
    }
    async fn list_api_keys(&self) -> StoreResult<Vec<StoredApiKey>> {
        self.inner.list_api_keys().await
    }
    async fn delete_api_key(&self, id: &str) -> StoreResult<bool> {
        self.inner.delete_api_key(id).await
    }
    async fn dashboard_epoch(&self) -> StoreResult<i64> {
        self.inner.dashboard_epoch().await
    }
    async fn end_dashboard_sessions(&self) -> StoreResult<i64> {
        self.inner.end_dashboard_sessions().await
    }
    async fn reserve_sponsorship(
        &self,
        account: &str,
        family: ChainFamily,
        day: i64,
        amount: u64,
        budget: u64,
    ) -> StoreResult<Option<u64>> {
        self.inner.reserve_sponsorship(account, family, day, amount, budget).await
    }
    async fn sponsorship_spent(&self, account: &str, family: ChainFamily, day: i64) -> StoreResult<(u64, u64)> {
        self.inner.sponsorship_spent(account, family, day).await
    }
    async fn touch_api_key(&self, id: &str, at: DateTime<Utc>) -> StoreResult<()> {
        self.inner.touch_api_key(id, at).await
    }
    async fn insert_wallet(&self, wallet: &StoredWallet) -> StoreResult<()> {
        self.inner.insert_wallet(wallet).await
    }
    async fn get_wallet(&self, address: &str) -> StoreResult<Option<StoredWallet>> {
        self.inner.get_wallet(address).await
    }
    async fn count_wallets(&self) -> StoreResult<u64> {
        self.inner.count_wallets().await
    }
    async fn first_wallet(&self) -> StoreResult<Option<StoredWallet>> {
        self.inner.first_wallet().await
    }
}

#[async_trait]
impl PaymentStore for PublishingStore {
    async fn insert_payment(&self, payment: &NewPayment) -> StoreResult<StoredPayment> {
        let stored = self.inner.insert_payment(payment).await?;
        self.publish(&stored);
        Ok(stored)
    }
    async fn get_payment(&self, id: &str) -> StoreResult<Option<StoredPayment>> {
        self.inner.get_payment(id).await
    }
    async fn payment_by_proof(&self, proof_id: &str) -> StoreResult<Option<StoredPayment>> {
        self.inner.payment_by_proof(proof_id).await
    }
    async fn transition_payment(
        &self,
        id: &str,
        expected: PaymentStatus,
        update: &PaymentUpdate,
    ) -> StoreResult<StoredPayment> {
        let stored = self.inner.transition_payment(id, expected, update).await?;
        self.publish(&stored);
        Ok(stored)
    }
    async fn claim_due_payments(
        &self,
        networks: &[Network],
        now: DateTime<Utc>,
        limit: u32,
        claim_until: DateTime<Utc>,
    ) -> StoreResult<Vec<StoredPayment>> {
        self.inner.claim_due_payments(networks, now, limit, claim_until).await
    }
    async fn reschedule_payment(&self, id: &str, at: DateTime<Utc>) -> StoreResult<()> {
        self.inner.reschedule_payment(id, at).await
    }
    async fn bring_checks_forward(&self, at: DateTime<Utc>) -> StoreResult<u64> {
        self.inner.bring_checks_forward(at).await
    }
    async fn unfinished_payments(&self) -> StoreResult<u64> {
        self.inner.unfinished_payments().await
    }
    async fn recent_payments(&self, limit: u32) -> StoreResult<Vec<StoredPayment>> {
        self.inner.recent_payments(limit).await
    }
    async fn history(
        &self,
        account: &str,
        wallet: &str,
        direction: Option<Direction>,
        limit: u32,
        offset: u64,
    ) -> StoreResult<HistoryPage> {
        self.inner.history(account, wallet, direction, limit, offset).await
    }
}

#[async_trait]
impl WebhookStore for PublishingStore {
    async fn insert_webhook_endpoint(&self, endpoint: &StoredWebhookEndpoint, max: u32) -> StoreResult<bool> {
        self.inner.insert_webhook_endpoint(endpoint, max).await
    }
    async fn webhook_endpoints(&self, account_id: Option<&str>) -> StoreResult<Vec<StoredWebhookEndpoint>> {
        self.inner.webhook_endpoints(account_id).await
    }
    async fn webhook_endpoint(&self, id: &str) -> StoreResult<Option<StoredWebhookEndpoint>> {
        self.inner.webhook_endpoint(id).await
    }
    async fn first_webhook_endpoint(&self) -> StoreResult<Option<StoredWebhookEndpoint>> {
        self.inner.first_webhook_endpoint().await
    }
    async fn delete_webhook_endpoint(&self, account_id: &str, id: &str) -> StoreResult<bool> {
        self.inner.delete_webhook_endpoint(account_id, id).await
    }
    async fn claim_webhook_deliveries(
        &self,
        now: DateTime<Utc>,
        limit: u32,
        claim_until: DateTime<Utc>,
        skip: &[String],
    ) -> StoreResult<Vec<DueDelivery>> {
        self.inner.claim_webhook_deliveries(now, limit, claim_until, skip).await
    }
    async fn release_webhook_claims(&self, ids: &[i64]) -> StoreResult<()> {
        self.inner.release_webhook_claims(ids).await
    }
    async fn record_webhook_attempt(&self, id: i64, at: DateTime<Utc>, outcome: &DeliveryOutcome) -> StoreResult<()> {
        self.inner.record_webhook_attempt(id, at, outcome).await
    }
    async fn webhook_deliveries(&self, endpoint_id: Option<&str>, limit: u32) -> StoreResult<Vec<DeliveryRecord>> {
        self.inner.webhook_deliveries(endpoint_id, limit).await
    }
    async fn webhook_backlog(&self) -> StoreResult<u64> {
        self.inner.webhook_backlog().await
    }
}

#[async_trait]
impl IdempotencyStore for PublishingStore {
    async fn idempotency_begin(
        &self,
        key_id: &str,
        idem_key: &str,
        request_hash: &str,
        at: DateTime<Utc>,
        expire_before: DateTime<Utc>,
    ) -> StoreResult<IdempotencyBegin> {
        self.inner.idempotency_begin(key_id, idem_key, request_hash, at, expire_before).await
    }
    async fn idempotency_complete(&self, key_id: &str, idem_key: &str, response: &StoredResponse) -> StoreResult<()> {
        self.inner.idempotency_complete(key_id, idem_key, response).await
    }
    async fn idempotency_abandon(&self, key_id: &str, idem_key: &str) -> StoreResult<()> {
        self.inner.idempotency_abandon(key_id, idem_key).await
    }
    async fn idempotency_purge(&self, before: DateTime<Utc>) -> StoreResult<u64> {
        self.inner.idempotency_purge(before).await
    }
}

/// Publishes what the database announces on this instance's bus, and drops cached keys when one
/// is deleted anywhere, until `stop` changes. `first` is a stream opened already (before the
/// server accepted its first connection, so nothing a client could see is missed); without one,
/// or once it fails, it listens anew (waiting a little longer each time, at most
/// [`RELISTEN_MAX`]); a lost connection is a gap (see the module's notes).
pub async fn follow_announcements(
    store: Arc<dyn Store>,
    bus: EventBus,
    auth: Arc<crate::auth::Authenticator>,
    mut stop: watch::Receiver<bool>,
    mut first: Option<Box<dyn Announcements>>,
) {
    let mut delay = std::time::Duration::from_millis(100);
    loop {
        let listening = match first.take() {
            Some(opened) => Ok(Some(opened)),
            None => tokio::select! {
                l = store.listen() => l,
                _ = stop.changed() => return,
            },
        };
        let mut announcements = match listening {
            Ok(Some(a)) => a,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen to the database's announcements yet; retrying");
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    _ = stop.changed() => return,
                }
                delay = (delay * 2).min(RELISTEN_MAX);
                continue;
            }
        };
        delay = std::time::Duration::from_millis(100);
        // Whatever happened before listening began (or while it was down) is unknown here.
        auth.forget_cached_keys();
        loop {
            let next = tokio::select! {
                n = announcements.next() => n,
                _ = stop.changed() => return,
            };
            match next {
                Ok(Announcement::Payment(notice)) => bus.publish_notice(notice),
                Ok(Announcement::KeyDeleted(key_id)) => {
                    tracing::info!(%key_id, "API key deleted: cached keys dropped, its connections closed");
                    auth.forget_cached_keys();
                    bus.revoke(&key_id);
                }
                Ok(Announcement::Gap) => {
                    tracing::warn!("lost the database's announcements for a moment: followers must resubscribe");
                    auth.forget_cached_keys();
                    bus.gap();
                }
                Err(e) => {
                    tracing::warn!(error = %e, "reading the database's announcements failed; listening again");
                    auth.forget_cached_keys();
                    bus.gap();
                    break;
                }
            }
        }
    }
}

/// Key deletions kept for connections that are behind (a connection that misses some checks
/// its own key at once).
const REVOCATIONS: usize = 64;

/// Longest wait between two attempts to listen to the database.
pub const RELISTEN_MAX: std::time::Duration = std::time::Duration::from_secs(5);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::plans::Plans;
    use crate::auth::rate_limit::InMemoryRateLimiter;
    use crate::store::SqlStore;

    /// Announcements the test sends one by one.
    struct Scripted(tokio::sync::mpsc::UnboundedReceiver<Announcement>);

    #[async_trait]
    impl Announcements for Scripted {
        async fn next(&mut self) -> StoreResult<Announcement> {
            match self.0.recv().await {
                Some(next) => Ok(next),
                None => std::future::pending().await,
            }
        }
    }

    fn notice(status: PaymentStatus) -> PaymentNotice {
        PaymentNotice {
            route: PaymentRoute {
                payment_id: "pay_1".into(),
                owner_account: "acct".into(),
                counterparty_account: None,
                wallets: ["f".into(), "t".into()],
                status,
            },
            message: format!("{{\"status\":\"{}\"}}", status.as_str()),
        }
    }

    #[tokio::test]
    async fn announcements_reach_the_bus_in_order_and_deletions_and_gaps_drop_cached_keys() {
        let dir = tempfile::tempdir().unwrap();
        let url = crate::config::DatabaseUrl::parse(dir.path().join("t.db").to_str().unwrap()).unwrap();
        let store: Arc<dyn Store> = Arc::new(SqlStore::connect(&url).await.unwrap());
        let auth = Arc::new(crate::auth::Authenticator::new(
            store.clone(),
            Plans::default(),
            Arc::new(InMemoryRateLimiter::new()),
            Arc::new(crate::clock::SystemClock),
            std::time::Duration::from_secs(600),
        ));
        let cache_a_verdict = || async {
            // An unknown key: its verdict is cached too.
            let _ = auth.authenticate_key(&format!("tg_test_{}", "1".repeat(40))).await;
            auth.cache_sync();
            assert_eq!(auth.cached_keys(), 1);
        };
        let bus = EventBus::default();
        let mut events = bus.subscribe();
        let mut gaps = bus.subscribe_gaps();
        let (script, announcements) = tokio::sync::mpsc::unbounded_channel();
        let (stop_tx, stop_rx) = watch::channel(false);
        let follower = tokio::spawn(follow_announcements(
            store,
            bus.clone(),
            auth.clone(),
            stop_rx,
            Some(Box::new(Scripted(announcements))),
        ));
        script.send(Announcement::Payment(notice(PaymentStatus::Submitted))).unwrap();
        script.send(Announcement::Payment(notice(PaymentStatus::Confirmed))).unwrap();
        assert_eq!(events.recv().await.unwrap().route.status, PaymentStatus::Submitted);
        assert_eq!(events.recv().await.unwrap().route.status, PaymentStatus::Confirmed);

        cache_a_verdict().await;
        script.send(Announcement::KeyDeleted("key_1".into())).unwrap();
        script.send(Announcement::Payment(notice(PaymentStatus::Failed))).unwrap();
        assert_eq!(events.recv().await.unwrap().route.status, PaymentStatus::Failed, "in order after the deletion");
        auth.cache_sync();
        assert_eq!(auth.cached_keys(), 0, "a deletion anywhere drops the cached verdicts");

        cache_a_verdict().await;
        script.send(Announcement::Gap).unwrap();
        gaps.changed().await.unwrap();
        assert_eq!(*gaps.borrow(), 1, "followers told once");
        auth.cache_sync();
        assert_eq!(auth.cached_keys(), 0, "a gap drops the cached verdicts");
        stop_tx.send(true).unwrap();
        follower.await.unwrap();
    }
}
