//! [`AccountStore`] in SQL: accounts, API keys (hashes only) and custodial wallets (sealed keys).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::Row;
use tollgate_protocol::ChainFamily;

use super::{KEY_COLUMNS, SqlStore, corrupt, key_from_row, opt_millis, to_i64};
use crate::clock::from_millis;
use crate::store::{AccountStore, StoreResult, StoredApiKey, StoredWallet};

#[async_trait]
impl AccountStore for SqlStore {
    async fn create_account(&self, id: &str, at: DateTime<Utc>) -> StoreResult<()> {
        sqlx::query(&self.sql("INSERT INTO accounts (id, created_at) VALUES (?, ?)"))
            .bind(id)
            .bind(at.timestamp_millis())
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn account_exists(&self, id: &str) -> StoreResult<bool> {
        let row =
            sqlx::query(&self.sql("SELECT id FROM accounts WHERE id = ?")).bind(id).fetch_optional(&self.pool).await?;
        Ok(row.is_some())
    }

    async fn insert_api_key(&self, key: &StoredApiKey) -> StoreResult<()> {
        let sql = format!("INSERT INTO api_keys ({KEY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
        sqlx::query(&self.sql(&sql))
            .bind(&key.id)
            .bind(&key.account_id)
            .bind(&key.env)
            .bind(&key.lookup)
            .bind(&key.hash)
            .bind(&key.hint)
            .bind(key.plan.as_str())
            .bind(key.rpm.map(i64::from))
            .bind(key.label.as_deref())
            .bind(key.created_at.timestamp_millis())
            .bind(opt_millis(key.last_used_at))
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn find_api_key(&self, lookup: &str) -> StoreResult<Option<StoredApiKey>> {
        let sql = format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE lookup = ?");
        let row = sqlx::query(&self.sql(&sql)).bind(lookup).fetch_optional(&self.pool).await?;
        row.as_ref().map(key_from_row).transpose()
    }

    async fn list_api_keys(&self) -> StoreResult<Vec<StoredApiKey>> {
        let sql = format!("SELECT {KEY_COLUMNS} FROM api_keys ORDER BY created_at, id");
        let rows = sqlx::query(&sql).fetch_all(&self.pool).await?;
        rows.iter().map(key_from_row).collect()
    }

    async fn delete_api_key(&self, id: &str) -> StoreResult<bool> {
        let done = sqlx::query(&self.sql("DELETE FROM api_keys WHERE id = ?")).bind(id).execute(&self.pool).await?;
        Ok(done.rows_affected() == 1)
    }

    async fn touch_api_key(&self, id: &str, at: DateTime<Utc>) -> StoreResult<()> {
        sqlx::query(&self.sql("UPDATE api_keys SET last_used_at = ? WHERE id = ?"))
            .bind(at.timestamp_millis())
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn insert_wallet(&self, w: &StoredWallet) -> StoreResult<()> {
        sqlx::query(&self.sql(
            "INSERT INTO wallets (address, account_id, family, sealed_secret, created_at) VALUES (?, ?, ?, ?, ?)",
        ))
        .bind(&w.address)
        .bind(&w.account_id)
        .bind(w.family.namespace())
        .bind(&w.sealed_secret)
        .bind(w.created_at.timestamp_millis())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn count_wallets(&self) -> StoreResult<u64> {
        let n: i64 = sqlx::query_scalar(&self.sql("SELECT COUNT(*) FROM wallets")).fetch_one(&self.pool).await?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    async fn first_wallet(&self) -> StoreResult<Option<StoredWallet>> {
        let first: Option<String> =
            sqlx::query_scalar("SELECT address FROM wallets ORDER BY created_at, address LIMIT 1")
                .fetch_optional(&self.pool)
                .await?;
        match first {
            Some(address) => self.get_wallet(&address).await,
            None => Ok(None),
        }
    }

    async fn get_wallet(&self, address: &str) -> StoreResult<Option<StoredWallet>> {
        let row = sqlx::query(
            &self.sql("SELECT address, account_id, family, sealed_secret, created_at FROM wallets WHERE address = ?"),
        )
        .bind(address)
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let family: String = row.try_get("family")?;
        Ok(Some(StoredWallet {
            address: row.try_get("address")?,
            account_id: row.try_get("account_id")?,
            family: match family.as_str() {
                "solana" => ChainFamily::Solana,
                "eip155" => ChainFamily::Evm,
                other => return Err(corrupt("wallet family", other)),
            },
            sealed_secret: row.try_get("sealed_secret")?,
            created_at: from_millis(row.try_get("created_at")?),
        }))
    }

    async fn wallet_account(&self, address: &str) -> StoreResult<Option<String>> {
        if let Some(account) = self.direct.as_ref().and_then(|direct| direct.wallet_account(address)) {
            return Ok(account);
        }
        Ok(self.get_wallet(address).await?.map(|w| w.account_id))
    }

    async fn reserve_sponsorship(
        &self,
        account: &str,
        family: ChainFamily,
        day: i64,
        amount: u64,
        budget: u64,
    ) -> StoreResult<Option<u64>> {
        let (amount, budget) = (to_i64(amount, "sponsorship amount")?, to_i64(budget, "sponsorship budget")?);
        // The first settlement of the day inserts (if it fits); later ones add, if the sum fits.
        let sql = self.sql(
            "INSERT INTO sponsorship (account_id, family, day, spent, largest) SELECT ?, ?, ?, ?, ? WHERE ? <= ? \
             ON CONFLICT (account_id, family, day) DO UPDATE SET spent = sponsorship.spent + excluded.spent, \
             largest = CASE WHEN excluded.largest > sponsorship.largest THEN excluded.largest \
             ELSE sponsorship.largest END \
             WHERE sponsorship.spent + excluded.spent <= ? RETURNING spent",
        );
        // Through the connection a payment's writes take (SQLite: a settlement's first write).
        let mut writer = self.writer().await?;
        let conn = writer.conn();
        let row = sqlx::query(&sql)
            .bind(account)
            .bind(family.namespace())
            .bind(day)
            .bind(amount)
            .bind(amount)
            .bind(amount)
            .bind(budget)
            .bind(budget)
            .fetch_optional(&mut *conn)
            .await
            .map_err(Into::into);
        let row = writer.done(row).await?;
        row.map(|r| r.try_get::<i64, _>("spent").map(|spent| u64::try_from(spent).unwrap_or_default()))
            .transpose()
            .map_err(Into::into)
    }

    async fn release_sponsorship(&self, account: &str, family: ChainFamily, day: i64, amount: u64) -> StoreResult<()> {
        let amount = to_i64(amount, "sponsorship amount")?;
        let sql = self.sql(
            "UPDATE sponsorship SET spent = CASE WHEN spent > ? THEN spent - ? ELSE 0 END \
             WHERE account_id = ? AND family = ? AND day = ?",
        );
        sqlx::query(&sql)
            .bind(amount)
            .bind(amount)
            .bind(account)
            .bind(family.namespace())
            .bind(day)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn sponsorship_spent(&self, account: &str, family: ChainFamily, day: i64) -> StoreResult<(u64, u64)> {
        let direct = self.direct.as_ref().and_then(|direct| direct.spent(account, family.namespace(), day));
        if let Some((spent, largest)) = direct {
            return Ok((u64::try_from(spent).unwrap_or_default(), u64::try_from(largest).unwrap_or_default()));
        }
        let sql = self.sql("SELECT spent, largest FROM sponsorship WHERE account_id = ? AND family = ? AND day = ?");
        let row = sqlx::query(&sql).bind(account).bind(family.namespace()).bind(day).fetch_optional(&self.pool).await?;
        let Some(row) = row else { return Ok((0, 0)) };
        let (spent, largest): (i64, i64) = (row.try_get("spent")?, row.try_get("largest")?);
        Ok((u64::try_from(spent).unwrap_or_default(), u64::try_from(largest).unwrap_or_default()))
    }

    async fn dashboard_epoch(&self) -> StoreResult<i64> {
        let row = sqlx::query("SELECT epoch FROM dashboard_sessions WHERE id = 1").fetch_optional(&self.pool).await?;
        Ok(row.map(|r| r.try_get("epoch")).transpose()?.unwrap_or(0))
    }

    async fn end_dashboard_sessions(&self) -> StoreResult<i64> {
        let row = sqlx::query("UPDATE dashboard_sessions SET epoch = epoch + 1 WHERE id = 1 RETURNING epoch")
            .fetch_one(&self.pool)
            .await?;
        Ok(row.try_get("epoch")?)
    }
}
