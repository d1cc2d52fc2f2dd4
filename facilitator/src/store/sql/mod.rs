//! [`Store`] over SQLite and PostgreSQL through sqlx's `Any` driver, one file per trait:
//! [`accounts`], [`payments`], [`answers`], [`idempotency`], [`webhooks`].
//!
//! Queries are written once with `?` placeholders; for PostgreSQL they are rewritten to `$1, $2, …`
//! ([`SqlStore::sql`]). Times are stored as milliseconds since the epoch (`BIGINT`), amounts as
//! decimal text (they can exceed 64 bits), metadata as JSON text.

mod accounts;
mod announce;
mod answers;
mod batch;
mod direct;
mod discovery;
mod idempotency;
mod migrations;
mod nonces;
mod payments;
mod webhooks;
mod writer;

use std::borrow::Cow;
use std::str::FromStr;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::any::{AnyConnectOptions, AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, Connection as _, Executor, Row};
use tollgate_protocol::gateway::{Direction, PaymentMode, PaymentStatus};
use tollgate_protocol::{AtomicAmount, Network};

use super::{NewPayment, Store, StoreError, StoreResult, StoredApiKey, StoredPayment};
use crate::clock::from_millis;
use crate::config::DatabaseUrl;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Sqlite,
    Postgres,
}

/// The SQL implementation of [`Store`].
#[derive(Clone)]
pub struct SqlStore {
    pub(in crate::store) pool: AnyPool,
    /// PostgreSQL: connections that hold EVM nonce rows locked. Apart from `pool`, because a
    /// holder needs a `pool` connection to record its payment: sharing one pool, enough holders
    /// at once would each wait for a connection another holder keeps.
    locks: Option<AnyPool>,
    backend: Backend,
    /// PostgreSQL: the URL again, for the connection that listens to announcements (secret).
    listen_url: Option<String>,
    /// SQLite on a file: the reads every `/verify` makes (is its proof held, the account's
    /// sponsorship spent today), without the pool's worker threads.
    direct: Option<Arc<direct::DirectReader>>,
    /// SQLite: the connection a payment's writes go through, taken in turn ([`SqlStore::writer`]).
    kept: Option<Arc<tokio::sync::Mutex<Option<writer::Kept>>>>,
    /// Told of every payment written here, once its write commits ([`Store::on_change`]).
    hooks: Arc<std::sync::RwLock<Vec<super::ChangeHook>>>,
}

impl std::fmt::Debug for SqlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the URL: it may carry a password.
        f.debug_struct("SqlStore").field("backend", &self.backend).finish_non_exhaustive()
    }
}

const PAYMENT_COLUMNS: &str = "seq, id, owner_account, owner_side, counterparty_account, status, mode, network, \
    from_address, to_address, amount_atomic, asset, decimals, fee_atomic, tx_id, tx_raw, resource, metadata, proof_id, \
    expires_at, last_valid_block_height, next_check_at, checks, error, created_at, updated_at, confirmed_at";

static PAYMENT_COLUMNS_P: LazyLock<String> =
    LazyLock::new(|| PAYMENT_COLUMNS.split(", ").map(|c| format!("p.{}", c.trim())).collect::<Vec<_>>().join(", "));

const KEY_COLUMNS: &str = "id, account_id, env, lookup, hash, hint, plan, rpm, label, created_at, last_used_at";

impl SqlStore {
    /// Connects (creating a SQLite file if needed) and runs the migrations, with at most 16
    /// PostgreSQL connections.
    ///
    /// # Errors
    /// [`StoreError::Database`] when the database cannot be reached or migrated.
    pub async fn connect(url: &DatabaseUrl) -> StoreResult<Self> {
        Self::connect_with(url, 16, 8).await
    }

    /// As [`Self::connect`], with at most `max_connections` PostgreSQL connections for the work
    /// (SQLite: 8) and, beside them, at most `lease_connections` that hold EVM nonce leases (one
    /// per account sending right now; opened only when needed). Idle connections are closed
    /// after a minute, so instances give back what a burst took.
    ///
    /// # Errors
    /// [`StoreError::Database`] when the database cannot be reached or migrated.
    pub async fn connect_with(url: &DatabaseUrl, max_connections: u32, lease_connections: u32) -> StoreResult<Self> {
        sqlx::any::install_default_drivers();
        let (backend, url_text) = if url.is_postgres() {
            (Backend::Postgres, url.expose().to_owned())
        } else {
            (Backend::Sqlite, sqlite_url_with_create(url.expose()))
        };
        let options = AnyConnectOptions::from_str(&url_text)?;
        let mut pool_options = AnyPoolOptions::new().acquire_timeout(Duration::from_secs(10));
        pool_options = match backend {
            // No ping before each use: a connection to a local file does not go stale the way a
            // network one does, and the ping is one more trip to its worker thread per use (four
            // context switches; a settlement uses the pool four times). A connection whose worker
            // failed fails its next statement, and is closed when given back (sqlx pings it then).
            Backend::Sqlite => {
                pool_options
                    .max_connections(8)
                    .test_before_acquire(false)
                    .after_connect(|conn, _meta| {
                        Box::pin(async move {
                            // WAL lets readers proceed while one writer writes; busy_timeout makes
                            // writers queue instead of failing with SQLITE_BUSY.
                            conn.execute("PRAGMA journal_mode = WAL").await?;
                            conn.execute("PRAGMA busy_timeout = 10000").await?;
                            conn.execute("PRAGMA synchronous = NORMAL").await?;
                            conn.execute("PRAGMA foreign_keys = ON").await?;
                            Ok(())
                        })
                    })
                    // Given back while sqlx still counts a transaction open on it: closed, not pooled.
                    // A transaction SQLite rolled back itself (a full disk at `COMMIT`, a trigger's
                    // `RAISE(ROLLBACK)`) stays counted (sqlx lowers its count only on a `COMMIT` or
                    // `ROLLBACK` that succeeds), and sqlx would begin every later transaction on the
                    // connection as a savepoint inside one that never commits: writes answered as
                    // done and lost, and SQLite's write lock held. (Also closes a connection whose
                    // transaction was dropped and whose rollback is still queued: error paths only.)
                    .after_release(|conn, _meta| Box::pin(async move { Ok(!conn.is_in_transaction()) }))
            }
            Backend::Postgres => {
                pool_options.max_connections(max_connections.max(2)).idle_timeout(Duration::from_secs(60))
            }
        };
        let pool = pool_options.connect_with(options.clone()).await?;
        let locks = match backend {
            Backend::Sqlite => None,
            // A send waiting for a lease waits as long as for the row itself.
            Backend::Postgres => Some(
                AnyPoolOptions::new()
                    .max_connections(lease_connections.max(1))
                    .min_connections(0)
                    .idle_timeout(Duration::from_secs(60))
                    .acquire_timeout(nonces::LOCK_TIMEOUT)
                    .connect_lazy_with(options),
            ),
        };
        migrations::migrator(backend).await?.run(&pool).await?;
        let listen_url = (backend == Backend::Postgres).then_some(url_text);
        let direct = match backend {
            Backend::Sqlite => direct_reader(&pool).await?.map(Arc::new),
            Backend::Postgres => None,
        };
        let kept = (backend == Backend::Sqlite).then(Arc::default);
        Ok(Self { pool, locks, backend, listen_url, direct, kept, hooks: Arc::default() })
    }

    /// A payment was inserted or moved, and its write committed: counted, and told to the hooks.
    fn changed(&self, stored: &StoredPayment) {
        let p = &stored.payment;
        let settled_in = (p.status == PaymentStatus::Confirmed).then(|| stored.updated_at - p.created_at);
        crate::telemetry::payment_changed(p.status.as_str(), &p.asset, &p.network, settled_in);
        let hooks = self.hooks.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        for hook in hooks.iter() {
            hook(stored);
        }
    }

    /// Whether a verify's reads are made without the pool (SQLite on a file).
    #[cfg(test)]
    pub(in crate::store) fn reads_directly(&self) -> bool {
        self.direct.is_some()
    }

    /// Closes the pool (waits for connections to be returned).
    pub async fn close(&self) {
        // First: no connection of the reader outlives the pool.
        if let Some(direct) = &self.direct {
            direct.close();
        }
        self.close_writer().await;
        if let Some(locks) = &self.locks {
            locks.close().await;
        }
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

/// The direct reader of the file `pool` has open (as SQLite resolved its name); none for a
/// database in memory, which no other connection can open, nor when it cannot be opened (then
/// every read goes through the pool, as it always may).
async fn direct_reader(pool: &AnyPool) -> StoreResult<Option<direct::DirectReader>> {
    let file: Option<String> =
        sqlx::query_scalar("SELECT file FROM pragma_database_list WHERE name = 'main'").fetch_optional(pool).await?;
    let Some(file) = file.filter(|file| !file.is_empty()) else { return Ok(None) };
    match direct::DirectReader::open(std::path::Path::new(&file)) {
        Ok(reader) => Ok(Some(reader)),
        Err(e) => {
            tracing::warn!(error = %e, "a verify's reads go through the pool: the SQLite file could not be opened for reading");
            Ok(None)
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
    let side: String = row.try_get("owner_side")?;
    let checks: i64 = row.try_get("checks")?;
    Ok(StoredPayment {
        payment: NewPayment {
            id: row.try_get("id")?,
            owner_account: row.try_get("owner_account")?,
            owner_side: direction(&side)?,
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
            tx_raw: row.try_get("tx_raw")?,
            resource: row.try_get("resource")?,
            metadata: metadata.map(|m| serde_json::from_str(&m).map_err(|e| corrupt("metadata", e))).transpose()?,
            proof_id: row.try_get("proof_id")?,
            expires_at: row.try_get::<Option<i64>, _>("expires_at")?.map(from_millis),
            last_valid_block_height: lvbh
                .map(|h| u64::try_from(h).map_err(|e| corrupt("block height", e)))
                .transpose()?,
            next_check_at: row.try_get::<Option<i64>, _>("next_check_at")?.map(from_millis),
            created_at: from_millis(row.try_get("created_at")?),
            ticket: None,
        },
        seq: row.try_get("seq")?,
        updated_at: from_millis(row.try_get("updated_at")?),
        confirmed_at: row.try_get::<Option<i64>, _>("confirmed_at")?.map(from_millis),
        error: row.try_get("error")?,
        checks: u32::try_from(checks).unwrap_or(u32::MAX),
        answers: None,
    })
}

fn direction(text: &str) -> StoreResult<Direction> {
    match text {
        "sent" => Ok(Direction::Sent),
        "received" => Ok(Direction::Received),
        other => Err(corrupt("direction", other)),
    }
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

    fn announces_changes(&self) -> bool {
        self.backend == Backend::Postgres
    }

    fn on_change(&self, hook: super::ChangeHook) {
        self.hooks.write().unwrap_or_else(std::sync::PoisonError::into_inner).push(hook);
    }

    async fn listen(&self) -> StoreResult<Option<Box<dyn super::Announcements>>> {
        match &self.listen_url {
            Some(url) => Ok(Some(Box::new(announce::PgAnnouncements::listen(url, self.pool.clone()).await?))),
            None => Ok(None),
        }
    }

    async fn purge_announcements(&self, before: DateTime<Utc>) -> StoreResult<u64> {
        if self.backend != Backend::Postgres {
            return Ok(0);
        }
        let done = sqlx::query(&self.sql("DELETE FROM payment_events WHERE created_at < ?"))
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
