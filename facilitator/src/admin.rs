//! Key management: what `tollgate-facilitator keys …` (and the dashboard) do.

use chrono::{DateTime, Utc};

use crate::auth::keys::{self, KeyEnv};
use crate::config::Secret;
use crate::plans::Plan;
use crate::store::{Store, StoredApiKey, StoredWallet};
use crate::wallets::MasterKey;
use tollgate_protocol::ChainFamily;

/// What to create.
#[derive(Debug, Clone)]
pub struct NewKey {
    /// Plan.
    pub plan: Plan,
    /// Own per-minute limit (enterprise keys); `None` uses the plan's.
    pub rpm: Option<u32>,
    /// Free text shown in listings.
    pub label: Option<String>,
    /// Add the key to this existing account (key rotation); `None` creates a new account.
    pub account: Option<String>,
    /// `tg_live_` or `tg_test_`.
    pub env: KeyEnv,
}

/// A created key: the secret (show it once) and what was stored.
#[derive(Debug)]
pub struct CreatedKey {
    /// The key itself.
    pub secret: Secret,
    /// Its stored record.
    pub record: StoredApiKey,
}

/// Why key management failed.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// Bad input.
    #[error("{0}")]
    Invalid(String),
    /// Storage or randomness failed.
    #[error("{0}")]
    Failed(String),
}

/// Creates a key (and its account unless one is given).
///
/// # Errors
/// [`AdminError::Invalid`] for an unknown account, a zero or out-of-place `rpm`, or a long
/// label; [`AdminError::Failed`] when storage or randomness fails.
pub async fn create_key(store: &dyn Store, new: NewKey, now: DateTime<Utc>) -> Result<CreatedKey, AdminError> {
    if new.rpm == Some(0) {
        return Err(AdminError::Invalid("--rpm must be at least 1".into()));
    }
    if new.rpm.is_some() && new.plan != Plan::Enterprise {
        return Err(AdminError::Invalid(
            "--rpm applies to enterprise keys; standard and premium use their plan's limit".into(),
        ));
    }
    if new.label.as_ref().is_some_and(|l| l.chars().count() > 100 || l.chars().any(char::is_control)) {
        return Err(AdminError::Invalid("--label must be at most 100 characters, without control characters".into()));
    }
    let failed = |e: crate::store::StoreError| AdminError::Failed(e.to_string());
    let account_id = match new.account {
        // Ids this service makes are letters, digits and `_`: anything else names no account.
        Some(id) if id.is_empty() || id.len() > 64 || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') => {
            return Err(AdminError::Invalid(format!("no account {}", id.escape_debug())));
        }
        Some(id) => {
            if !store.account_exists(&id).await.map_err(failed)? {
                return Err(AdminError::Invalid(format!("no account {id}")));
            }
            id
        }
        None => {
            let id = format!("acct_{}", ulid::Ulid::new());
            store.create_account(&id, now).await.map_err(failed)?;
            id
        }
    };
    let generated = keys::generate(new.env).map_err(|e| AdminError::Failed(e.to_string()))?;
    let record = StoredApiKey {
        id: format!("key_{}", ulid::Ulid::new()),
        account_id,
        env: new.env.as_str().to_owned(),
        lookup: generated.digest.lookup(),
        hash: generated.digest.hex(),
        hint: generated.hint,
        plan: new.plan,
        rpm: new.rpm,
        label: new.label,
        created_at: now,
        last_used_at: None,
    };
    store.insert_api_key(&record).await.map_err(failed)?;
    Ok(CreatedKey { secret: generated.secret, record })
}

/// Creates a custodial wallet for the account of key `key_id`; returns its address.
///
/// # Errors
/// [`AdminError::Invalid`] for an unknown key or an unsupported chain; [`AdminError::Failed`]
/// when storage, randomness or sealing fails.
pub async fn create_wallet(
    store: &dyn Store,
    master_key: &MasterKey,
    key_id: &str,
    family: ChainFamily,
    now: DateTime<Utc>,
) -> Result<String, AdminError> {
    let failed = |e: &dyn std::fmt::Display| AdminError::Failed(e.to_string());
    let keys = store.list_api_keys().await.map_err(|e| failed(&e))?;
    let key =
        keys.into_iter().find(|k| k.id == key_id).ok_or_else(|| AdminError::Invalid(format!("no key {key_id}")))?;
    let (address, secret) = match family {
        ChainFamily::Solana => {
            let keypair = solana_sdk::signature::Keypair::new();
            (solana_sdk::signer::Signer::pubkey(&keypair).to_string(), keypair.to_bytes().to_vec())
        }
        ChainFamily::Evm => {
            let signer = alloy::signers::local::PrivateKeySigner::random();
            (crate::chains::evm::protocol_address(signer.address()).to_string(), signer.to_bytes().to_vec())
        }
    };
    let sealed = master_key.seal(&address, &secret).map_err(|e| failed(&e))?;
    let wallet = StoredWallet {
        address: address.clone(),
        account_id: key.account_id,
        family,
        sealed_secret: sealed,
        created_at: now,
    };
    store.insert_wallet(&wallet).await.map_err(|e| failed(&e))?;
    Ok(address)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::AccountStore as _;
    use crate::store::suite::TestDb;

    #[tokio::test]
    async fn keys_are_stored_hashed_and_rotation_keeps_the_account() {
        let db = TestDb::sqlite().await;
        let now = DateTime::from_timestamp(1_790_000_000, 0).unwrap();
        let first = create_key(
            &*db.store,
            NewKey { plan: Plan::Standard, rpm: None, label: Some("app".into()), account: None, env: KeyEnv::Live },
            now,
        )
        .await
        .unwrap();
        assert!(first.secret.expose().starts_with("tg_live_"));
        let stored = db.store.list_api_keys().await.unwrap();
        assert_eq!(stored.len(), 1);
        assert!(
            !stored[0].hash.contains(first.secret.expose()) && stored[0].hash.len() == 64,
            "only the hash is stored"
        );
        let rotated = create_key(
            &*db.store,
            NewKey {
                plan: Plan::Standard,
                rpm: None,
                label: None,
                account: Some(first.record.account_id.clone()),
                env: KeyEnv::Test,
            },
            now,
        )
        .await
        .unwrap();
        assert_eq!(rotated.record.account_id, first.record.account_id);
        assert!(rotated.secret.expose().starts_with("tg_test_"));
        let bad = |k: NewKey| {
            let store = db.store.clone();
            async move { create_key(&*store, k, now).await.unwrap_err() }
        };
        assert!(matches!(
            bad(NewKey {
                plan: Plan::Standard,
                rpm: None,
                label: None,
                account: Some("acct_nope".into()),
                env: KeyEnv::Live
            })
            .await,
            AdminError::Invalid(_)
        ));
        assert!(matches!(
            bad(NewKey { plan: Plan::Standard, rpm: Some(5), label: None, account: None, env: KeyEnv::Live }).await,
            AdminError::Invalid(_)
        ));
        assert!(matches!(
            bad(NewKey { plan: Plan::Enterprise, rpm: Some(0), label: None, account: None, env: KeyEnv::Live }).await,
            AdminError::Invalid(_)
        ));
        db.cleanup().await;
    }
}
