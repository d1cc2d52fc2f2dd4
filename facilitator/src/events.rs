//! The in-process event bus behind `GET /ws`.
//!
//! Every change of a payment goes through the [`Store`]; [`PublishingStore`] wraps the store of
//! an instance and publishes each inserted payment and each state transition it makes, once, on a
//! tokio broadcast channel ([`EventBus`]). Each instance publishes its own changes. The event is
//! serialized once, whatever the number of listeners.
//!
//! The channel keeps the last [`DEFAULT_CAPACITY`] events for all listeners together, so memory
//! does not grow with slow listeners: one that falls that far behind loses events and is told
//! so (the WebSocket feed then closes its connection).

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio::sync::broadcast;
use tollgate_protocol::Network;
use tollgate_protocol::gateway::{Direction, PaymentStatus};

use crate::store::{
    AccountStore, HistoryPage, IdempotencyBegin, IdempotencyStore, NewPayment, PaymentStore, PaymentUpdate, Store,
    StoreResult, StoredApiKey, StoredPayment, StoredResponse, StoredWallet,
};

/// Events kept for listeners that are behind.
pub const DEFAULT_CAPACITY: usize = 4_096;
/// The event name of a payment change.
pub const PAYMENT_UPDATED: &str = "payment.updated";

/// One payment change, with who may see it.
#[derive(Debug)]
pub struct PaymentEvent {
    /// The payment.
    pub payment_id: String,
    /// The account that owns it.
    pub owner_account: String,
    /// The other side's account, when it is a custodial wallet here.
    pub counterparty_account: Option<String>,
    /// Payer and payee addresses (canonical text).
    pub wallets: [String; 2],
    /// Its new status.
    pub status: PaymentStatus,
    /// `{"event": "payment.updated", "payment": <record>}`, serialized once; every connection
    /// sends the same bytes (a clone is a reference count).
    pub message: axum::extract::ws::Utf8Bytes,
    /// When it was published (for delivery-latency measurements).
    pub published: std::time::Instant,
}

impl PaymentEvent {
    /// Whether `account` may see it.
    #[must_use]
    pub fn visible_to(&self, account: &str) -> bool {
        self.owner_account == account || self.counterparty_account.as_deref() == Some(account)
    }

    fn from_stored(stored: &StoredPayment) -> Self {
        let message = serde_json::json!({"event": PAYMENT_UPDATED, "payment": stored.to_record()}).to_string();
        let p = &stored.payment;
        Self {
            payment_id: p.id.clone(),
            owner_account: p.owner_account.clone(),
            counterparty_account: p.counterparty_account.clone(),
            wallets: [p.from.clone(), p.to.clone()],
            status: p.status,
            message: axum::extract::ws::Utf8Bytes::from(message),
            published: std::time::Instant::now(),
        }
    }
}

/// Publishes payment changes to every listener of this instance.
#[derive(Debug, Clone)]
pub struct EventBus {
    sender: broadcast::Sender<Arc<PaymentEvent>>,
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
        Self { sender: broadcast::channel(capacity.max(1)).0 }
    }

    /// Publishes a payment's current state (nobody listening is fine).
    pub fn publish(&self, stored: &StoredPayment) {
        if self.sender.receiver_count() == 0 {
            return;
        }
        // An error means every listener left meanwhile: nothing to do.
        let _ = self.sender.send(Arc::new(PaymentEvent::from_stored(stored)));
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

/// A [`Store`] that publishes every payment it inserts or moves on an [`EventBus`].
pub struct PublishingStore {
    inner: Arc<dyn Store>,
    bus: EventBus,
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
        Self { inner, bus }
    }
}

#[async_trait]
impl Store for PublishingStore {
    async fn ping(&self) -> StoreResult<()> {
        self.inner.ping().await
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
    async fn touch_api_key(&self, id: &str, at: DateTime<Utc>) -> StoreResult<()> {
        self.inner.touch_api_key(id, at).await
    }
    async fn insert_wallet(&self, wallet: &StoredWallet) -> StoreResult<()> {
        self.inner.insert_wallet(wallet).await
    }
    async fn get_wallet(&self, address: &str) -> StoreResult<Option<StoredWallet>> {
        self.inner.get_wallet(address).await
    }
}

#[async_trait]
impl PaymentStore for PublishingStore {
    async fn insert_payment(&self, payment: &NewPayment) -> StoreResult<StoredPayment> {
        let stored = self.inner.insert_payment(payment).await?;
        self.bus.publish(&stored);
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
        self.bus.publish(&stored);
        Ok(stored)
    }
    async fn due_payments(
        &self,
        networks: &[Network],
        now: DateTime<Utc>,
        limit: u32,
    ) -> StoreResult<Vec<StoredPayment>> {
        self.inner.due_payments(networks, now, limit).await
    }
    async fn reschedule_payment(&self, id: &str, at: DateTime<Utc>) -> StoreResult<()> {
        self.inner.reschedule_payment(id, at).await
    }
    async fn bring_checks_forward(&self, at: DateTime<Utc>) -> StoreResult<u64> {
        self.inner.bring_checks_forward(at).await
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
