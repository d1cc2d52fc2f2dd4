//! [`WebhookStore`] in SQL, and the outbox rows written with each payment change.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::Row;
use sqlx::any::AnyRow;

use super::batch::Batch;
use super::{Backend, SqlStore, opt_millis};
use crate::clock::from_millis;
use crate::store::{
    DeliveryOutcome, DeliveryRecord, DueDelivery, StoreResult, StoredPayment, StoredWebhookEndpoint, WebhookEvent,
    WebhookStore,
};

/// Longest failure text kept per delivery.
const MAX_ERROR_CHARS: usize = 300;

impl SqlStore {
    /// Queues `stored`'s change for every webhook endpoint of the accounts that may see it, in
    /// `batch`: inside the transaction that made the change.
    pub(super) fn queue_webhooks(&self, batch: &mut Batch, stored: &StoredPayment) {
        let p = &stored.payment;
        let event = WebhookEvent::of(stored);
        let at = stored.updated_at.timestamp_millis();
        batch.push(
            "INSERT INTO webhook_deliveries (endpoint_id, account_id, event_id, event_type, body, state, attempts, \
             next_attempt_at, created_at) \
             SELECT id, account_id, ?, ?, ?, 'pending', 0, ?, ? FROM webhook_endpoints WHERE account_id IN (?, ?) \
             ON CONFLICT (endpoint_id, event_id) DO NOTHING",
            vec![
                event.id.into(),
                event.kind.into(),
                event.body.into(),
                at.into(),
                at.into(),
                p.owner_account.as_str().into(),
                p.counterparty_account.as_deref().unwrap_or(&p.owner_account).into(),
            ],
        );
    }
}

fn endpoint_from_row(row: &AnyRow) -> StoreResult<StoredWebhookEndpoint> {
    Ok(StoredWebhookEndpoint {
        id: row.try_get("id")?,
        account_id: row.try_get("account_id")?,
        url: row.try_get("url")?,
        description: row.try_get("description")?,
        sealed_secret: row.try_get("sealed_secret")?,
        created_at: from_millis(row.try_get("created_at")?),
    })
}

fn count(row: &AnyRow, column: &str) -> StoreResult<u32> {
    let n: i64 = row.try_get(column)?;
    Ok(u32::try_from(n).unwrap_or(u32::MAX))
}

fn status(row: &AnyRow) -> StoreResult<Option<u16>> {
    let n: Option<i64> = row.try_get("last_status")?;
    Ok(n.and_then(|n| u16::try_from(n).ok()))
}

const ENDPOINT_COLUMNS: &str = "id, account_id, url, description, sealed_secret, created_at";
const DELIVERY_COLUMNS: &str = "id, endpoint_id, event_id, event_type, state, attempts, next_attempt_at, last_status, \
    last_error, created_at, delivered_at";

#[async_trait]
impl WebhookStore for SqlStore {
    async fn insert_webhook_endpoint(&self, e: &StoredWebhookEndpoint, max_per_account: u32) -> StoreResult<bool> {
        let mut tx = self.pool.begin().await?;
        // PostgreSQL: registrations of one account take turns (the count below would otherwise
        // miss a concurrent insert); SQLite runs one writer at a time anyway.
        if self.backend == Backend::Postgres {
            sqlx::query("SELECT pg_advisory_xact_lock(hashtext('tollgate_webhook_endpoints:' || $1))")
                .bind(&e.account_id)
                .execute(&mut *tx)
                .await?;
        }
        let inserted = sqlx::query(&self.sql(&format!(
            "INSERT INTO webhook_endpoints ({ENDPOINT_COLUMNS}) SELECT ?, ?, ?, ?, ?, ? \
             WHERE (SELECT COUNT(*) FROM webhook_endpoints WHERE account_id = ?) < ?"
        )))
        .bind(&e.id)
        .bind(&e.account_id)
        .bind(&e.url)
        .bind(e.description.as_deref())
        .bind(&e.sealed_secret)
        .bind(e.created_at.timestamp_millis())
        .bind(&e.account_id)
        .bind(i64::from(max_per_account))
        .execute(&mut *tx)
        .await?
        .rows_affected();
        tx.commit().await?;
        Ok(inserted > 0)
    }

    async fn webhook_endpoints(&self, account_id: Option<&str>) -> StoreResult<Vec<StoredWebhookEndpoint>> {
        let rows = match account_id {
            Some(account) => {
                let sql = format!(
                    "SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoints WHERE account_id = ? ORDER BY created_at, id"
                );
                sqlx::query(&self.sql(&sql)).bind(account).fetch_all(&self.pool).await?
            }
            None => {
                let sql = format!("SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoints ORDER BY created_at, id");
                sqlx::query(&sql).fetch_all(&self.pool).await?
            }
        };
        rows.iter().map(endpoint_from_row).collect()
    }

    async fn webhook_endpoint(&self, id: &str) -> StoreResult<Option<StoredWebhookEndpoint>> {
        let sql = format!("SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoints WHERE id = ?");
        let row = sqlx::query(&self.sql(&sql)).bind(id).fetch_optional(&self.pool).await?;
        row.as_ref().map(endpoint_from_row).transpose()
    }

    async fn first_webhook_endpoint(&self) -> StoreResult<Option<StoredWebhookEndpoint>> {
        let sql = format!("SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoints ORDER BY created_at, id LIMIT 1");
        let row = sqlx::query(&sql).fetch_optional(&self.pool).await?;
        row.as_ref().map(endpoint_from_row).transpose()
    }

    async fn delete_webhook_endpoint(&self, account_id: &str, id: &str) -> StoreResult<bool> {
        let mut tx = self.pool.begin().await?;
        let deleted = sqlx::query(&self.sql("DELETE FROM webhook_endpoints WHERE id = ? AND account_id = ?"))
            .bind(id)
            .bind(account_id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if deleted > 0 {
            sqlx::query(&self.sql("DELETE FROM webhook_deliveries WHERE endpoint_id = ?"))
                .bind(id)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(deleted > 0)
    }

    async fn claim_webhook_deliveries(
        &self,
        now: DateTime<Utc>,
        limit: u32,
        claim_until: DateTime<Utc>,
        skip: &[String],
    ) -> StoreResult<Vec<DueDelivery>> {
        // PostgreSQL: rows another instance is claiming right now are skipped, not waited for.
        let skip_locked = if self.backend == Backend::Postgres { " FOR UPDATE SKIP LOCKED" } else { "" };
        let sql = format!(
            "UPDATE webhook_deliveries SET claimed_until = ? WHERE id IN (SELECT id FROM webhook_deliveries \
             WHERE state = 'pending' AND next_attempt_at <= ? AND (claimed_until IS NULL OR claimed_until <= ?){busy} \
             ORDER BY next_attempt_at, id LIMIT ?{skip_locked}) \
             RETURNING id, endpoint_id, event_id, body, attempts, created_at, next_attempt_at",
            busy = if skip.is_empty() {
                String::new()
            } else {
                format!(" AND endpoint_id NOT IN ({})", vec!["?"; skip.len()].join(", "))
            }
        );
        let sql = self.sql(&sql);
        let mut query = sqlx::query(&sql)
            .bind(claim_until.timestamp_millis())
            .bind(now.timestamp_millis())
            .bind(now.timestamp_millis());
        for endpoint in skip {
            query = query.bind(endpoint);
        }
        let rows = query.bind(i64::from(limit)).fetch_all(&self.pool).await?;
        let mut due = Vec::with_capacity(rows.len());
        for row in &rows {
            let next: i64 = row.try_get("next_attempt_at")?;
            due.push((
                next,
                DueDelivery {
                    id: row.try_get("id")?,
                    endpoint_id: row.try_get("endpoint_id")?,
                    event_id: row.try_get("event_id")?,
                    body: row.try_get("body")?,
                    attempts: count(row, "attempts")?,
                    created_at: from_millis(row.try_get("created_at")?),
                },
            ));
        }
        due.sort_by_key(|(next, d)| (*next, d.id));
        Ok(due.into_iter().map(|(_, d)| d).collect())
    }

    async fn release_webhook_claims(&self, ids: &[i64]) -> StoreResult<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let sql = format!(
            "UPDATE webhook_deliveries SET claimed_until = NULL WHERE id IN ({})",
            vec!["?"; ids.len()].join(", ")
        );
        let sql = self.sql(&sql);
        let mut query = sqlx::query(&sql);
        for id in ids {
            query = query.bind(id);
        }
        query.execute(&self.pool).await?;
        Ok(())
    }

    async fn record_webhook_attempt(&self, id: i64, at: DateTime<Utc>, outcome: &DeliveryOutcome) -> StoreResult<()> {
        let (state, status, error, next_at, delivered_at) = match outcome {
            DeliveryOutcome::Delivered { status } => ("delivered", Some(*status), None, None, Some(at)),
            DeliveryOutcome::Retry { status, error, next_at } => {
                ("pending", *status, Some(error), Some(*next_at), None)
            }
            DeliveryOutcome::Failed { status, error } => ("failed", *status, Some(error), None, None),
        };
        let error: Option<String> = error.map(|e| e.chars().take(MAX_ERROR_CHARS).collect());
        sqlx::query(&self.sql(
            "UPDATE webhook_deliveries SET state = ?, attempts = attempts + 1, last_status = ?, last_error = ?, \
             next_attempt_at = COALESCE(?, next_attempt_at), delivered_at = ?, claimed_until = NULL WHERE id = ?",
        ))
        .bind(state)
        .bind(status.map(i64::from))
        .bind(error)
        .bind(opt_millis(next_at))
        .bind(opt_millis(delivered_at))
        .bind(id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn webhook_deliveries(&self, endpoint_id: Option<&str>, limit: u32) -> StoreResult<Vec<DeliveryRecord>> {
        let rows = match endpoint_id {
            Some(endpoint) => {
                let sql = format!(
                    "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries WHERE endpoint_id = ? ORDER BY id DESC LIMIT ?"
                );
                sqlx::query(&self.sql(&sql)).bind(endpoint).bind(i64::from(limit)).fetch_all(&self.pool).await?
            }
            None => {
                let sql = format!("SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries ORDER BY id DESC LIMIT ?");
                sqlx::query(&self.sql(&sql)).bind(i64::from(limit)).fetch_all(&self.pool).await?
            }
        };
        rows.iter()
            .map(|row| {
                let state: String = row.try_get("state")?;
                let next: i64 = row.try_get("next_attempt_at")?;
                let delivered: Option<i64> = row.try_get("delivered_at")?;
                Ok(DeliveryRecord {
                    id: row.try_get("id")?,
                    endpoint_id: row.try_get("endpoint_id")?,
                    event_id: row.try_get("event_id")?,
                    event_type: row.try_get("event_type")?,
                    next_attempt_at: (state == "pending").then(|| from_millis(next)),
                    state,
                    attempts: count(row, "attempts")?,
                    last_status: status(row)?,
                    last_error: row.try_get("last_error")?,
                    created_at: from_millis(row.try_get("created_at")?),
                    delivered_at: delivered.map(from_millis),
                })
            })
            .collect()
    }

    async fn webhook_backlog(&self) -> StoreResult<u64> {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM webhook_deliveries WHERE state = 'pending'")
            .fetch_one(&self.pool)
            .await?;
        Ok(u64::try_from(n).unwrap_or(0))
    }
}
