//! [`Store`] over SQLite and PostgreSQL through sqlx's `Any` driver.
//!
//! Queries are written once with `?` placeholders; for PostgreSQL they are rewritten to `$1, $2, …`
//! ([`SqlStore::sql`]). Times are stored as milliseconds since the epoch (`BIGINT`), amounts as
//! decimal text (they can exceed 64 bits), metadata as JSON text.

use std::borrow::Cow;
use std::str::FromStr;
use std::sync::LazyLock;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::any::{AnyConnectOptions, AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, Executor, Row};
use tollgate_protocol::gateway::{Direction, PaymentMode, PaymentStatus};
use tollgate_protocol::{AtomicAmount, ChainFamily, Network};

use super::{
    HistoryPage, IdempotencyBegin, NewPayment, PaymentUpdate, Store, StoreError, StoreResult, StoredApiKey,
    StoredPayment, StoredResponse, StoredWallet,
};
use crate::clock::from_millis;
use crate::config::DatabaseUrl;

static SQLITE_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");
static POSTGRES_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Sqlite,
    Postgres,
}

/// The SQL implementation of [`Store`].
#[derive(Debug, Clone)]
pub struct SqlStore {
    pub(super) pool: AnyPool,
    backend: Backend,
}

const PAYMENT_COLUMNS: &str = "seq, id, owner_account, counterparty_account, status, mode, network, from_address, to_address, \
    amount_atomic, asset, decimals, fee_atomic, tx_id, resource, metadata, proof_id, expires_at, last_valid_block_height, \
    error, created_at, updated_at, confirmed_at";

static PAYMENT_COLUMNS_P: LazyLock<String> =
    LazyLock::new(|| PAYMENT_COLUMNS.split(", ").map(|c| format!("p.{}", c.trim())).collect::<Vec<_>>().join(", "));

const KEY_COLUMNS: &str = "id, account_id, env, lookup, hash, hint, plan, rpm, label, created_at, last_used_at";

impl SqlStore {
    /// Connects (creating a SQLite file if needed) and runs the migrations.
    ///
    /// # Errors
    /// [`StoreError::Database`] when the database cannot be reached or migrated.
    pub async fn connect(url: &DatabaseUrl) -> StoreResult<Self> {
        sqlx::any::install_default_drivers();
        let (backend, url_text) = if url.is_postgres() {
            (Backend::Postgres, url.expose().to_owned())
        } else {
            (Backend::Sqlite, sqlite_url_with_create(url.expose()))
        };
        let options = AnyConnectOptions::from_str(&url_text)?;
        let mut pool_options = AnyPoolOptions::new().acquire_timeout(Duration::from_secs(10));
        pool_options = match backend {
            Backend::Sqlite => pool_options.max_connections(8).after_connect(|conn, _meta| {
                Box::pin(async move {
                    // WAL lets readers proceed while one writer writes; busy_timeout makes
                    // writers queue instead of failing with SQLITE_BUSY.
                    conn.execute("PRAGMA journal_mode = WAL").await?;
                    conn.execute("PRAGMA busy_timeout = 10000").await?;
                    conn.execute("PRAGMA synchronous = NORMAL").await?;
                    conn.execute("PRAGMA foreign_keys = ON").await?;
                    Ok(())
                })
            }),
            Backend::Postgres => pool_options.max_connections(16),
        };
        let pool = pool_options.connect_with(options).await?;
        let migrator = match backend {
            Backend::Sqlite => &SQLITE_MIGRATIONS,
            Backend::Postgres => &POSTGRES_MIGRATIONS,
        };
        migrator.run(&pool).await?;
        Ok(Self { pool, backend })
    }

    /// Closes the pool (waits for connections to be returned).
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// The query text for this backend: `?` placeholders become `$n` on PostgreSQL.
    fn sql<'a>(&self, query: &'a str) -> Cow<'a, str> {
        match self.backend {
            Backend::Sqlite => Cow::Borrowed(query),
            Backend::Postgres => Cow::Owned(number_placeholders(query)),
        }
    }
}

/// `a = ? AND b = ?` → `a = $1 AND b = $2` (the queries here hold no `?` inside literals).
fn number_placeholders(query: &str) -> String {
    let mut out = String::with_capacity(query.len() + 16);
    let mut n = 0;
    for c in query.chars() {
        if c == '?' {
            n += 1;
            out.push('$');
            out.push_str(&n.to_string());
        } else {
            out.push(c);
        }
    }
    out
}

/// Makes sure a SQLite URL creates its file when missing.
fn sqlite_url_with_create(url: &str) -> String {
    if url.contains("mode=") || url.contains(":memory:") {
        url.to_owned()
    } else if url.contains('?') {
        format!("{url}&mode=rwc")
    } else {
        format!("{url}?mode=rwc")
    }
}

fn corrupt(what: &str, detail: impl std::fmt::Display) -> StoreError {
    StoreError::Database(format!("unreadable {what} in database: {detail}"))
}

fn opt_millis(v: Option<DateTime<Utc>>) -> Option<i64> {
    v.map(|t| t.timestamp_millis())
}

fn key_from_row(row: &AnyRow) -> StoreResult<StoredApiKey> {
    let plan: String = row.try_get("plan")?;
    let rpm: Option<i64> = row.try_get("rpm")?;
    Ok(StoredApiKey {
        id: row.try_get("id")?,
        account_id: row.try_get("account_id")?,
        env: row.try_get("env")?,
        lookup: row.try_get("lookup")?,
        hash: row.try_get("hash")?,
        hint: row.try_get("hint")?,
        plan: plan.parse().map_err(|e| corrupt("plan", e))?,
        rpm: rpm.map(|r| u32::try_from(r).map_err(|e| corrupt("rpm", e))).transpose()?,
        label: row.try_get("label")?,
        created_at: from_millis(row.try_get("created_at")?),
        last_used_at: row.try_get::<Option<i64>, _>("last_used_at")?.map(from_millis),
    })
}

fn payment_from_row(row: &AnyRow) -> StoreResult<StoredPayment> {
    let status: String = row.try_get("status")?;
    let mode: String = row.try_get("mode")?;
    let network: String = row.try_get("network")?;
    let amount: String = row.try_get("amount_atomic")?;
    let fee: Option<String> = row.try_get("fee_atomic")?;
    let metadata: Option<String> = row.try_get("metadata")?;
    let decimals: i64 = row.try_get("decimals")?;
    let lvbh: Option<i64> = row.try_get("last_valid_block_height")?;
    Ok(StoredPayment {
        payment: NewPayment {
            id: row.try_get("id")?,
            owner_account: row.try_get("owner_account")?,
            counterparty_account: row.try_get("counterparty_account")?,
            status: PaymentStatus::from_wire(&status).ok_or_else(|| corrupt("status", &status))?,
            mode: match mode.as_str() {
                "hosted" => PaymentMode::Hosted,
                "local" => PaymentMode::Local,
                other => return Err(corrupt("mode", other)),
            },
            network: Network::from_str(&network).map_err(|e| corrupt("network", e))?,
            from: row.try_get("from_address")?,
            to: row.try_get("to_address")?,
            amount_atomic: amount.parse().map_err(|e| corrupt("amount", e))?,
            asset: row.try_get("asset")?,
            decimals: u8::try_from(decimals).map_err(|e| corrupt("decimals", e))?,
            fee_atomic: fee.map(|f| f.parse::<AtomicAmount>().map_err(|e| corrupt("fee", e))).transpose()?,
            transaction: row.try_get("tx_id")?,
            resource: row.try_get("resource")?,
            metadata: metadata.map(|m| serde_json::from_str(&m).map_err(|e| corrupt("metadata", e))).transpose()?,
            proof_id: row.try_get("proof_id")?,
            expires_at: row.try_get::<Option<i64>, _>("expires_at")?.map(from_millis),
            last_valid_block_height: lvbh
                .map(|h| u64::try_from(h).map_err(|e| corrupt("block height", e)))
                .transpose()?,
            created_at: from_millis(row.try_get("created_at")?),
        },
        seq: row.try_get("seq")?,
        updated_at: from_millis(row.try_get("updated_at")?),
        confirmed_at: row.try_get::<Option<i64>, _>("confirmed_at")?.map(from_millis),
        error: row.try_get("error")?,
    })
}

fn to_i64<T: TryInto<i64>>(v: T, what: &str) -> StoreResult<i64> {
    v.try_into().map_err(|_| StoreError::Database(format!("{what} out of range for storage")))
}

#[async_trait]
impl Store for SqlStore {
    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

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

    async fn insert_payment(&self, p: &NewPayment) -> StoreResult<StoredPayment> {
        let metadata = p.metadata.as_ref().map(|m| serde_json::Value::Object(m.clone()).to_string());
        let created = p.created_at.timestamp_millis();
        let mut tx = self.pool.begin().await?;
        let insert = self.sql(
            "INSERT INTO payments (id, owner_account, counterparty_account, status, mode, network, from_address, to_address, \
             amount_atomic, asset, decimals, fee_atomic, tx_id, resource, metadata, proof_id, expires_at, last_valid_block_height, \
             error, created_at, updated_at, confirmed_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, ?, ?, NULL) RETURNING seq",
        );
        let row = sqlx::query(&insert)
            .bind(&p.id)
            .bind(&p.owner_account)
            .bind(p.counterparty_account.as_deref())
            .bind(p.status.as_str())
            .bind(p.mode.as_str())
            .bind(p.network.to_string())
            .bind(&p.from)
            .bind(&p.to)
            .bind(p.amount_atomic.to_string())
            .bind(&p.asset)
            .bind(i64::from(p.decimals))
            .bind(p.fee_atomic.map(|f| f.to_string()))
            .bind(p.transaction.as_deref())
            .bind(p.resource.as_deref())
            .bind(metadata)
            .bind(p.proof_id.as_deref())
            .bind(opt_millis(p.expires_at))
            .bind(p.last_valid_block_height.map(|h| to_i64(h, "block height")).transpose()?)
            .bind(created)
            .bind(created)
            .fetch_one(&mut *tx)
            .await?;
        let seq: i64 = row.try_get("seq")?;

        let mut accounts = vec![p.owner_account.as_str()];
        if let Some(other) = p.counterparty_account.as_deref().filter(|o| *o != p.owner_account) {
            accounts.push(other);
        }
        let index = self.sql("INSERT INTO wallet_payments (account_id, wallet, direction, seq) VALUES (?, ?, ?, ?)");
        let count = self.sql(
            "INSERT INTO wallet_payment_counts (account_id, wallet, direction, n) VALUES (?, ?, ?, 1) \
             ON CONFLICT (account_id, wallet, direction) DO UPDATE SET n = wallet_payment_counts.n + 1",
        );
        for account in accounts {
            for (wallet, direction) in [(&p.from, Direction::Sent), (&p.to, Direction::Received)] {
                sqlx::query(&index)
                    .bind(account)
                    .bind(wallet)
                    .bind(direction.as_str())
                    .bind(seq)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query(&count).bind(account).bind(wallet).bind(direction.as_str()).execute(&mut *tx).await?;
            }
        }
        tx.commit().await?;
        Ok(StoredPayment { payment: p.clone(), seq, updated_at: p.created_at, confirmed_at: None, error: None })
    }

    async fn recent_payments(&self, limit: u32) -> StoreResult<Vec<StoredPayment>> {
        let sql = format!("SELECT {PAYMENT_COLUMNS} FROM payments ORDER BY seq DESC LIMIT ?");
        let rows = sqlx::query(&self.sql(&sql)).bind(i64::from(limit)).fetch_all(&self.pool).await?;
        rows.iter().map(payment_from_row).collect()
    }

    async fn get_payment(&self, id: &str) -> StoreResult<Option<StoredPayment>> {
        let sql = format!("SELECT {PAYMENT_COLUMNS} FROM payments WHERE id = ?");
        let row = sqlx::query(&self.sql(&sql)).bind(id).fetch_optional(&self.pool).await?;
        row.as_ref().map(payment_from_row).transpose()
    }

    async fn transition_payment(
        &self,
        id: &str,
        expected: PaymentStatus,
        u: &PaymentUpdate,
    ) -> StoreResult<StoredPayment> {
        let at = u.at.timestamp_millis();
        let confirmed_at = (u.status == PaymentStatus::Confirmed).then_some(at);
        let done = sqlx::query(&self.sql(
            "UPDATE payments SET status = ?, tx_id = COALESCE(?, tx_id), fee_atomic = COALESCE(?, fee_atomic), \
             error = COALESCE(?, error), updated_at = ?, confirmed_at = COALESCE(?, confirmed_at) \
             WHERE id = ? AND status = ?",
        ))
        .bind(u.status.as_str())
        .bind(u.transaction.as_deref())
        .bind(u.fee_atomic.map(|f| f.to_string()))
        .bind(u.error.as_deref())
        .bind(at)
        .bind(confirmed_at)
        .bind(id)
        .bind(expected.as_str())
        .execute(&self.pool)
        .await?;
        let current = self.get_payment(id).await?.ok_or(StoreError::NotFound)?;
        if done.rows_affected() == 1 {
            Ok(current)
        } else {
            Err(StoreError::Conflict { current: current.payment.status })
        }
    }

    async fn history(
        &self,
        account: &str,
        wallet: &str,
        direction: Option<Direction>,
        limit: u32,
        offset: u64,
    ) -> StoreResult<HistoryPage> {
        let filter = if direction.is_some() { " AND direction = ?" } else { "" };
        let total_sql = format!(
            "SELECT CAST(COALESCE(SUM(n), 0) AS BIGINT) AS total FROM wallet_payment_counts WHERE account_id = ? AND wallet = ?{filter}"
        );
        // Paginate on the covering index alone, then join only the rows of the page: skipping
        // `offset` entries costs index steps, not table reads.
        let page_sql = format!(
            "SELECT {cols}, w.direction AS wallet_direction FROM \
             (SELECT seq, direction FROM wallet_payments WHERE account_id = ? AND wallet = ?{filter} \
              ORDER BY seq DESC, direction DESC LIMIT ? OFFSET ?) w \
             JOIN payments p ON p.seq = w.seq ORDER BY w.seq DESC, w.direction DESC",
            cols = PAYMENT_COLUMNS_P.as_str(),
        );
        // One read transaction so the total and the page see the same snapshot.
        let mut tx = self.pool.begin().await?;
        if self.backend == Backend::Postgres {
            sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ").execute(&mut *tx).await?;
        }
        let total_text = self.sql(&total_sql);
        let mut total_q = sqlx::query(&total_text).bind(account).bind(wallet);
        if let Some(d) = direction {
            total_q = total_q.bind(d.as_str());
        }
        let total: i64 = total_q.fetch_one(&mut *tx).await?.try_get("total")?;

        let page_text = self.sql(&page_sql);
        let mut page_q = sqlx::query(&page_text).bind(account).bind(wallet);
        if let Some(d) = direction {
            page_q = page_q.bind(d.as_str());
        }
        let rows = page_q.bind(i64::from(limit)).bind(to_i64(offset, "offset")?).fetch_all(&mut *tx).await?;
        tx.commit().await?;
        let entries = rows
            .iter()
            .map(|row| {
                let side: String = row.try_get("wallet_direction")?;
                let side = match side.as_str() {
                    "sent" => Direction::Sent,
                    "received" => Direction::Received,
                    other => return Err(corrupt("direction", other)),
                };
                Ok((payment_from_row(row)?, side))
            })
            .collect::<StoreResult<Vec<_>>>()?;
        Ok(HistoryPage { total: u64::try_from(total).unwrap_or(0), entries })
    }

    async fn unfinished_payments(&self, networks: &[Network], limit: u32) -> StoreResult<Vec<StoredPayment>> {
        let broadcast = if networks.is_empty() {
            String::new()
        } else {
            let placeholders = vec!["?"; networks.len()].join(", ");
            format!(" OR (status IN ('submitted', 'pending') AND network IN ({placeholders}))")
        };
        let sql =
            format!("SELECT {PAYMENT_COLUMNS} FROM payments WHERE status = 'verified'{broadcast} ORDER BY seq LIMIT ?");
        let sql = self.sql(&sql);
        let mut query = sqlx::query(&sql);
        for network in networks {
            query = query.bind(network.to_string());
        }
        let rows = query.bind(i64::from(limit)).fetch_all(&self.pool).await?;
        rows.iter().map(payment_from_row).collect()
    }

    async fn claim_proof(&self, proof_id: &str, payment_id: &str, at: DateTime<Utc>) -> StoreResult<bool> {
        let done = sqlx::query(&self.sql("INSERT INTO proof_claims (proof_id, payment_id, created_at) VALUES (?, ?, ?) ON CONFLICT (proof_id) DO NOTHING"))
            .bind(proof_id)
            .bind(payment_id)
            .bind(at.timestamp_millis())
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn proof_claim(&self, proof_id: &str) -> StoreResult<Option<String>> {
        let row = sqlx::query(&self.sql("SELECT payment_id FROM proof_claims WHERE proof_id = ?"))
            .bind(proof_id)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| r.try_get("payment_id")).transpose().map_err(Into::into)
    }

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
        let row =
            sqlx::query(&self.sql(
                "SELECT request_hash, state, status, body FROM idempotency_keys WHERE key_id = ? AND idem_key = ?",
            ))
            .bind(key_id)
            .bind(idem_key)
            .fetch_optional(&self.pool)
            .await?;
        // Vanished between the insert and the read (purged or abandoned): the other request is
        // finishing or gave up; the caller may retry.
        let Some(row) = row else {
            return Ok(IdempotencyBegin::InProgress);
        };
        let stored_hash: String = row.try_get("request_hash")?;
        if stored_hash != request_hash {
            return Ok(IdempotencyBegin::Mismatch);
        }
        let state: String = row.try_get("state")?;
        if state != "done" {
            return Ok(IdempotencyBegin::InProgress);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_numbered_for_postgres() {
        assert_eq!(number_placeholders("a = ? AND b = ?"), "a = $1 AND b = $2");
        assert_eq!(sqlite_url_with_create("sqlite://x.db"), "sqlite://x.db?mode=rwc");
        assert_eq!(sqlite_url_with_create("sqlite://x.db?cache=shared"), "sqlite://x.db?cache=shared&mode=rwc");
        assert_eq!(sqlite_url_with_create("sqlite://x.db?mode=ro"), "sqlite://x.db?mode=ro");
    }
}
