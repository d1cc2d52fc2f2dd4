//! One sender's nonces, handed out one at a time.
//!
//! Two payments from one account must not take the same nonce, and a nonce must not be skipped
//! (a gap stalls every later transaction). A [`NonceManager`] keeps a lock per address: a payment
//! holds its [`NonceLease`] from taking the nonce until its transaction's broadcast is known to
//! have reached the node, and each lease starts from the larger of the node's pending count (as
//! last known) and the last nonce handed out. Any other end — not broadcast, refused, or an
//! answer lost on the way — forgets what it knew, so the next lease starts again from the node's
//! pending count: a transaction that never reached the node leaves no gap (its nonce is reused,
//! and the payment that held it is expired once the chain shows the nonce taken), one that did is
//! counted by the node. Until the node's count passes that nonce, every lease asks the node
//! again: a transaction that reached it behind a gap waits in its pool out of the pending count,
//! and the count jumps past it once the gap is filled (no nonce handed out twice).
//!
//! **One instance** keeps the last nonce in process (and nothing on disk: after a restart it asks
//! the node), with the same recovery from lost transactions as below. **Several instances** on
//! one PostgreSQL share it through the database ([`NonceManager::shared`]): a lease also holds
//! the account's row locked ([`crate::store::NonceStore`]), so instances take turns, and the next
//! nonce is recorded there when a broadcast is accepted. A recorded nonce the node still has not
//! counted after a while ([`GAP_AFTER`] unless `[limits] evm_nonce_gap_secs` says otherwise)
//! means those transactions were lost (a node restarted, or the load balancer sent them to a node
//! that dropped them): the lease recovers from the chain's count instead of leaving a gap
//! forever.
//!
//! **The node is not asked for every transaction.** What an instance knows is checked by the
//! chain whenever one of its transactions is mined (the pipeline reads its receipt: see
//! [`NonceManager::confirmed`]); a lease within [`ASK_EVERY`] of the last check starts from the
//! nonce this instance (or, shared, the database) knows to be next, with no call. The
//! facilitator's account is its own: a transaction some other program sends from it makes the
//! next settlement's nonce too low, the node refuses it (nothing moves; that payment fails), and
//! the refusal makes the following lease ask again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use alloy::primitives::Address;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tollgate_protocol::Network;

use super::rpc::EvmRpc;
use crate::chains::{ChainError, Hold, Sent};
use crate::store::{NonceLock, NonceStore};

/// How long a recorded nonce may stay ahead of the node's pending count before the node is
/// believed instead (its transactions were lost), unless configured otherwise
/// ([`NonceManager::with_gap_after`]).
pub const GAP_AFTER: chrono::Duration = chrono::Duration::seconds(30);

/// How long after the chain last checked what this instance knows of an account's nonces (the
/// node asked, or a transaction of the account's mined) it trusts that without asking again.
pub const ASK_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

/// What this instance knows of an account's nonces: the next one it handed out and when (one
/// instance; several keep it in the database), the node's count as last known, when the chain
/// last checked them, and the highest nonce it handed out whose broadcast's fate is unknown
/// (and when).
#[derive(Debug, Clone, Copy)]
struct Known {
    next: Option<(u64, DateTime<Utc>)>,
    on_chain: u64,
    checked: tokio::time::Instant,
    /// A handout that may sit in the node's pool behind a gap, out of its pending count: while
    /// the count has not passed it (and for no longer than the gap), every lease asks the node,
    /// whose count moves past it the moment the gap is filled.
    unsure: Option<(u64, DateTime<Utc>)>,
}

impl Known {
    /// Whether the chain checked it recently enough to go without asking the node.
    fn recent(&self, now: tokio::time::Instant) -> bool {
        now.saturating_duration_since(self.checked) < ASK_EVERY
    }

    /// Whether it is worth asking the node ahead of the next lease (half-way through).
    fn aging(&self, now: tokio::time::Instant) -> bool {
        now.saturating_duration_since(self.checked) >= ASK_EVERY / 2
    }
}

/// Per-address nonce locks, optionally shared with other instances through the database.
pub struct NonceManager {
    accounts: Mutex<HashMap<Address, Arc<tokio::sync::Mutex<Option<Known>>>>>,
    shared: Option<(Arc<dyn NonceStore>, Network)>,
    /// How long handouts may stay unknown to the node before they count as lost.
    gap_after: chrono::Duration,
}

impl Default for NonceManager {
    fn default() -> Self {
        Self { accounts: Mutex::default(), shared: None, gap_after: GAP_AFTER }
    }
}

impl std::fmt::Debug for NonceManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NonceManager").field("shared", &self.shared.is_some()).finish_non_exhaustive()
    }
}

/// The right to use one nonce of one account; others wait until it is dropped.
pub struct NonceLease {
    guard: tokio::sync::OwnedMutexGuard<Option<Known>>,
    nonce: u64,
    /// The node's count as last known, and when the chain last checked it.
    on_chain: u64,
    checked: tokio::time::Instant,
    /// Since when nonces handed out have been ahead of the chain's count: the oldest handout not
    /// known to be taken (a lost one shows after the manager's gap, however busy the account).
    since: DateTime<Utc>,
    used: bool,
    /// A handout of this instance the node's count has not passed yet, its fate unknown.
    unsure: Option<(u64, DateTime<Utc>)>,
    /// The account's row, held locked in the database (several instances).
    row: Option<Box<dyn NonceLock>>,
}

impl std::fmt::Debug for NonceLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NonceLease").field("nonce", &self.nonce).field("shared", &self.row.is_some()).finish()
    }
}

impl NonceLease {
    /// The nonce to sign with.
    #[must_use]
    pub const fn nonce(&self) -> u64 {
        self.nonce
    }

    /// The node took the transaction with this nonce: the next lease takes the next one.
    pub async fn used(mut self) {
        self.used = true;
        if let Some(row) = self.row.take()
            && let Err(e) = row.advance(self.nonce + 1, self.since).await
        {
            // Nothing recorded: forgotten here too, so that the next lease asks the node, whose
            // count includes this one.
            self.used = false;
            tracing::warn!(error = %e, nonce = self.nonce, "could not record the next nonce");
        }
    }
}

impl Drop for NonceLease {
    fn drop(&mut self) {
        // Not known to be taken: what this instance handed out is forgotten, and the next leases
        // ask the node until its count passes this nonce (the transaction may be in its pool,
        // waiting behind a gap). (A database row dropped unadvanced rolls back: nothing
        // recorded.)
        let unsure = match self.unsure {
            _ if self.used => self.unsure,
            Some((higher, at)) if higher > self.nonce => Some((higher, at)),
            _ => Some((self.nonce, Utc::now())),
        };
        *self.guard = Some(Known {
            next: self.used.then_some((self.nonce + 1, self.since)),
            on_chain: self.on_chain,
            checked: self.checked,
            unsure,
        });
    }
}

#[async_trait]
impl Hold for NonceLease {
    async fn release(self: Box<Self>, sent: Sent) {
        if sent == Sent::Accepted {
            self.used().await;
        }
    }
}

impl NonceManager {
    /// Nonces shared with every instance using `store`, for accounts on `network`.
    #[must_use]
    pub fn shared(store: Arc<dyn NonceStore>, network: Network) -> Self {
        Self { shared: Some((store, network)), ..Self::default() }
    }

    /// A manager like this one (shared alike; before any lease), taking handouts still unknown
    /// to the node after `gap` as lost instead of [`GAP_AFTER`].
    #[must_use]
    pub fn with_gap_after(&self, gap: chrono::Duration) -> Self {
        Self { accounts: Mutex::default(), shared: self.shared.clone(), gap_after: gap }
    }

    /// How long handouts may stay unknown to the node before they count as lost.
    #[must_use]
    pub const fn gap_after(&self) -> chrono::Duration {
        self.gap_after
    }

    /// Waits for `address`'s lock and returns its next nonce.
    ///
    /// # Errors
    /// [`ChainError`] when the node or the shared store cannot be asked.
    pub async fn lease(&self, rpc: &EvmRpc, address: Address) -> Result<NonceLease, ChainError> {
        // In process first: one database connection per account at most waits for the row.
        let guard = self.lock(address).lock_owned().await;
        let row = match &self.shared {
            None => None,
            Some((store, network)) => Some(store.lock_nonce(network, &format!("{address:#x}")).await.map_err(|e| {
                // The detail (a database error) is for the operator, not the caller.
                tracing::warn!(error = %e, %address, "cannot lease a nonce");
                ChainError(format!(
                    "could not take the next nonce of {address:#x} in time (this instance is sending from many \
                     accounts at once, or another send from this account is stuck); nothing was sent: try again \
                     shortly"
                ))
            })?),
        };
        let now = tokio::time::Instant::now();
        let wall = Utc::now();
        // The next nonce as recorded: by the database (several instances), else in process.
        let recorded = match &row {
            Some(row) => row.recorded(),
            None => guard.and_then(|k| k.next),
        };
        // Trusted without asking the node: checked by the chain lately, no handout whose fate is
        // unknown, and no handout older than the gap still unknown to it (lost, perhaps: only the
        // node's count can tell).
        let gap = self.gap_after;
        let trusted =
            (*guard).filter(|k| k.unsure.is_none() && k.recent(now) && !lost_perhaps(recorded, k.on_chain, wall, gap));
        let (on_chain, checked) = match trusted {
            Some(known) => (known.on_chain, known.checked),
            None => (rpc.pending_nonce(address).await?, now),
        };
        // Unsure no longer once the node counted it (it was in its pool), or after the gap (lost).
        let unsure = guard.and_then(|k| k.unsure).filter(|&(n, at)| n >= on_chain && wall - at <= gap);
        let nonce = next_nonce(recorded, on_chain, wall, gap);
        // Ahead of the chain since then: kept while earlier handouts are not known taken.
        let since = match recorded {
            Some((next, at)) if next > on_chain && nonce >= next => at,
            _ => wall,
        };
        Ok(NonceLease { guard, nonce, on_chain, checked, since, used: false, unsure, row })
    }

    /// Asks the node for `address`'s pending count now, unless the chain checked what this
    /// instance knows less than half of [`ASK_EVERY`] ago or a lease is held, so that the next
    /// lease need not.
    ///
    /// # Errors
    /// [`ChainError`] when the node cannot be asked.
    pub async fn warm(&self, rpc: &EvmRpc, address: Address) -> Result<(), ChainError> {
        let Ok(mut guard) = self.lock(address).try_lock_owned() else { return Ok(()) };
        let now = tokio::time::Instant::now();
        if guard.is_some_and(|k| !k.aging(now)) {
            return Ok(());
        }
        let on_chain = rpc.pending_nonce(address).await?;
        *guard = Some(Known {
            next: guard.and_then(|k| k.next),
            on_chain,
            checked: now,
            unsure: guard.and_then(|k| k.unsure),
        });
        Ok(())
    }

    /// `address`'s transaction under `nonce` was mined: when it is the last nonce this instance
    /// handed out, what it knows is right, checked now. (Nothing when it knows nothing of the
    /// account, or a lease is being taken.)
    pub fn confirmed(&self, address: Address, nonce: u64) {
        let lock = self.accounts.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&address).cloned();
        let Some(Ok(mut known)) = lock.as_ref().map(|l| l.try_lock()) else { return };
        if let Some(k) = known.as_mut()
            && k.next.is_some_and(|(next, _)| next == nonce + 1)
        {
            k.on_chain = k.on_chain.max(nonce + 1);
            k.checked = tokio::time::Instant::now();
        }
    }

    fn lock(&self, address: Address) -> Arc<tokio::sync::Mutex<Option<Known>>> {
        let mut accounts = self.accounts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        accounts.entry(address).or_default().clone()
    }
}

/// Whether nonces recorded as handed out have been ahead of the chain's count (as last known) for
/// longer than `gap`.
fn lost_perhaps(
    recorded: Option<(u64, DateTime<Utc>)>,
    on_chain: u64,
    now: DateTime<Utc>,
    gap: chrono::Duration,
) -> bool {
    recorded.is_some_and(|(next, since)| next > on_chain && now - since > gap)
}

/// The nonce to use: the recorded one when the node has not caught up with it yet (a broadcast a
/// moment ago, or on another node), the node's count otherwise — and the node's count when the
/// recorded one is ahead for longer than `gap` (the transactions were lost).
fn next_nonce(recorded: Option<(u64, DateTime<Utc>)>, on_chain: u64, now: DateTime<Utc>, gap: chrono::Duration) -> u64 {
    match recorded {
        Some((next, _)) if lost_perhaps(recorded, on_chain, now, gap) => {
            tracing::warn!(
                recorded = next,
                on_chain,
                "recorded nonces never reached the chain: starting again from the chain's count"
            );
            on_chain
        }
        Some((next, _)) => next.max(on_chain),
        None => on_chain,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_known_is_trusted_for_a_while_after_the_chain_checked_it() {
        let t0 = tokio::time::Instant::now();
        let known = Known { next: Some((7, Utc::now())), on_chain: 5, checked: t0, unsure: None };
        assert!(known.recent(t0 + ASK_EVERY - std::time::Duration::from_millis(1)));
        assert!(!known.recent(t0 + ASK_EVERY), "asked again");
        assert!(!known.aging(t0 + ASK_EVERY / 2 - std::time::Duration::from_millis(1)));
        assert!(known.aging(t0 + ASK_EVERY / 2), "read ahead from half-way");
    }

    #[test]
    fn handouts_long_unknown_to_the_chain_are_asked_about() {
        let now = Utc::now();
        let since = |ago: i64| Some((7, now - chrono::Duration::seconds(ago)));
        let gap = GAP_AFTER;
        assert!(!lost_perhaps(since(1), 5, now, gap), "just sent: not mined yet");
        assert!(lost_perhaps(since(gap.num_seconds() + 1), 5, now, gap), "long unknown: the node is asked");
        assert!(!lost_perhaps(since(gap.num_seconds() + 1), 7, now, gap), "taken");
        assert!(!lost_perhaps(None, 5, now, gap));
        let short = chrono::Duration::seconds(2);
        assert!(lost_perhaps(since(3), 5, now, short), "a shorter gap configured");
        assert!(!lost_perhaps(since(2), 5, now, short));
    }

    #[tokio::test(start_paused = true)]
    async fn a_mined_transaction_checks_only_the_nonces_this_instance_handed_out() {
        let manager = NonceManager::default();
        let account = Address::repeat_byte(1);
        let t0 = tokio::time::Instant::now();
        manager.confirmed(account, 3);
        assert!(manager.accounts.lock().unwrap().is_empty(), "an account it knows nothing of is not added");
        *manager.lock(account).lock().await =
            Some(Known { next: Some((5, Utc::now())), on_chain: 2, checked: t0, unsure: None });
        tokio::time::advance(std::time::Duration::from_secs(20)).await;
        manager.confirmed(account, 5);
        let known = manager.lock(account).lock().await.unwrap();
        assert_eq!((known.on_chain, known.checked), (2, t0), "not handed out yet: nothing checked");
        manager.confirmed(account, 3);
        let known = manager.lock(account).lock().await.unwrap();
        assert_eq!((known.on_chain, known.checked), (2, t0), "not the last handed out: nothing checked");
        manager.confirmed(account, 4);
        let known = manager.lock(account).lock().await.unwrap();
        let t1 = t0 + std::time::Duration::from_secs(20);
        assert_eq!((known.on_chain, known.checked), (5, t1), "the last one mined: checked now");
        // Held by a lease: left alone (the lease writes what it knows when it ends).
        let held = manager.lock(account).lock_owned().await;
        tokio::time::advance(std::time::Duration::from_secs(20)).await;
        manager.confirmed(account, 4);
        drop(held);
        assert_eq!(manager.lock(account).lock().await.unwrap().checked, t1);
    }

    #[test]
    fn the_larger_count_wins_until_a_gap_is_old() {
        let t = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let gap = GAP_AFTER;
        assert_eq!(next_nonce(None, 4, t, gap), 4, "nothing recorded: the chain");
        assert_eq!(next_nonce(Some((7, t)), 4, t, gap), 7, "just recorded: the node has not seen them yet");
        assert_eq!(next_nonce(Some((3, t)), 4, t, gap), 4, "the chain moved on (another sender)");
        assert_eq!(next_nonce(Some((7, t)), 4, t + gap, gap), 7);
        assert_eq!(next_nonce(Some((7, t)), 4, t + gap + chrono::Duration::seconds(1), gap), 4, "a lost gap");
    }
}
