//! The event bus behind `GET /ws`: this instance's payment changes, key revocations and gaps,
//! for its WebSocket listeners.
//!
//! Every change of a payment reaches the instance's tokio broadcast channel ([`EventBus`])
//! once, serialized once whatever the number of listeners:
//! * on SQLite (one instance), the store tells the bus of each payment it inserts or moves
//!   ([`crate::store::Store::on_change`], hooked up by [`crate::app::AppState::new`]);
//! * on PostgreSQL (any number of instances), the database announces every change, written in
//!   the transaction that makes it, and [`crate::runtime::follow_announcements`] publishes what
//!   it hears on every instance — so a listener on one instance sees a payment settled through
//!   another, in commit order, each change once.
//!
//! The channel keeps the last [`DEFAULT_CAPACITY`] events for all listeners together, so memory
//! does not grow with slow listeners: one that falls that far behind loses events and is told
//! so (the WebSocket feed then closes its connection).

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{broadcast, watch};

use crate::store::{PaymentNotice, PaymentRoute, StoredPayment};

/// Events kept for listeners that are behind.
pub const DEFAULT_CAPACITY: usize = 4_096;
pub use crate::store::PAYMENT_UPDATED;

/// One payment change, with who may see it.
#[derive(Debug)]
pub struct PaymentEvent {
    /// Which payment, to what status, seen by whom.
    pub route: PaymentRoute,
    /// `{"event": "payment.updated", "payment": <record>}`, serialized once, as UTF-8; every
    /// connection sends the same bytes (a clone is a reference count).
    pub message: Bytes,
    /// When it was published (for delivery-latency measurements).
    pub published: std::time::Instant,
}

impl PaymentEvent {
    fn from_notice(notice: PaymentNotice) -> Self {
        Self { route: notice.route, message: Bytes::from(notice.message), published: std::time::Instant::now() }
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

/// Key deletions kept for connections that are behind (a connection that misses some checks
/// its own key at once).
const REVOCATIONS: usize = 64;
