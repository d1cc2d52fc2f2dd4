//! [`IdempotencyStore`] in SQL: one row per (API key, `Idempotency-Key`), `in_progress` until the
//! first request's answer is stored (`done`) or it is forgotten.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::Row;

use super::{SqlStore, corrupt};
use crate::clock::from_millis;
use crate::store::{IdempotencyBegin, IdempotencyStore, StoreResult, StoredResponse};

#[async_trait]
impl IdempotencyStore for SqlStore {
    async fn idempotency_begin(
        &self,
        key_id: &str,
        idem_key: &str,
        request_hash: &str,
        at: DateTime<Utc>,
        expire_before: DateTime<Utc>,
    ) -> StoreResult<IdempotencyBegin> {
        sqlx::query(&self.sql("DELETE FROM idempotency_keys WHERE key_id = ? AND idem_key = ? AND created_at < ?"))
            .bind(key_id)
            .bind(idem_key)
            .bind(expire_before.timestamp_millis())
            .execute(&self.pool)
            .await?;
        let inserted = sqlx::query(&self.sql(
            "INSERT INTO idempotency_keys (key_id, idem_key, request_hash, state, status, body, created_at) \
             VALUES (?, ?, ?, 'in_progress', NULL, NULL, ?) ON CONFLICT (key_id, idem_key) DO NOTHING",
        ))
        .bind(key_id)
        .bind(idem_key)
        .bind(request_hash)
        .bind(at.timestamp_millis())
        .execute(&self.pool)
        .await?;
        if inserted.rows_affected() == 1 {
            return Ok(IdempotencyBegin::Started);
        }
        let row = sqlx::query(&self.sql(
            "SELECT request_hash, state, status, body, created_at FROM idempotency_keys WHERE key_id = ? AND idem_key = ?",
        ))
        .bind(key_id)
        .bind(idem_key)
        .fetch_optional(&self.pool)
        .await?;
        // Vanished between the insert and the read (purged or abandoned): the other request is
        // finishing or gave up; the caller may retry.
        let Some(row) = row else {
            return Ok(IdempotencyBegin::InProgress { started: at });
        };
        let stored_hash: String = row.try_get("request_hash")?;
        if stored_hash != request_hash {
            return Ok(IdempotencyBegin::Mismatch);
        }
        let state: String = row.try_get("state")?;
        if state != "done" {
            return Ok(IdempotencyBegin::InProgress { started: from_millis(row.try_get("created_at")?) });
        }
        let status: Option<i64> = row.try_get("status")?;
        let body: Option<String> = row.try_get("body")?;
        let status =
            status.and_then(|s| u16::try_from(s).ok()).ok_or_else(|| corrupt("idempotent status", "missing"))?;
        Ok(IdempotencyBegin::Replay(StoredResponse { status, body: body.unwrap_or_default() }))
    }

    async fn idempotency_complete(&self, key_id: &str, idem_key: &str, response: &StoredResponse) -> StoreResult<()> {
        sqlx::query(
            &self.sql(
                "UPDATE idempotency_keys SET state = 'done', status = ?, body = ? WHERE key_id = ? AND idem_key = ?",
            ),
        )
        .bind(i64::from(response.status))
        .bind(&response.body)
        .bind(key_id)
        .bind(idem_key)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn idempotency_abandon(&self, key_id: &str, idem_key: &str) -> StoreResult<()> {
        sqlx::query(
            &self.sql("DELETE FROM idempotency_keys WHERE key_id = ? AND idem_key = ? AND state = 'in_progress'"),
        )
        .bind(key_id)
        .bind(idem_key)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn idempotency_purge(&self, before: DateTime<Utc>) -> StoreResult<u64> {
        let done = sqlx::query(&self.sql("DELETE FROM idempotency_keys WHERE created_at < ?"))
            .bind(before.timestamp_millis())
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }
}
