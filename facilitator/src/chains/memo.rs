//! What a chain backend remembers between requests, so that a verify asks the chain only what
//! can change from one payment to the next.
//!
//! - Facts ([`Facts`]): what a deployed token or mint does not change — decimals, its program,
//!   its EIP-712 name and version. Kept for [`FACTS_TTL`] all the same (an EVM proxy can be
//!   upgraded), for at most [`FACTS_CAPACITY`] tokens.
//! - Passed checks ([`Passed`]): the exact settlement (its digest, over everything the chain
//!   checked) that a verify found to pass, for [`PASSED_TTL`]. A settlement of the same proof
//!   right after that verify takes it instead of asking the chain again, once; a verify itself
//!   always asks the chain.

use std::time::Duration;

use moka::sync::Cache;

/// How long token facts are kept.
pub const FACTS_TTL: Duration = Duration::from_secs(600);
/// Most tokens whose facts are kept.
pub const FACTS_CAPACITY: u64 = 10_000;
/// How long a passed check stands in for a new one at settlement.
pub const PASSED_TTL: Duration = Duration::from_secs(15);
/// Most passed checks kept.
pub const PASSED_CAPACITY: u64 = 100_000;

/// Token facts by token (cheap to clone: shared).
#[derive(Clone)]
pub struct Facts<K, V>(Cache<K, V>);

impl<K, V> Default for Facts<K, V>
where
    K: std::hash::Hash + Eq + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    fn default() -> Self {
        Self(Cache::builder().max_capacity(FACTS_CAPACITY).time_to_live(FACTS_TTL).build())
    }
}

impl<K, V> std::fmt::Debug for Facts<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Facts").field(&self.0.entry_count()).finish()
    }
}

impl<K, V> Facts<K, V>
where
    K: std::hash::Hash + Eq + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// What is known of `token`.
    #[must_use]
    pub fn get(&self, token: &K) -> Option<V> {
        self.0.get(token)
    }

    /// Remembers what was read of `token`.
    pub fn insert(&self, token: K, facts: V) {
        self.0.insert(token, facts);
    }
}

/// Settlements a verify found to pass, by digest (cheap to clone: shared).
#[derive(Clone)]
pub struct Passed(Cache<[u8; 32], ()>);

impl Default for Passed {
    fn default() -> Self {
        Self(Cache::builder().max_capacity(PASSED_CAPACITY).time_to_live(PASSED_TTL).build())
    }
}

impl std::fmt::Debug for Passed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Passed").field(&self.0.entry_count()).finish()
    }
}

impl Passed {
    /// Remembers that the settlement with this digest passed.
    pub fn remember(&self, digest: [u8; 32]) {
        self.0.insert(digest, ());
    }

    /// Whether it passed within [`PASSED_TTL`]; forgets it either way (it stands in for one
    /// settlement, not several).
    #[must_use]
    pub fn take(&self, digest: &[u8; 32]) -> bool {
        self.0.remove(digest).is_some()
    }
}

/// SHA-256 over `parts`, each prefixed by its length (so no two lists of parts share a digest).
#[must_use]
pub fn digest(parts: &[&[u8]]) -> [u8; 32] {
    use sha2::Digest as _;
    let mut hasher = sha2::Sha256::new();
    for part in parts {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part);
    }
    hasher.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_passed_check_stands_in_once_and_only_for_itself() {
        let passed = Passed::default();
        let key = digest(&[b"chain", b"sender", b"call"]);
        passed.remember(key);
        assert!(!passed.take(&digest(&[b"chain", b"sender", b"calm"])), "another call");
        assert!(!passed.take(&digest(&[b"chain", b"senderc", b"all"])), "parts are delimited");
        assert!(passed.take(&key));
        assert!(!passed.take(&key), "used once");
    }
}
