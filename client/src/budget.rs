//! Budgets that outlast the process. Each payment is reserved in a SQLite file, in one
//! transaction that first checks it fits every limit, before its proof is signed; then it is
//! marked paid (with what the seller charged) or released (when nothing left the buyer). A
//! reservation a crash left behind counts as spent: the budget never under-counts. Requests of
//! one process, or of several processes on one file, never exceed a limit together (SQLite's
//! write lock orders the reservations).
//!
//! The file is also the spend log: what was paid, to whom, for which URL, in which transaction.

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rusqlite::{Connection, TransactionBehavior, params};
use tollgate_protocol::x402::{Asset, PaymentRequirements};
use tollgate_protocol::{AtomicAmount, DecimalAmount};

use crate::{Cap, PayError};

/// One limit: at most an amount of one asset, across all origins or per origin, over a period
/// (or ever).
#[derive(Debug, Clone)]
pub struct Limit {
    cap: Cap,
    per_origin: bool,
    period: Option<Duration>,
}

impl Limit {
    /// Reads `1SOL/day`, `0.5ETH/hour`, `20@<token address>/week`, `3SOL` (ever); the amount
    /// names its asset as [`Cap::parse`] reads it. `per_origin`: counted apart for each origin
    /// (scheme, host and port).
    ///
    /// # Errors
    /// [`PayError::Cap`] for a malformed amount or an unknown period.
    pub fn parse(text: &str, per_origin: bool) -> Result<Self, PayError> {
        let (amount, period) = match text.rsplit_once('/') {
            Some((amount, period)) => {
                let secs = match period.trim().to_ascii_lowercase().as_str() {
                    "hour" => 3_600,
                    "day" => 86_400,
                    "week" => 7 * 86_400,
                    "month" => 30 * 86_400,
                    other => {
                        return Err(PayError::Cap(format!("unknown period {other:?}: hour, day, week or month")));
                    }
                };
                (amount, Some(Duration::from_secs(secs)))
            }
            None => (text, None),
        };
        let cap = Cap::parse(amount)?;
        // Spends are kept by asset address: a limit names its asset so.
        if matches!(cap.asset(), crate::CapAsset::Symbol(_)) {
            return Err(PayError::Cap(format!(
                "{text:?}: a budget names a token by its address (<amount>@<token address>), not its symbol"
            )));
        }
        Ok(Self { cap, per_origin, period })
    }
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.cap)?;
        if let Some(period) = self.period {
            write!(f, " per {} h", period.as_secs() / 3_600)?;
        }
        if self.per_origin {
            write!(f, " per origin")?;
        }
        Ok(())
    }
}

/// One line of the spend log.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Spend {
    /// When it was reserved (Unix seconds).
    pub at: i64,
    /// The URL paid for.
    pub url: String,
    /// The network (CAIP-2).
    pub network: String,
    /// `native`, or the token's address.
    pub asset: String,
    /// Atomic units: reserved, or what was charged once paid.
    pub amount: AtomicAmount,
    /// To whom.
    pub pay_to: String,
    /// `reserved` (sent or about to be, outcome unknown: counted), `paid` or `released`.
    pub status: String,
    /// The settling transaction, once known.
    pub transaction: Option<String>,
}

/// A payment reserved under the budget, to be marked paid or released.
#[derive(Debug)]
pub(crate) struct Reservation(i64);

/// What a limit per origin counts apart: `scheme://host:port` for a web URL; for another URL
/// (an MCP server over stdio, `mcp+stdio://command`) its scheme and host.
fn origin_of(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(u) if u.origin().is_tuple() => u.origin().ascii_serialization(),
        Ok(u) => format!("{}://{}", u.scheme(), u.host_str().unwrap_or_default()),
        Err(_) => String::new(),
    }
}

/// Limits, and the SQLite file that remembers what was spent.
#[derive(Clone)]
pub struct Budget {
    db: Arc<Mutex<Connection>>,
    limits: Arc<Vec<Limit>>,
    now: Arc<dyn Fn() -> i64 + Send + Sync>,
}

impl std::fmt::Debug for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Budget").field("limits", &self.limits).finish_non_exhaustive()
    }
}

/// The schema: one row per payment reserved.
const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS spends (
    id INTEGER PRIMARY KEY,
    at INTEGER NOT NULL,
    origin TEXT NOT NULL,
    url TEXT NOT NULL,
    family TEXT NOT NULL,
    network TEXT NOT NULL,
    asset TEXT NOT NULL,
    amount TEXT NOT NULL,
    pay_to TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('reserved', 'paid', 'released')),
    tx TEXT
);
CREATE INDEX IF NOT EXISTS spends_asset_at ON spends (family, asset, at);";

/// The payment channels a buyer pays from, kept in its budget file (`crate::channels`).
const CHANNELS_SCHEMA: &str = "CREATE TABLE IF NOT EXISTS channels (
    id TEXT PRIMARY KEY,
    network TEXT NOT NULL,
    config TEXT NOT NULL,
    url TEXT NOT NULL,
    balance TEXT NOT NULL,
    charged TEXT NOT NULL,
    signed TEXT NOT NULL,
    halted TEXT,
    stale INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);";

fn db_error(e: &rusqlite::Error) -> PayError {
    PayError::Budget(format!("the budget file: {e}"))
}

impl Budget {
    /// Opens (or creates) the budget file at `path` with these limits.
    ///
    /// # Errors
    /// [`PayError::Budget`] when the file cannot be opened or is not a budget file.
    pub fn open(path: &Path, limits: Vec<Limit>) -> Result<Self, PayError> {
        let clock = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        };
        Self::open_with_clock(path, limits, Arc::new(clock))
    }

    /// As [`Self::open`], reading the time (Unix seconds) from `now`.
    ///
    /// # Errors
    /// [`PayError::Budget`] when the file cannot be opened or is not a budget file.
    pub fn open_with_clock(
        path: &Path,
        limits: Vec<Limit>,
        now: Arc<dyn Fn() -> i64 + Send + Sync>,
    ) -> Result<Self, PayError> {
        let db = Connection::open(path).map_err(|e| db_error(&e))?;
        // Other processes on the file wait their turn to write rather than fail.
        db.busy_timeout(Duration::from_secs(30)).map_err(|e| db_error(&e))?;
        db.execute_batch(SCHEMA).map_err(|e| db_error(&e))?;
        db.execute_batch(CHANNELS_SCHEMA).map_err(|e| db_error(&e))?;
        Ok(Self { db: Arc::new(Mutex::new(db)), limits: Arc::new(limits), now })
    }

    /// Runs `work` on the file, off the async runtime.
    pub(crate) async fn with_db<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Connection) -> Result<T, PayError> + Send + 'static,
    ) -> Result<T, PayError> {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || work(&mut db.lock().unwrap_or_else(PoisonError::into_inner)))
            .await
            .map_err(|e| PayError::Budget(format!("the budget's task failed: {e}")))?
    }

    /// Whether one of the limits is counted in `requirement`'s asset (the budget then caps it).
    pub(crate) fn counts(&self, requirement: &PaymentRequirements) -> bool {
        self.limits.iter().any(|l| l.cap.counts(requirement))
    }

    /// The smallest limit counted in `requirement`'s asset, in its atomic units: what one
    /// channel deposit may lock at most. `None` when no limit counts it.
    pub(crate) fn smallest_limit(&self, requirement: &PaymentRequirements, decimals: u8) -> Option<AtomicAmount> {
        self.limits.iter().filter(|l| l.cap.counts(requirement)).filter_map(|l| l.cap.atomic(decimals)).min()
    }

    /// Reserves `requirement`'s amount for `url` if it fits every limit counted in its asset.
    pub(crate) async fn reserve(
        &self,
        url: &str,
        requirement: &PaymentRequirements,
        decimals: u8,
    ) -> Result<Reservation, PayError> {
        let origin = origin_of(url);
        let family = requirement.network.family().native_symbol().to_owned();
        let asset = match requirement.asset {
            Asset::Native => "native".to_owned(),
            Asset::Token(token) => token.to_string(),
        };
        let counted: Vec<Limit> = self.limits.iter().filter(|l| l.cap.counts(requirement)).cloned().collect();
        let (now, amount) = ((self.now)(), requirement.amount);
        let row = (url.to_owned(), requirement.network.to_string(), requirement.pay_to.to_string());
        self.with_db(move |db| {
            let tx = db.transaction_with_behavior(TransactionBehavior::Immediate).map_err(|e| db_error(&e))?;
            for limit in &counted {
                let since = limit.period.map_or(i64::MIN, |p| now - i64::try_from(p.as_secs()).unwrap_or(i64::MAX));
                let mut spent = 0u128;
                {
                    let mut rows = tx
                        .prepare_cached(
                            "SELECT amount FROM spends WHERE status != 'released' AND family = ?1 AND asset = ?2
                             AND at >= ?3 AND (?4 IS NULL OR origin = ?4)",
                        )
                        .map_err(|e| db_error(&e))?;
                    let scope = limit.per_origin.then_some(origin.as_str());
                    let amounts = rows
                        .query_map(params![family, asset, since, scope], |r| r.get::<_, String>(0))
                        .map_err(|e| db_error(&e))?;
                    for text in amounts {
                        let text = text.map_err(|e| db_error(&e))?;
                        let units: u128 =
                            text.parse().map_err(|_| PayError::Budget(format!("the budget file holds {text:?}")))?;
                        spent = spent.saturating_add(units);
                    }
                }
                if !limit.cap.allows(AtomicAmount(spent.saturating_add(amount.get())), decimals) {
                    return Err(PayError::OverBudget {
                        price: DecimalAmount::from_atomic(amount, decimals).to_string(),
                        spent: DecimalAmount::from_atomic(AtomicAmount(spent), decimals).to_string(),
                        limit: limit.to_string(),
                    });
                }
            }
            tx.execute(
                "INSERT INTO spends (at, origin, url, family, network, asset, amount, pay_to, status)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'reserved')",
                params![now, origin, row.0, family, row.1, asset, amount.get().to_string(), row.2],
            )
            .map_err(|e| db_error(&e))?;
            let id = tx.last_insert_rowid();
            tx.commit().map_err(|e| db_error(&e))?;
            Ok(Reservation(id))
        })
        .await
    }

    /// Marks a reservation paid: what was charged (a metered price may charge less than
    /// reserved), in which transaction.
    pub(crate) async fn paid(&self, reservation: Reservation, charged: AtomicAmount, transaction: Option<String>) {
        let done = self
            .with_db(move |db| {
                db.execute(
                    "UPDATE spends SET status = 'paid', amount = ?2, tx = ?3 WHERE id = ?1",
                    params![reservation.0, charged.get().to_string(), transaction],
                )
                .map_err(|e| db_error(&e))
            })
            .await;
        if let Err(e) = done {
            // Still counted at what was reserved: never less than spent.
            warn_unrecorded(&e);
        }
    }

    /// Releases a reservation whose payment never left the buyer (its proof was not built).
    pub(crate) async fn release(&self, reservation: Reservation) {
        let done = self
            .with_db(move |db| {
                db.execute(
                    "UPDATE spends SET status = 'released' WHERE id = ?1 AND status = 'reserved'",
                    [reservation.0],
                )
                .map_err(|e| db_error(&e))
            })
            .await;
        if let Err(e) = done {
            warn_unrecorded(&e);
        }
    }

    /// The spend log, newest first.
    ///
    /// # Errors
    /// [`PayError::Budget`] when the file cannot be read.
    pub async fn spends(&self) -> Result<Vec<Spend>, PayError> {
        self.with_db(|db| {
            let mut rows = db
                .prepare("SELECT at, url, network, asset, amount, pay_to, status, tx FROM spends ORDER BY id DESC")
                .map_err(|e| db_error(&e))?;
            let read = rows
                .query_map([], |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, String>(3)?,
                        r.get::<_, String>(4)?,
                        r.get::<_, String>(5)?,
                        r.get::<_, String>(6)?,
                        r.get::<_, Option<String>>(7)?,
                    ))
                })
                .map_err(|e| db_error(&e))?;
            read.map(|row| {
                let (at, url, network, asset, amount, pay_to, status, transaction) = row.map_err(|e| db_error(&e))?;
                let amount = AtomicAmount(
                    amount.parse().map_err(|_| PayError::Budget(format!("the budget file holds {amount:?}")))?,
                );
                Ok(Spend { at, url, network, asset, amount, pay_to, status, transaction })
            })
            .collect()
        })
        .await
    }

    /// The reservation with `id`'s status (tests).
    #[cfg(test)]
    fn status(&self, id: i64) -> Option<String> {
        use rusqlite::OptionalExtension as _;
        let db = self.db.lock().unwrap_or_else(PoisonError::into_inner);
        db.query_row("SELECT status FROM spends WHERE id = ?1", [id], |r| r.get(0)).optional().ok().flatten()
    }
}

/// The buyer crate logs nothing itself: an unrecorded outcome is said on stderr.
fn warn_unrecorded(e: &PayError) {
    eprintln!("tollgate-client: {e} (the payment stays counted as reserved)");
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::atomic::{AtomicI64, Ordering};

    use super::*;

    fn offer(amount: u128, network: &str, asset: &str) -> PaymentRequirements {
        serde_json::from_value(serde_json::json!({"scheme": "exact-native", "network": network,
            "amount": amount.to_string(), "asset": asset, "payTo": "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin",
            "maxTimeoutSeconds": 60}))
        .unwrap()
    }
    const SOLANA: &str = "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1";

    #[tokio::test]
    async fn a_limit_holds_across_a_restart_and_a_period_and_released_payments_do_not_count() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("budget.db");
        let clock = Arc::new(AtomicI64::new(1_000_000));
        let now = {
            let c = clock.clone();
            Arc::new(move || c.load(Ordering::SeqCst))
        };
        let limits = || vec![Limit::parse("0.003SOL/day", false).unwrap()];
        let budget = Budget::open_with_clock(&file, limits(), now.clone()).unwrap();
        let lamports = offer(1_000_000, SOLANA, "native");
        for _ in 0..2 {
            let r = budget.reserve("http://a.example/x", &lamports, 9).await.unwrap();
            budget.paid(r, AtomicAmount(1_000_000), Some("tx".into())).await;
        }
        let released = budget.reserve("http://a.example/x", &lamports, 9).await.unwrap();
        let id = released.0;
        budget.release(released).await;
        assert_eq!(budget.status(id).as_deref(), Some("released"));
        drop(budget);

        // Reopened: two payments spent; the third fits, the fourth does not.
        let budget = Budget::open_with_clock(&file, limits(), now).unwrap();
        // A crash before the third was marked: it stays reserved, and counted.
        let _third = budget.reserve("http://b.example/y", &lamports, 9).await.unwrap();
        let refused = budget.reserve("http://b.example/y", &lamports, 9).await.unwrap_err();
        assert!(matches!(&refused, PayError::OverBudget { spent, .. } if spent == "0.003"), "{refused:?}");
        // Another asset is not counted against a SOL limit.
        let eth = offer(1, "eip155:8453", "native");
        assert!(budget.reserve("http://b.example/y", &eth, 18).await.is_ok());
        // A day later, the window has moved on.
        clock.fetch_add(86_401, Ordering::SeqCst);
        assert!(budget.reserve("http://b.example/y", &lamports, 9).await.is_ok());
        let log = budget.spends().await.unwrap();
        // Two paid, one released, the crashed one, ETH, and a day later (the refused one is not a row).
        let statuses: Vec<&str> = log.iter().rev().map(|s| s.status.as_str()).collect();
        assert_eq!(statuses, ["paid", "paid", "released", "reserved", "reserved", "reserved"]);
        assert_eq!((log[5].transaction.as_deref(), log[5].url.as_str()), (Some("tx"), "http://a.example/x"));
    }

    #[tokio::test]
    async fn per_origin_limits_count_each_origin_apart() {
        let dir = tempfile::tempdir().unwrap();
        let budget = Budget::open(&dir.path().join("b.db"), vec![Limit::parse("0.001SOL", true).unwrap()]).unwrap();
        let lamports = offer(1_000_000, SOLANA, "native");
        assert!(budget.reserve("https://a.example/1", &lamports, 9).await.is_ok());
        assert!(budget.reserve("https://a.example/2", &lamports, 9).await.is_err(), "the same origin");
        assert!(budget.reserve("https://b.example/1", &lamports, 9).await.is_ok(), "another origin");
        // An origin is scheme, host and port.
        assert!(budget.reserve("https://b.example:8443/1", &lamports, 9).await.is_ok(), "another port");
        assert!(budget.reserve("http://b.example/1", &lamports, 9).await.is_ok(), "another scheme");
        // MCP servers over stdio are told apart by their command, not lumped as opaque origins.
        assert!(budget.reserve("mcp+stdio://seller-a", &lamports, 9).await.is_ok());
        assert!(budget.reserve("mcp+stdio://seller-a", &lamports, 9).await.is_err(), "the same server");
        assert!(budget.reserve("mcp+stdio://seller-b", &lamports, 9).await.is_ok(), "another server");
        assert!(Limit::parse("1SOL/fortnight", false).is_err());
        assert!(Limit::parse("1/day", false).is_err(), "names no asset");
    }

    /// A week is seven days and a month thirty: a spend counts until then, and not after.
    #[tokio::test]
    async fn weeks_and_months_are_their_days() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(AtomicI64::new(1_000_000));
        let now = {
            let c = clock.clone();
            Arc::new(move || c.load(Ordering::SeqCst))
        };
        let lamports = offer(1_000_000, SOLANA, "native");
        for (period, days) in [("week", 7), ("month", 30)] {
            clock.store(1_000_000, Ordering::SeqCst);
            let limits = vec![Limit::parse(&format!("0.001SOL/{period}"), false).unwrap()];
            let budget =
                Budget::open_with_clock(&dir.path().join(format!("{period}.db")), limits, now.clone()).unwrap();
            assert!(budget.reserve("http://a.example/x", &lamports, 9).await.is_ok());
            clock.fetch_add(days * 86_400 - 60, Ordering::SeqCst);
            assert!(budget.reserve("http://a.example/x", &lamports, 9).await.is_err(), "within a {period}");
            clock.fetch_add(120, Ordering::SeqCst);
            assert!(budget.reserve("http://a.example/x", &lamports, 9).await.is_ok(), "a {period} later");
        }
    }

    #[test]
    fn a_limit_says_its_amount_period_and_scope() {
        let daily = Limit::parse("1SOL/day", true).unwrap();
        let cap = daily.cap.to_string();
        assert_eq!(daily.to_string(), format!("{cap} per 24 h per origin"));
        assert_eq!(Limit::parse("1SOL/week", false).unwrap().to_string(), format!("{cap} per 168 h"));
        assert_eq!(Limit::parse("1SOL/month", false).unwrap().to_string(), format!("{cap} per 720 h"));
        assert_eq!(Limit::parse("1SOL", false).unwrap().to_string(), cap);
    }

    /// A budget caps what its limits name, and nothing else.
    #[test]
    fn a_budget_counts_only_the_assets_its_limits_name() {
        let dir = tempfile::tempdir().unwrap();
        let budget = Budget::open(&dir.path().join("b.db"), vec![Limit::parse("1SOL", false).unwrap()]).unwrap();
        assert!(budget.counts(&offer(1, SOLANA, "native")));
        assert!(!budget.counts(&offer(1, "eip155:8453", "native")));
    }

    /// What one channel deposit may lock: the smallest limit counted in its asset.
    #[test]
    fn the_smallest_limit_of_an_asset_bounds_a_deposit() {
        let dir = tempfile::tempdir().unwrap();
        let limits = ["1SOL/day", "0.5SOL", "0.001ETH"].map(|l| Limit::parse(l, false).unwrap()).to_vec();
        let budget = Budget::open(&dir.path().join("b.db"), limits).unwrap();
        assert_eq!(budget.smallest_limit(&offer(1, SOLANA, "native"), 9), Some(AtomicAmount(500_000_000)));
        assert_eq!(
            budget.smallest_limit(&offer(1, "eip155:8453", "native"), 18),
            Some(AtomicAmount(1_000_000_000_000_000))
        );
        assert_eq!(
            budget.smallest_limit(&offer(1, "eip155:8453", "0x0707070707070707070707070707070707070707"), 6),
            None
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn twenty_concurrent_reservations_under_a_limit_of_ten_get_ten() {
        let dir = tempfile::tempdir().unwrap();
        let budget = Budget::open(&dir.path().join("b.db"), vec![Limit::parse("0.01SOL", false).unwrap()]).unwrap();
        let lamports = offer(1_000_000, SOLANA, "native");
        let tries: Vec<_> = (0..20)
            .map(|i| {
                let (budget, lamports) = (budget.clone(), lamports.clone());
                tokio::spawn(
                    async move { budget.reserve(&format!("http://a.example/{i}"), &lamports, 9).await.is_ok() },
                )
            })
            .collect();
        let mut granted = 0;
        for t in tries {
            granted += usize::from(t.await.unwrap());
        }
        assert_eq!(granted, 10);
    }
}
