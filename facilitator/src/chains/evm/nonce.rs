//! One sender's nonces, handed out one at a time.
//!
//! Two payments from one account must not take the same nonce, and a nonce must not be skipped
//! (a gap stalls every later transaction). A [`NonceManager`] keeps a lock per address: a payment
//! holds its [`NonceLease`] from reading the nonce until its transaction's broadcast is known to
//! have reached the node, and each lease starts from the larger of the node's pending count and
//! the last nonce handed out. Any other end — not broadcast, refused, or an answer lost on the way
//! — forgets what it knew, so the next lease starts again from the node's pending count: a
//! transaction that never reached the node leaves no gap (its nonce is reused, and the payment
//! that held it is expired once the chain shows the nonce taken), one that did is counted by the
//! node.
//!
//! **One instance** keeps the last nonce in process (and nothing on disk: after a restart it asks
//! the node). **Several instances** on one PostgreSQL share it through the database
//! ([`NonceManager::shared`]): a lease also holds the account's row locked
//! ([`crate::store::NonceStore`]), so instances take turns, and the next nonce is recorded there
//! when a broadcast is accepted. A recorded nonce the node still has not counted after
//! [`GAP_AFTER`] means those transactions were lost (a node restarted, or the load balancer sent
//! them to a node that dropped them): the lease recovers from the chain's count instead of
//! leaving a gap forever.

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
/// believed instead (its transactions were lost).
pub const GAP_AFTER: chrono::Duration = chrono::Duration::seconds(30);

/// Per-address nonce locks, optionally shared with other instances through the database.
#[derive(Default)]
pub struct NonceManager {
    accounts: Mutex<HashMap<Address, Arc<tokio::sync::Mutex<Option<u64>>>>>,
    shared: Option<(Arc<dyn NonceStore>, Network)>,
}

impl std::fmt::Debug for NonceManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NonceManager").field("shared", &self.shared.is_some()).finish_non_exhaustive()
    }
}

/// The right to use one nonce of one account; others wait until it is dropped.
pub struct NonceLease {
    guard: tokio::sync::OwnedMutexGuard<Option<u64>>,
    nonce: u64,
    used: bool,
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
            && let Err(e) = row.advance(self.nonce + 1, Utc::now()).await
        {
            // Nothing recorded: the next lease reads the node's count, which includes this one.
            tracing::warn!(error = %e, nonce = self.nonce, "could not record the next nonce");
        }
    }
}

impl Drop for NonceLease {
    fn drop(&mut self) {
        // Not known to be taken: forget, so the next lease asks the node again. (A database row
        // dropped unadvanced rolls back: nothing recorded.)
        *self.guard = if self.used { Some(self.nonce + 1) } else { None };
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
        Self { accounts: Mutex::default(), shared: Some((store, network)) }
    }

    /// Waits for `address`'s lock and returns its next nonce.
    ///
    /// # Errors
    /// [`ChainError`] when the node or the shared store cannot be asked.
    pub async fn lease(&self, rpc: &EvmRpc, address: Address) -> Result<NonceLease, ChainError> {
        let lock = {
            let mut accounts = self.accounts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            accounts.entry(address).or_default().clone()
        };
        // In process first: one database connection per account at most waits for the row.
        let guard = lock.lock_owned().await;
        let Some((store, network)) = &self.shared else {
            let on_chain = rpc.pending_nonce(address).await?;
            let nonce = guard.map_or(on_chain, |next| next.max(on_chain));
            return Ok(NonceLease { guard, nonce, used: false, row: None });
        };
        let row = store.lock_nonce(network, &format!("{address:#x}")).await.map_err(|e| {
            // The detail (a database error) is for the operator, not the caller.
            tracing::warn!(error = %e, %address, "cannot lease a nonce");
            ChainError(format!(
                "could not take the next nonce of {address:#x} in time (this instance is sending from many \
                 accounts at once, or another send from this account is stuck); nothing was sent: try again shortly"
            ))
        })?;
        let on_chain = rpc.pending_nonce(address).await?;
        let nonce = next_nonce(row.recorded(), on_chain, Utc::now());
        Ok(NonceLease { guard, nonce, used: false, row: Some(row) })
    }
}

/// The nonce to use: the recorded one when the node has not caught up with it yet (a broadcast a
/// moment ago, or on another node), the node's count otherwise — and the node's count when the
/// recorded one is ahead for longer than [`GAP_AFTER`] (the transactions were lost).
fn next_nonce(recorded: Option<(u64, DateTime<Utc>)>, on_chain: u64, now: DateTime<Utc>) -> u64 {
    match recorded {
        Some((next, at)) if next > on_chain && now - at > GAP_AFTER => {
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
    fn the_larger_count_wins_until_a_gap_is_old() {
        let t = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        assert_eq!(next_nonce(None, 4, t), 4, "nothing recorded: the chain");
        assert_eq!(next_nonce(Some((7, t)), 4, t), 7, "just recorded: the node has not seen them yet");
        assert_eq!(next_nonce(Some((3, t)), 4, t), 4, "the chain moved on (another sender)");
        assert_eq!(next_nonce(Some((7, t)), 4, t + GAP_AFTER), 7);
        assert_eq!(next_nonce(Some((7, t)), 4, t + GAP_AFTER + chrono::Duration::seconds(1)), 4, "a lost gap");
    }
}
