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
//! node. That is also how it recovers after a restart: it keeps nothing on disk.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use alloy::primitives::Address;

use super::rpc::EvmRpc;
use crate::chains::{ChainError, Hold, Sent};

/// Per-address nonce locks.
#[derive(Debug, Default)]
pub struct NonceManager {
    accounts: Mutex<HashMap<Address, Arc<tokio::sync::Mutex<Option<u64>>>>>,
}

/// The right to use one nonce of one account; others wait until it is dropped.
#[derive(Debug)]
pub struct NonceLease {
    guard: tokio::sync::OwnedMutexGuard<Option<u64>>,
    nonce: u64,
    used: bool,
}

impl NonceLease {
    /// The nonce to sign with.
    #[must_use]
    pub const fn nonce(&self) -> u64 {
        self.nonce
    }

    /// The node took the transaction with this nonce: the next lease takes the next one.
    pub fn used(mut self) {
        self.used = true;
    }
}

impl Drop for NonceLease {
    fn drop(&mut self) {
        // Not known to be taken: forget, so the next lease asks the node again.
        *self.guard = if self.used { Some(self.nonce + 1) } else { None };
    }
}

impl Hold for NonceLease {
    fn release(self: Box<Self>, sent: Sent) {
        if sent == Sent::Accepted {
            self.used();
        }
    }
}

impl NonceManager {
    /// Waits for `address`'s lock and returns its next nonce.
    ///
    /// # Errors
    /// [`ChainError`] when the node cannot be asked.
    pub async fn lease(&self, rpc: &EvmRpc, address: Address) -> Result<NonceLease, ChainError> {
        let lock = {
            let mut accounts = self.accounts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            accounts.entry(address).or_default().clone()
        };
        let guard = lock.lock_owned().await;
        let on_chain = rpc.pending_nonce(address).await?;
        let nonce = guard.map_or(on_chain, |next| next.max(on_chain));
        Ok(NonceLease { guard, nonce, used: false })
    }
}
