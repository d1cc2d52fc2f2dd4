//! Custodial wallets for hosted mode: secret keys encrypted at rest.
//!
//! Each secret key is sealed with XChaCha20-Poly1305 under the 32-byte master key
//! (`TOLLGATE_MASTER_KEY`), with a fresh random 24-byte nonce, and the wallet's address as
//! associated data: a sealed key copied onto another wallet's row does not open. An opened key is
//! kept only as long as a signature takes and never reaches a log.
//!
//! With the embedded development ledger and no master key configured, the daemon generates one
//! into a file with 0600 permissions beside its database ([`MasterKey::load_or_create_dev`]) and
//! says so; anywhere else a missing master key disables custodial wallets.

use std::fmt;
use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use rand::TryRngCore as _;
use rand::rngs::OsRng;

use crate::config::Config;

/// Why a key could not be loaded, sealed or opened.
#[derive(Debug, thiserror::Error)]
pub enum KeystoreError {
    /// The master key text is not 32 bytes of base64 or hex.
    #[error("TOLLGATE_MASTER_KEY must be 32 bytes, as 64 hex digits or base64")]
    BadMasterKey,
    /// The sealed data is damaged, or was sealed under another key or for another wallet.
    #[error("cannot decrypt the wallet key: wrong master key, or the record was altered")]
    Open,
    /// Randomness or file access failed.
    #[error("{0}")]
    Io(String),
}

/// The key that seals custodial secret keys.
#[derive(Clone)]
pub struct MasterKey([u8; 32]);

impl fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MasterKey([REDACTED])")
    }
}

impl MasterKey {
    /// Parses 64 hex digits or base64 of 32 bytes.
    ///
    /// # Errors
    /// [`KeystoreError::BadMasterKey`].
    pub fn parse(text: &str) -> Result<Self, KeystoreError> {
        let text = text.trim();
        let bytes = if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
            (0..32)
                .map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16))
                .collect::<Result<Vec<u8>, _>>()
                .map_err(|_| KeystoreError::BadMasterKey)?
        } else {
            STANDARD.decode(text).map_err(|_| KeystoreError::BadMasterKey)?
        };
        bytes.try_into().map(Self).map_err(|_| KeystoreError::BadMasterKey)
    }

    /// A new random key.
    ///
    /// # Errors
    /// When the operating system's random number generator fails.
    pub fn generate() -> Result<Self, KeystoreError> {
        let mut key = [0u8; 32];
        OsRng.try_fill_bytes(&mut key).map_err(|e| KeystoreError::Io(e.to_string()))?;
        Ok(Self(key))
    }

    /// Development mode: reads the key from `path`, or creates it there (mode 0600).
    /// Returns the key and whether it was just created.
    ///
    /// # Errors
    /// When the file cannot be read or written, or holds something else than a key.
    pub fn load_or_create_dev(path: &Path) -> Result<(Self, bool), KeystoreError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Ok((Self::parse(&text)?, false)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let key = Self::generate()?;
                write_private(path, STANDARD.encode(key.0).as_bytes())
                    .map_err(|e| KeystoreError::Io(format!("cannot write {}: {e}", path.display())))?;
                Ok((key, true))
            }
            Err(e) => Err(KeystoreError::Io(format!("cannot read {}: {e}", path.display()))),
        }
    }

    /// Seals `secret` for the wallet `address`: base64 of nonce ‖ ciphertext.
    ///
    /// # Errors
    /// When randomness fails.
    pub fn seal(&self, address: &str, secret: &[u8]) -> Result<String, KeystoreError> {
        let mut nonce = [0u8; 24];
        OsRng.try_fill_bytes(&mut nonce).map_err(|e| KeystoreError::Io(e.to_string()))?;
        let cipher = XChaCha20Poly1305::new((&self.0).into());
        let sealed = cipher
            .encrypt(XNonce::from_slice(&nonce), Payload { msg: secret, aad: address.as_bytes() })
            .map_err(|_| KeystoreError::Open)?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        Ok(STANDARD.encode(out))
    }

    /// Opens what [`Self::seal`] produced for the same `address`.
    ///
    /// # Errors
    /// [`KeystoreError::Open`] for a wrong key, another address, or altered data.
    pub fn open(&self, address: &str, sealed: &str) -> Result<Vec<u8>, KeystoreError> {
        let bytes = STANDARD.decode(sealed).map_err(|_| KeystoreError::Open)?;
        if bytes.len() < 24 + 16 {
            return Err(KeystoreError::Open);
        }
        let (nonce, ciphertext) = bytes.split_at(24);
        let cipher = XChaCha20Poly1305::new((&self.0).into());
        cipher
            .decrypt(XNonce::from_slice(nonce), Payload { msg: ciphertext, aad: address.as_bytes() })
            .map_err(|_| KeystoreError::Open)
    }
}

/// The master key in force: `TOLLGATE_MASTER_KEY`, or in development mode (`--dev`) a
/// key kept in [`Config::dev_master_key_path`], created on first use. `None` disables custodial
/// wallets.
///
/// # Errors
/// An unreadable or malformed key.
pub fn resolve_master_key(config: &Config) -> Result<Option<MasterKey>, KeystoreError> {
    if let Some(text) = &config.master_key {
        return MasterKey::parse(text.expose()).map(Some);
    }
    if !config.dev {
        return Ok(None);
    }
    let path = config.dev_master_key_path();
    let (key, created) = MasterKey::load_or_create_dev(&path)?;
    if created {
        tracing::warn!(path = %path.display(), "development mode: generated a master key for custodial wallets (file mode 0600); set TOLLGATE_MASTER_KEY in production");
    }
    Ok(Some(key))
}

/// Reads a Solana keypair file as the Solana CLI writes it: a JSON array of the 64 secret-key bytes.
///
/// # Errors
/// When the file cannot be read or is not a keypair; the message never includes its content.
pub fn read_solana_keypair(path: &Path) -> anyhow::Result<solana_sdk::signature::Keypair> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read the Solana keypair file {}: {e}", path.display()))?;
    let bytes: Vec<u8> = serde_json::from_str(&text)
        .map_err(|_| anyhow::anyhow!("{} is not a Solana keypair file (a JSON array of 64 bytes)", path.display()))?;
    solana_sdk::signature::Keypair::try_from(bytes.as_slice())
        .map_err(|_| anyhow::anyhow!("{} does not hold a valid Solana keypair", path.display()))
}

#[cfg(unix)]
fn write_private(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    f.write_all(contents)?;
    f.sync_all()
}

#[cfg(not(unix))]
fn write_private(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    std::fs::write(path, contents)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_and_open_are_bound_to_key_and_address() {
        let key = MasterKey::generate().unwrap();
        let sealed = key.seal("walletA", b"secret bytes").unwrap();
        assert!(!sealed.contains("secret"));
        assert_eq!(key.open("walletA", &sealed).unwrap(), b"secret bytes");
        assert!(matches!(key.open("walletB", &sealed), Err(KeystoreError::Open)), "another wallet's row");
        assert!(
            matches!(MasterKey::generate().unwrap().open("walletA", &sealed), Err(KeystoreError::Open)),
            "another master key"
        );
        let mut tampered = STANDARD.decode(&sealed).unwrap();
        *tampered.last_mut().unwrap() ^= 1;
        assert!(matches!(key.open("walletA", &STANDARD.encode(tampered)), Err(KeystoreError::Open)));
        assert_ne!(key.seal("walletA", b"x").unwrap(), key.seal("walletA", b"x").unwrap(), "fresh nonces");
        assert_eq!(format!("{key:?}"), "MasterKey([REDACTED])");
    }

    #[test]
    fn solana_keypair_files() {
        use solana_sdk::signer::Signer as _;
        let dir = tempfile::tempdir().unwrap();
        let keypair = solana_sdk::signature::Keypair::new();
        let path = dir.path().join("fee-payer.json");
        std::fs::write(&path, serde_json::to_string(&keypair.to_bytes().to_vec()).unwrap()).unwrap();
        assert_eq!(read_solana_keypair(&path).unwrap().pubkey(), keypair.pubkey());
        std::fs::write(&path, "[1, 2, 3]").unwrap();
        let err = read_solana_keypair(&path).unwrap_err().to_string();
        assert!(err.contains("valid Solana keypair") && !err.contains("[1, 2, 3]"), "{err}");
        assert!(read_solana_keypair(&dir.path().join("missing.json")).is_err());
    }

    #[test]
    fn master_key_formats_and_dev_file() {
        let hex = "00".repeat(31) + "ff";
        assert!(MasterKey::parse(&hex).is_ok());
        assert!(MasterKey::parse(&STANDARD.encode([7u8; 32])).is_ok());
        assert!(MasterKey::parse("short").is_err());
        assert!(MasterKey::parse(&STANDARD.encode([7u8; 31])).is_err());

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("master.key");
        let (created, fresh) = MasterKey::load_or_create_dev(&path).unwrap();
        assert!(fresh);
        let (loaded, fresh_again) = MasterKey::load_or_create_dev(&path).unwrap();
        assert!(!fresh_again);
        assert_eq!(created.0, loaded.0);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        }
    }
}
