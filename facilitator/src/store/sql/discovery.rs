//! [`CatalogStore`] in SQL: `discovery_resources` (one row per seller account, URL and tool) and
//! `discovery_accepts` (the ways each was settled in).
//!
//! An entry is refreshed by an upsert on its unique key, so two settlements of one resource at
//! once, on one instance or two, leave one row; its ways to pay are upserted on theirs, then
//! trimmed to the newest [`MAX_ACCEPTS`]. Lists page on `last_settled_at`; search words are
//! matched with `LIKE` on a lower-case text column (escaped: a `%` searched is a `%`).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::Row;
use sqlx::any::AnyRow;
use tollgate_protocol::x402::bazaar::ServiceMetadata;

use super::{SqlStore, to_i64};
use crate::store::{
    CatalogEntry, CatalogFilter as Filter, CatalogStore, MAX_ACCEPTS, NewCatalogEntry as NewEntry, StoreError,
    StoreResult,
};

const COLUMNS: &str = "id, account_id, url, tool_name, kind, x402_version, description, mime_type, service_name, \
                       tags, icon_url, extensions, hidden, created_at, last_settled_at";

fn json_column<T: serde::de::DeserializeOwned>(row: &AnyRow, column: &str) -> StoreResult<T> {
    let text: String = row.try_get(column)?;
    serde_json::from_str(&text).map_err(|e| StoreError::Database(format!("discovery_resources.{column}: {e}")))
}

fn millis(row: &AnyRow, column: &str) -> StoreResult<DateTime<Utc>> {
    let ms: i64 = row.try_get(column)?;
    DateTime::from_timestamp_millis(ms).ok_or_else(|| StoreError::Database(format!("discovery {column} holds {ms}")))
}

fn entry_from_row(row: &AnyRow) -> StoreResult<CatalogEntry> {
    let version: i64 = row.try_get("x402_version")?;
    let hidden: i64 = row.try_get("hidden")?;
    Ok(CatalogEntry {
        id: row.try_get("id")?,
        account_id: row.try_get("account_id")?,
        url: row.try_get("url")?,
        tool_name: row.try_get("tool_name")?,
        kind: row.try_get("kind")?,
        x402_version: u8::try_from(version).map_err(|_| StoreError::Database(format!("x402_version {version}")))?,
        description: row.try_get("description")?,
        mime_type: row.try_get("mime_type")?,
        service: ServiceMetadata {
            service_name: row.try_get("service_name")?,
            tags: json_column(row, "tags")?,
            icon_url: row.try_get("icon_url")?,
        },
        accepts: Vec::new(),
        extensions: json_column(row, "extensions")?,
        hidden: hidden != 0,
        created_at: millis(row, "created_at")?,
        last_settled_at: millis(row, "last_settled_at")?,
    })
}

/// `LIKE` text that matches `word` anywhere, with `\` escaping `%`, `_` and itself.
fn contains(word: &str) -> String {
    let escaped = word.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_");
    format!("%{escaped}%")
}

impl SqlStore {
    /// The ways to pay of `entries`, newest first, put in each.
    async fn fill_accepts(&self, entries: &mut [CatalogEntry]) -> StoreResult<()> {
        if entries.is_empty() {
            return Ok(());
        }
        let marks = vec!["?"; entries.len()].join(", ");
        let sql = self
            .sql(&format!(
                "SELECT resource_id, requirement FROM discovery_accepts WHERE resource_id IN ({marks}) \
             ORDER BY settled_at DESC, scheme, network, pay_to, asset"
            ))
            .into_owned();
        let mut query = sqlx::query(&sql);
        for entry in entries.iter() {
            query = query.bind(entry.id.as_str());
        }
        for row in query.fetch_all(&self.pool).await? {
            let id: String = row.try_get("resource_id")?;
            let requirement = json_column(&row, "requirement")?;
            if let Some(entry) = entries.iter_mut().find(|e| e.id == id) {
                entry.accepts.push(requirement);
            }
        }
        Ok(())
    }
}

#[async_trait]
impl CatalogStore for SqlStore {
    async fn catalog(&self, entry: &NewEntry) -> StoreResult<()> {
        let at = entry.at.timestamp_millis();
        let upsert = self.sql(
            "INSERT INTO discovery_resources (id, account_id, url, tool_name, kind, x402_version, description, \
             mime_type, service_name, tags, icon_url, extensions, search_text, hidden, created_at, last_settled_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?) \
             ON CONFLICT (url, tool_name) DO UPDATE SET kind = excluded.kind, \
             x402_version = excluded.x402_version, description = excluded.description, \
             mime_type = excluded.mime_type, service_name = excluded.service_name, tags = excluded.tags, \
             icon_url = excluded.icon_url, extensions = excluded.extensions, search_text = excluded.search_text, \
             last_settled_at = excluded.last_settled_at \
             WHERE discovery_resources.account_id = excluded.account_id \
             AND excluded.last_settled_at >= discovery_resources.last_settled_at \
             RETURNING id",
        );
        let tags = serde_json::to_string(&entry.service.tags).map_err(|e| StoreError::Database(e.to_string()))?;
        let extensions = serde_json::to_string(&entry.extensions).map_err(|e| StoreError::Database(e.to_string()))?;
        let requirement = serde_json::to_string(&entry.accept).map_err(|e| StoreError::Database(e.to_string()))?;
        let mut tx = self.pool.begin().await?;
        let written = sqlx::query(&upsert)
            .bind(entry.id.as_str())
            .bind(entry.account_id.as_str())
            .bind(entry.url.as_str())
            .bind(entry.tool_name.as_str())
            .bind(entry.kind.as_str())
            .bind(i64::from(entry.x402_version))
            .bind(entry.description.as_str())
            .bind(entry.mime_type.as_str())
            .bind(entry.service.service_name.as_deref())
            .bind(tags)
            .bind(entry.service.icon_url.as_deref())
            .bind(extensions)
            .bind(entry.search_text.as_str())
            .bind(at)
            .bind(at)
            .fetch_optional(&mut *tx)
            .await?;
        // A settlement older than the entry's last one (written late) changes nothing of it; a
        // resource another account cataloged first is that account's: nothing is written.
        let id: String = match written {
            Some(row) => row.try_get("id")?,
            None => {
                let sql =
                    self.sql("SELECT id FROM discovery_resources WHERE account_id = ? AND url = ? AND tool_name = ?");
                let own = sqlx::query(&sql)
                    .bind(entry.account_id.as_str())
                    .bind(entry.url.as_str())
                    .bind(entry.tool_name.as_str())
                    .fetch_optional(&mut *tx)
                    .await?;
                match own {
                    Some(row) => row.try_get("id")?,
                    None => return Ok(()),
                }
            }
        };
        let accept = self.sql(
            "INSERT INTO discovery_accepts (resource_id, scheme, network, pay_to, asset, requirement, settled_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (resource_id, scheme, network, pay_to, asset) \
             DO UPDATE SET requirement = excluded.requirement, settled_at = excluded.settled_at \
             WHERE excluded.settled_at >= discovery_accepts.settled_at",
        );
        sqlx::query(&accept)
            .bind(id.as_str())
            .bind(entry.accept.scheme.as_str())
            .bind(entry.accept.network.to_string())
            .bind(entry.accept.pay_to.to_string())
            .bind(entry.accept.asset.to_string())
            .bind(requirement)
            .bind(at)
            .execute(&mut *tx)
            .await?;
        let trim = self.sql(
            "DELETE FROM discovery_accepts WHERE resource_id = ? AND settled_at < (SELECT MIN(settled_at) FROM \
             (SELECT settled_at FROM discovery_accepts WHERE resource_id = ? ORDER BY settled_at DESC LIMIT ?) newest)",
        );
        sqlx::query(&trim)
            .bind(id.as_str())
            .bind(id.as_str())
            .bind(to_i64(MAX_ACCEPTS as u64, "accepts")?)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn catalog_list(&self, filter: &Filter) -> StoreResult<(Vec<CatalogEntry>, u64)> {
        // Every entry carries `bazaar` (nothing else is cataloged): another extension matches none.
        if filter.extension.as_deref().is_some_and(|key| key != tollgate_protocol::x402::bazaar::EXTENSION) {
            return Ok((Vec::new(), 0));
        }
        let mut clauses = vec!["r.hidden = 0".to_owned(), "r.last_settled_at >= ?".to_owned()];
        let mut binds: Vec<String> = Vec::new();
        if let Some(kind) = &filter.kind {
            clauses.push("r.kind = ?".into());
            binds.push(kind.clone());
        }
        let mut accepts = Vec::new();
        for (column, value) in [("scheme", &filter.scheme), ("network", &filter.network), ("pay_to", &filter.pay_to)] {
            if let Some(value) = value {
                accepts.push(format!("a.{column} = ?"));
                binds.push(value.clone());
            }
        }
        // The ways to pay that match, found by their own indexes, then their entries: an entry
        // probed per way to pay that matches, not every entry probed for one.
        if !accepts.is_empty() {
            clauses.push(format!(
                "r.id IN (SELECT a.resource_id FROM discovery_accepts a WHERE {})",
                accepts.join(" AND ")
            ));
        }
        for word in &filter.words {
            clauses.push("r.search_text LIKE ? ESCAPE '\\'".into());
            binds.push(contains(word));
        }
        let condition = clauses.join(" AND ");
        let total_sql =
            self.sql(&format!("SELECT COUNT(*) AS total FROM discovery_resources r WHERE {condition}")).into_owned();
        let page_sql = self
            .sql(&format!(
                "SELECT {COLUMNS} FROM discovery_resources r WHERE {condition} \
                 ORDER BY r.last_settled_at DESC, r.id LIMIT ? OFFSET ?"
            ))
            .into_owned();
        let mut tx = self.pool.begin().await?;
        if self.backend == super::Backend::Postgres {
            sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ").execute(&mut *tx).await?;
        }
        let mut total_q = sqlx::query(&total_sql).bind(filter.settled_since);
        for bind in &binds {
            total_q = total_q.bind(bind.as_str());
        }
        let total: i64 = total_q.fetch_one(&mut *tx).await?.try_get("total")?;
        let mut page_q = sqlx::query(&page_sql).bind(filter.settled_since);
        for bind in &binds {
            page_q = page_q.bind(bind.as_str());
        }
        let rows =
            page_q.bind(i64::from(filter.limit)).bind(to_i64(filter.offset, "offset")?).fetch_all(&mut *tx).await?;
        tx.commit().await?;
        let mut entries = rows.iter().map(entry_from_row).collect::<StoreResult<Vec<_>>>()?;
        self.fill_accepts(&mut entries).await?;
        Ok((entries, u64::try_from(total).unwrap_or(0)))
    }

    async fn catalog_of(&self, account_id: &str) -> StoreResult<Vec<CatalogEntry>> {
        let sql = self.sql(&format!(
            "SELECT {COLUMNS} FROM discovery_resources r WHERE account_id = ? ORDER BY last_settled_at DESC, id LIMIT 1000"
        ))
        .into_owned();
        let rows = sqlx::query(&sql).bind(account_id).fetch_all(&self.pool).await?;
        let mut entries = rows.iter().map(entry_from_row).collect::<StoreResult<Vec<_>>>()?;
        self.fill_accepts(&mut entries).await?;
        Ok(entries)
    }

    async fn catalog_hide(&self, account_id: &str, id: &str, hidden: bool) -> StoreResult<bool> {
        let sql = self.sql("UPDATE discovery_resources SET hidden = ? WHERE account_id = ? AND id = ?");
        let done = sqlx::query(&sql).bind(i64::from(hidden)).bind(account_id).bind(id).execute(&self.pool).await?;
        Ok(done.rows_affected() == 1)
    }

    async fn catalog_delete(&self, account_id: &str, id: &str) -> StoreResult<bool> {
        let mut tx = self.pool.begin().await?;
        let sql = self.sql("DELETE FROM discovery_resources WHERE account_id = ? AND id = ?");
        let done = sqlx::query(&sql).bind(account_id).bind(id).execute(&mut *tx).await?;
        if done.rows_affected() == 1 {
            let sql = self.sql("DELETE FROM discovery_accepts WHERE resource_id = ?");
            sqlx::query(&sql).bind(id).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(done.rows_affected() == 1)
    }

    async fn catalog_purge(&self, settled_before: i64) -> StoreResult<u64> {
        let mut tx = self.pool.begin().await?;
        let sql = self.sql(
            "DELETE FROM discovery_accepts WHERE resource_id IN \
             (SELECT id FROM discovery_resources WHERE last_settled_at < ?)",
        );
        sqlx::query(&sql).bind(settled_before).execute(&mut *tx).await?;
        let sql = self.sql("DELETE FROM discovery_resources WHERE last_settled_at < ?");
        let done = sqlx::query(&sql).bind(settled_before).execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(done.rows_affected())
    }
}
