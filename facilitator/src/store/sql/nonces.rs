//! [`NonceStore`] in SQL: one row per sending account, held locked while a nonce is in use.
//!
//! PostgreSQL: `SELECT … FOR UPDATE` inside a transaction that lasts until the nonce's broadcast
//! is known (or the lock is dropped, which rolls back: nothing recorded). If the instance dies
//! meanwhile its connection closes and PostgreSQL releases the row. Held transactions use a pool
//! of their own ([`SqlStore::connect_with`]): the payment a lease is for is written through the
//! main pool while the lease is held, so the two never wait for each other's connections.
//!
//! Not on SQLite: a transaction held there would hold the file's one write lock, and the payment
//! it is leased for could not be written. One SQLite instance keeps its nonces in process
//! ([`crate::chains::evm::nonce::NonceManager`]).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{Any, Row, Transaction};
use tollgate_protocol::Network;

use super::{Backend, SqlStore};
use crate::clock::from_millis;
use crate::store::{NonceLock, NonceStore, StoreError, StoreResult};

/// Longest wait for another sender's hold on an account's nonce; then the send fails cleanly
/// (nothing signed, nothing recorded) rather than wait forever.
pub const LOCK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

struct SqlNonceLock {
    tx: tokio::sync::Mutex<Option<Transaction<'static, Any>>>,
    recorded: Option<(u64, DateTime<Utc>)>,
    update: String,
    network: String,
    address: String,
}

#[async_trait]
impl NonceStore for SqlStore {
    async fn lock_nonce(&self, network: &Network, address: &str) -> StoreResult<Box<dyn NonceLock>> {
        let Some(locks) = self.locks.as_ref().filter(|_| self.backend == Backend::Postgres) else {
            return Err(StoreError::Database("nonces are shared through PostgreSQL only".into()));
        };
        let network = network.to_string();
        // From the lock pool: the holder will need a connection of the main pool meanwhile.
        let mut tx = locks.begin().await?;
        // A holder that hangs (alive, but never finishing) must not stall every other sender.
        sqlx::query(&format!("SET LOCAL lock_timeout = '{}s'", LOCK_TIMEOUT.as_secs())).execute(&mut *tx).await?;
        sqlx::query(&self.sql(
            "INSERT INTO evm_nonces (network, address, next_nonce, updated_at) VALUES (?, ?, NULL, ?) \
             ON CONFLICT DO NOTHING",
        ))
        .bind(&network)
        .bind(address)
        .bind(Utc::now().timestamp_millis())
        .execute(&mut *tx)
        .await?;
        let select = "SELECT next_nonce, updated_at FROM evm_nonces WHERE network = ? AND address = ? FOR UPDATE";
        let row = sqlx::query(&self.sql(select)).bind(&network).bind(address).fetch_one(&mut *tx).await?;
        let next: Option<i64> = row.try_get("next_nonce")?;
        let at: i64 = row.try_get("updated_at")?;
        let recorded = next
            .map(|n| u64::try_from(n).map_err(|_| StoreError::Database(format!("negative nonce {n} in evm_nonces"))))
            .transpose()?
            .map(|n| (n, from_millis(at)));
        Ok(Box::new(SqlNonceLock {
            tx: tokio::sync::Mutex::new(Some(tx)),
            recorded,
            update: self
                .sql("UPDATE evm_nonces SET next_nonce = ?, updated_at = ? WHERE network = ? AND address = ?")
                .into_owned(),
            network,
            address: address.to_owned(),
        }))
    }
}

#[async_trait]
impl NonceLock for SqlNonceLock {
    fn recorded(&self) -> Option<(u64, DateTime<Utc>)> {
        self.recorded
    }

    async fn advance(self: Box<Self>, next: u64, at: DateTime<Utc>) -> StoreResult<()> {
        let Some(mut tx) = self.tx.into_inner() else { return Ok(()) };
        let next = i64::try_from(next).map_err(|_| StoreError::Database(format!("nonce {next} out of range")))?;
        sqlx::query(&self.update)
            .bind(next)
            .bind(at.timestamp_millis())
            .bind(&self.network)
            .bind(&self.address)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }
}
