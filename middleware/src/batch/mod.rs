//! x402 `batch-settlement`, the seller's part ([`crate::Price::batch`]): a buyer deposits once
//! into an on-chain channel, then signs per request a cumulative voucher; the layer checks it,
//! serves, and counts the charge; claims and one sweep settle many requests at once
//! ([`claims`]).
//!
//! | payload | what the layer does |
//! |---|---|
//! | `voucher` | the voucher must be exactly what was charged plus this price; checked in process (signature, balance, claimed) while the chain state read for the channel is fresh, else by the facilitator's `/verify`; served; the charge committed |
//! | `deposit` | verified, settled by the facilitator (the deposit lands first), served, charged |
//! | `refund` | not served: the layer adds the claim of what was charged and the refund nonce, and the facilitator settles the refund of the rest |
//!
//! A voucher that is not the next one (the buyer lost count) gets the corrective 402: the
//! channel as the seller holds it (`channelState`) and the last voucher signed (`voucherState`)
//! in the requirement's `extra`, for the buyer to check and continue from.
//!
//! One channel may pay several routes of a seller: every layer of the process that keeps its
//! channels in one store shares them ([`Channels::shared`]: one count, one lock and one claimer
//! per channel), and layers that name no store share the process's own. Requests on one channel
//! are served one at a time; every write of a channel is a compare-and-set in the
//! [`ChannelStore`], so instances sharing a store never serve two answers on one increment: the
//! loser's answer is withheld. A charge is durable before its answer is released.

pub mod claims;
#[cfg(feature = "redis")]
pub mod redis;
pub mod store;

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, Weak};

use serde_json::Value;
use tollgate_protocol::x402::{PaymentPayloadV2, PaymentRequirements};

pub use self::claims::ClaimPolicy;
#[cfg(feature = "redis")]
pub use self::redis::RedisChannels;
pub use self::store::{ChannelRecord, ChannelStore, ChannelStoreError, FileChannels, MemoryChannels, REFUND_WINDOW};

/// The x402 reason codes the layer answers with (the official seller's).
pub use tollgate_protocol::x402::batch::reason;

/// The batch-settlement part of a layer: its channels, one lock per channel, and the claimer.
pub(crate) struct Channels {
    pub store: Arc<dyn ChannelStore>,
    pub policy: ClaimPolicy,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    claimer: std::sync::OnceLock<claims::Handle>,
}

impl std::fmt::Debug for Channels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channels").field("store", &self.store).field("policy", &self.policy).finish_non_exhaustive()
    }
}

/// The channels of each store in use ([`ChannelStore::key`]), shared by the layers using it.
static SHARED: LazyLock<Mutex<HashMap<String, Weak<Channels>>>> = LazyLock::new(Mutex::default);

/// The store of the layers that name none: one per process.
static PROCESS_STORE: LazyLock<Arc<MemoryChannels>> = LazyLock::new(Arc::default);

impl Channels {
    /// The channels kept in `store` (the process's own when `None`), shared with every other
    /// layer using that store; claimed on `policy`.
    ///
    /// # Errors
    /// When layers sharing the store name different claim policies.
    pub(crate) fn shared(store: Option<Arc<dyn ChannelStore>>, policy: ClaimPolicy) -> Result<Arc<Self>, String> {
        let store = store.unwrap_or_else(|| PROCESS_STORE.clone());
        let key = store.key();
        let mut shared = SHARED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        shared.retain(|_, channels| channels.strong_count() > 0);
        if let Some(channels) = shared.get(&key).and_then(Weak::upgrade) {
            if channels.policy != policy {
                return Err(format!(
                    "layers keeping channels in one store claim them on one policy ({:?}, not {policy:?})",
                    channels.policy
                ));
            }
            return Ok(channels);
        }
        let channels =
            Arc::new(Self { store, policy, locks: Mutex::new(HashMap::new()), claimer: std::sync::OnceLock::new() });
        shared.insert(key, Arc::downgrade(&channels));
        Ok(channels)
    }

    /// This channel's lock, held while one of its requests is checked, served and charged.
    pub(crate) async fn lock(&self, channel_id: &str) -> Held<'_> {
        let lock = {
            let mut locks = self.locks.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            locks.entry(channel_id.to_owned()).or_default().clone()
        };
        let guard = lock.clone().lock_owned().await;
        Held { channels: self, id: channel_id.to_owned(), lock, _guard: guard }
    }

    /// The claimer, started with the first batch payment (asking `facilitator`, on `tasks`).
    pub(crate) fn claimer(
        &self,
        facilitator: &Arc<dyn crate::facilitator::Facilitator>,
        tasks: &tokio_util::task::TaskTracker,
    ) -> &claims::Handle {
        self.claimer
            .get_or_init(|| claims::start((facilitator.clone(), tasks), self.store.clone(), self.policy.clone()))
    }
}

/// A channel's lock, held; its entry is dropped with the last holder.
pub(crate) struct Held<'a> {
    channels: &'a Channels,
    id: String,
    lock: Arc<tokio::sync::Mutex<()>>,
    _guard: tokio::sync::OwnedMutexGuard<()>,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let mut locks = self.channels.locks.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // The map's, this one's and the guard's: nobody else waits.
        if Arc::strong_count(&self.lock) <= 3 {
            locks.remove(&self.id);
        }
    }
}

/// The seller's payload to send the facilitator, under `requirement`.
pub(crate) fn envelope(requirement: &PaymentRequirements, payload: Value) -> PaymentPayloadV2 {
    PaymentPayloadV2 {
        x402_version: tollgate_protocol::x402::V2,
        resource: None,
        accepted: requirement.clone(),
        payload,
        extensions: serde_json::Map::new(),
    }
}

/// The scheme's name.
pub const SCHEME: &str = tollgate_protocol::x402::batch::SCHEME;

/// Whether `scheme` is paid through channels.
pub(crate) fn is_batch(scheme: &str) -> bool {
    scheme == SCHEME
}
