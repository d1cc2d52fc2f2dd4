//! API key material: generation, format check, hashing, constant-time comparison.
//!
//! A key is `tg_live_` or `tg_test_` followed by 32 bytes from the operating system's CSPRNG in
//! base58 (about 44 characters). It is shown once. Storage keeps its SHA-256 (a fast hash is
//! right here: the key has 256 bits of entropy, so there is nothing to brute-force) and finds the
//! row by the first 16 hex digits of that hash; the full hashes are then compared in constant time.

use std::fmt;

use rand::TryRngCore as _;
use rand::rngs::OsRng;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::config::Secret;

/// Which environment a key is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyEnv {
    /// `tg_live_`: real networks.
    Live,
    /// `tg_test_`: test networks and the embedded ledger.
    Test,
}

impl KeyEnv {
    /// The key prefix.
    #[must_use]
    pub const fn prefix(self) -> &'static str {
        match self {
            Self::Live => "tg_live_",
            Self::Test => "tg_test_",
        }
    }

    /// The stored name.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Live => "live",
            Self::Test => "test",
        }
    }
}

impl fmt::Display for KeyEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What is stored about a key, derived from its text.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyDigest {
    /// The SHA-256 of the key text.
    pub hash: [u8; 32],
}

impl fmt::Debug for KeyDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyDigest({})", self.lookup())
    }
}

impl KeyDigest {
    /// Hashes a key's text.
    #[must_use]
    pub fn of(key: &str) -> Self {
        Self { hash: Sha256::digest(key.as_bytes()).into() }
    }

    /// Hex of the whole hash (what is stored).
    #[must_use]
    pub fn hex(&self) -> String {
        hex(&self.hash)
    }

    /// The indexed prefix (first 8 bytes of the hash, in hex).
    #[must_use]
    pub fn lookup(&self) -> String {
        hex(&self.hash[..8])
    }

    /// Constant-time comparison with a stored hex hash.
    #[must_use]
    pub fn matches(&self, stored_hex: &str) -> bool {
        let presented = self.hex();
        presented.len() == stored_hex.len() && bool::from(presented.as_bytes().ct_eq(stored_hex.as_bytes()))
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// A freshly generated key: the secret to show once, and its digest to store.
#[derive(Debug)]
pub struct GeneratedKey {
    /// The whole key (shown once, never stored).
    pub secret: Secret,
    /// What is stored.
    pub digest: KeyDigest,
    /// Last four characters, to tell keys apart in listings.
    pub hint: String,
}

/// Why a key could not be generated.
#[derive(Debug, thiserror::Error)]
#[error("the operating system's random number generator failed: {0}")]
pub struct RandomnessError(String);

/// Generates a new key from the operating system's CSPRNG.
///
/// # Errors
/// [`RandomnessError`] if the OS cannot provide randomness.
pub fn generate(env: KeyEnv) -> Result<GeneratedKey, RandomnessError> {
    let mut bytes = [0u8; 32];
    OsRng.try_fill_bytes(&mut bytes).map_err(|e| RandomnessError(e.to_string()))?;
    let text = format!("{}{}", env.prefix(), bs58::encode(bytes).into_string());
    let hint = text[text.len() - 4..].to_owned();
    let digest = KeyDigest::of(&text);
    Ok(GeneratedKey { secret: Secret::new(text), digest, hint })
}

/// Whether a presented text has the shape of a key (checked before any storage lookup).
#[must_use]
pub fn looks_like_key(text: &str) -> bool {
    let body = text.strip_prefix(KeyEnv::Live.prefix()).or_else(|| text.strip_prefix(KeyEnv::Test.prefix()));
    body.is_some_and(|b| (32..=50).contains(&b.len()) && bs58::decode(b).into_vec().is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_have_the_prefix_and_are_distinct() {
        let a = generate(KeyEnv::Live).unwrap();
        let b = generate(KeyEnv::Test).unwrap();
        assert!(a.secret.expose().starts_with("tg_live_"));
        assert!(b.secret.expose().starts_with("tg_test_"));
        assert!(looks_like_key(a.secret.expose()) && looks_like_key(b.secret.expose()));
        assert_ne!(a.digest, generate(KeyEnv::Live).unwrap().digest);
        assert!(a.secret.expose().ends_with(&a.hint));
        assert!(!format!("{a:?}").contains(a.secret.expose()), "Debug must not show the key");
    }

    #[test]
    fn digest_matches_only_the_same_key() {
        let k = generate(KeyEnv::Live).unwrap();
        let stored = k.digest.hex();
        assert_eq!(stored.len(), 64);
        assert!(KeyDigest::of(k.secret.expose()).matches(&stored));
        let mut other = k.secret.expose().to_owned();
        other.push('x');
        assert!(!KeyDigest::of(&other).matches(&stored));
        assert!(!KeyDigest::of(k.secret.expose()).matches(&stored[..63]));
        assert_eq!(k.digest.lookup(), stored[..16]);
    }

    #[test]
    fn shape_check() {
        assert!(!looks_like_key(""));
        assert!(!looks_like_key("tg_live_"));
        assert!(!looks_like_key("sk_live_4eC39HqLyjWDarjtT1zdp7dc"));
        assert!(!looks_like_key("tg_live_0OIl0OIl0OIl0OIl0OIl0OIl0OIl0OIl0OIl"));
    }
}
