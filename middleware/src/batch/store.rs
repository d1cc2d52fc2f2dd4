//! Where a seller keeps its payment channels ([`ChannelStore`]): what each has charged, the last
//! voucher signed for it, and the channel as the chain last showed it.
//!
//! Every write is a compare-and-set on the record's `version`, so two writers (two requests, the
//! claimer, two instances on a shared store) never both move one channel from the same state:
//! the loser is told and answers as if the channel were busy. [`FileChannels`] makes a write
//! durable (appended and synced) before it returns, so an answer is never released for a charge
//! a restart would forget; [`MemoryChannels`] keeps them only in memory.

use std::collections::HashMap;
use std::io::{BufRead as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tollgate_protocol::AtomicAmount;
use tollgate_protocol::x402::PaymentRequirements;
use tollgate_protocol::x402::batch::{ChannelConfig, ChannelState, VoucherState};

/// One channel as the seller keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChannelRecord {
    /// `0x` + 64 lowercase hex digits.
    pub channel_id: String,
    /// Its configuration (its hash is the id).
    pub config: ChannelConfig,
    /// The requirement it was paid under (claims and sweeps are sent with it).
    pub requirement: PaymentRequirements,
    /// What the seller has charged in all: served answers.
    pub charged: AtomicAmount,
    /// The last voucher the payer signed (at least `charged`).
    pub voucher: Option<VoucherState>,
    /// The channel as the chain last showed it (balance, claimed, withdrawal, refund nonce).
    pub chain: ChannelState,
    /// Unix seconds the chain was last read for it.
    pub synced_at: u64,
    /// Unix seconds a cooperative refund was started by an instance (0: none). While it is
    /// recent ([`REFUND_WINDOW`]), no instance serves or refunds the channel: the refund claims
    /// the charge it read, and a voucher charged meanwhile would never be claimable.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub refunding_since: u64,
    /// Bumped by every write (compare-and-set).
    pub version: u64,
}

/// How long a refund started on a channel keeps it closed to vouchers and other refunds: past
/// it (an instance that died mid-refund), the channel is read from the chain again before a
/// voucher is served, which shows whether the refund landed.
pub const REFUND_WINDOW: std::time::Duration = std::time::Duration::from_secs(300);

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if takes a reference
fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl ChannelRecord {
    /// Whether a refund started at `refunding_since` may still be under way at `now`.
    #[must_use]
    pub fn refunding(&self, now: u64) -> bool {
        self.refunding_since != 0 && now.saturating_sub(self.refunding_since) < REFUND_WINDOW.as_secs()
    }

    /// Charged but not claimed on chain yet.
    #[must_use]
    pub fn unclaimed(&self) -> u128 {
        self.charged.get().saturating_sub(self.chain.total_claimed.get())
    }
}

/// A store that could not be read or written.
#[derive(Debug, thiserror::Error)]
#[error("channel store: {0}")]
pub struct ChannelStoreError(pub String);

/// Where channel records live. A `put` is durable when it returns `Ok(true)`.
#[async_trait]
pub trait ChannelStore: Send + Sync + std::fmt::Debug {
    /// The record of `channel_id`.
    ///
    /// # Errors
    /// When the store cannot be read.
    async fn get(&self, channel_id: &str) -> Result<Option<ChannelRecord>, ChannelStoreError>;
    /// Writes `record` (its version bumped) if the stored one's version is `expected` (`None`:
    /// no record yet); `Ok(false)` when another writer moved it first.
    ///
    /// # Errors
    /// When the store cannot be written (nothing was).
    async fn put(&self, record: &ChannelRecord, expected: Option<u64>) -> Result<bool, ChannelStoreError>;
    /// Every record (for the claimer).
    ///
    /// # Errors
    /// When the store cannot be read.
    async fn all(&self) -> Result<Vec<ChannelRecord>, ChannelStoreError>;
    /// What tells this store from another: layers whose stores have one key share their
    /// channels (one count, one lock, one claimer per channel). By default the store's address:
    /// clones of one `Arc` are one store.
    fn key(&self) -> String {
        format!("{:p}", std::ptr::from_ref(self).cast::<()>())
    }
}

/// A shared store (layers of one seller, or a test holding on to it).
#[async_trait]
impl<T: ChannelStore + ?Sized> ChannelStore for Arc<T> {
    async fn get(&self, channel_id: &str) -> Result<Option<ChannelRecord>, ChannelStoreError> {
        (**self).get(channel_id).await
    }
    async fn put(&self, record: &ChannelRecord, expected: Option<u64>) -> Result<bool, ChannelStoreError> {
        (**self).put(record, expected).await
    }
    async fn all(&self) -> Result<Vec<ChannelRecord>, ChannelStoreError> {
        (**self).all().await
    }
    fn key(&self) -> String {
        (**self).key()
    }
}

/// Records in memory only: a restart forgets charges not claimed yet (tests, or a seller that
/// claims often and accepts that).
#[derive(Debug, Default)]
pub struct MemoryChannels {
    records: Mutex<HashMap<String, ChannelRecord>>,
}

impl MemoryChannels {
    /// An empty store.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }
}

/// The compare-and-set both stores do: `record` with its next version, when the stored one's
/// version is `expected`.
fn next_version(
    map: &HashMap<String, ChannelRecord>,
    record: &ChannelRecord,
    expected: Option<u64>,
) -> Option<ChannelRecord> {
    if map.get(&record.channel_id).map(|r| r.version) != expected {
        return None;
    }
    Some(ChannelRecord { version: expected.map_or(1, |v| v + 1), ..record.clone() })
}

#[async_trait]
impl ChannelStore for MemoryChannels {
    async fn get(&self, channel_id: &str) -> Result<Option<ChannelRecord>, ChannelStoreError> {
        Ok(self.records.lock().map_err(poisoned)?.get(channel_id).cloned())
    }

    async fn put(&self, record: &ChannelRecord, expected: Option<u64>) -> Result<bool, ChannelStoreError> {
        let mut records = self.records.lock().map_err(poisoned)?;
        let Some(next) = next_version(&records, record, expected) else { return Ok(false) };
        records.insert(next.channel_id.clone(), next);
        Ok(true)
    }

    async fn all(&self) -> Result<Vec<ChannelRecord>, ChannelStoreError> {
        Ok(self.records.lock().map_err(poisoned)?.values().cloned().collect())
    }
}

fn poisoned<T>(_: std::sync::PoisonError<T>) -> ChannelStoreError {
    ChannelStoreError("a writer panicked".into())
}

/// Records in a journal file: each write appended as one JSON line and synced to disk before it
/// returns; the last line of a channel wins. Opening compacts the journal (one line per
/// channel) and ignores a torn last line (a crash in the middle of a write, never acknowledged).
#[derive(Debug, Clone)]
pub struct FileChannels {
    inner: Arc<FileInner>,
}

#[derive(Debug)]
struct FileInner {
    path: PathBuf,
    state: Mutex<(HashMap<String, ChannelRecord>, std::fs::File)>,
}

impl FileChannels {
    /// Opens (or creates) the journal at `path`. Opened again in the same process, it is the
    /// same journal (one writer per file: a second one would compact the file under the first).
    ///
    /// # Errors
    /// When it cannot be read, compacted or opened for writing.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, ChannelStoreError> {
        static OPEN: std::sync::LazyLock<Mutex<HashMap<PathBuf, std::sync::Weak<FileInner>>>> =
            std::sync::LazyLock::new(Mutex::default);
        let given = path.as_ref();
        let io = |what: &str, e: std::io::Error| ChannelStoreError(format!("{what} {}: {e}", given.display()));
        let parent = given.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or_else(|| Path::new("."));
        let name = given.file_name().ok_or_else(|| ChannelStoreError(format!("{} names no file", given.display())))?;
        let path = parent.canonicalize().map_err(|e| io("cannot find the folder of", e))?.join(name);
        let mut open = OPEN.lock().map_err(poisoned)?;
        open.retain(|_, inner| inner.strong_count() > 0);
        if let Some(inner) = open.get(&path).and_then(std::sync::Weak::upgrade) {
            return Ok(Self { inner });
        }
        let inner = Arc::new(FileInner::open(path.clone())?);
        open.insert(path, Arc::downgrade(&inner));
        Ok(Self { inner })
    }

    /// The journal's path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.inner.path
    }
}

impl FileInner {
    /// Reads and compacts the journal at `path`, and opens it for appending.
    fn open(path: PathBuf) -> Result<Self, ChannelStoreError> {
        let io = |what: &str, e: std::io::Error| ChannelStoreError(format!("{what} {}: {e}", path.display()));
        let mut records: HashMap<String, ChannelRecord> = HashMap::new();
        match std::fs::File::open(&path) {
            Ok(file) => {
                for line in std::io::BufReader::new(file).lines() {
                    let line = line.map_err(|e| io("cannot read", e))?;
                    // A torn line is the one write that was never acknowledged.
                    if let Ok(record) = serde_json::from_str::<ChannelRecord>(&line) {
                        records.insert(record.channel_id.clone(), record);
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("cannot open", e)),
        }
        let compacted = path.with_extension("compacting");
        {
            let mut out = std::fs::File::create(&compacted).map_err(|e| io("cannot write", e))?;
            for record in records.values() {
                let line = serde_json::to_string(record).map_err(|e| ChannelStoreError(e.to_string()))?;
                writeln!(out, "{line}").map_err(|e| io("cannot write", e))?;
            }
            out.sync_all().map_err(|e| io("cannot sync", e))?;
        }
        std::fs::rename(&compacted, &path).map_err(|e| io("cannot replace", e))?;
        let file = std::fs::OpenOptions::new().append(true).open(&path).map_err(|e| io("cannot append to", e))?;
        Ok(Self { path, state: Mutex::new((records, file)) })
    }

    fn put(&self, record: &ChannelRecord, expected: Option<u64>) -> Result<bool, ChannelStoreError> {
        let mut guard = self.state.lock().map_err(poisoned)?;
        let (records, file) = &mut *guard;
        let Some(next) = next_version(records, record, expected) else { return Ok(false) };
        let mut line = serde_json::to_vec(&next).map_err(|e| ChannelStoreError(e.to_string()))?;
        line.push(b'\n');
        let written = file.write_all(&line).and_then(|()| file.sync_data());
        if let Err(e) = written {
            return Err(ChannelStoreError(format!("cannot write {}: {e}", self.path.display())));
        }
        records.insert(next.channel_id.clone(), next);
        Ok(true)
    }
}

#[async_trait]
impl ChannelStore for FileChannels {
    async fn get(&self, channel_id: &str) -> Result<Option<ChannelRecord>, ChannelStoreError> {
        Ok(self.inner.state.lock().map_err(poisoned)?.0.get(channel_id).cloned())
    }

    async fn put(&self, record: &ChannelRecord, expected: Option<u64>) -> Result<bool, ChannelStoreError> {
        let inner = self.inner.clone();
        let record = record.clone();
        // The sync blocks: off the async workers.
        tokio::task::spawn_blocking(move || inner.put(&record, expected))
            .await
            .map_err(|e| ChannelStoreError(format!("the write did not finish: {e}")))?
    }

    async fn all(&self) -> Result<Vec<ChannelRecord>, ChannelStoreError> {
        Ok(self.inner.state.lock().map_err(poisoned)?.0.values().cloned().collect())
    }

    fn key(&self) -> String {
        format!("file:{}", self.inner.path.display())
    }
}

#[cfg(test)]
mod tests {
    use tollgate_protocol::x402::batch::ChannelState;

    use super::*;

    fn record(id: &str, charged: u128) -> ChannelRecord {
        let a: tollgate_protocol::Address =
            "0x1111111111111111111111111111111111111111".parse().unwrap_or_else(|_| unreachable!());
        ChannelRecord {
            channel_id: id.to_owned(),
            config: ChannelConfig {
                payer: a,
                payer_authorizer: a,
                receiver: a,
                receiver_authorizer: a,
                token: a,
                withdraw_delay: 900,
                salt: format!("0x{}", "00".repeat(32)),
            },
            requirement: PaymentRequirements {
                scheme: "batch-settlement".into(),
                network: tollgate_protocol::Network::eip155(31_337),
                amount: AtomicAmount(100),
                asset: tollgate_protocol::x402::Asset::Token(a),
                pay_to: a,
                max_timeout_seconds: 60,
                extra: None,
            },
            charged: AtomicAmount(charged),
            voucher: None,
            chain: ChannelState {
                channel_id: id.to_owned(),
                balance: AtomicAmount(1000),
                total_claimed: AtomicAmount(0),
                withdraw_requested_at: 0,
                refund_nonce: AtomicAmount(0),
                charged_cumulative_amount: None,
            },
            synced_at: 0,
            refunding_since: 0,
            version: 0,
        }
    }

    #[tokio::test]
    async fn a_write_from_a_stale_version_is_refused_and_the_file_keeps_the_last_write() {
        let dir = std::env::temp_dir().join(format!("tollgate-channels-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_default();
        let path = dir.join("channels.jsonl");
        let _ = std::fs::remove_file(&path);
        let store = FileChannels::open(&path).unwrap_or_else(|e| panic!("{e}"));
        assert!(store.put(&record("0xa", 100), None).await.unwrap_or(false));
        assert!(!store.put(&record("0xa", 100), None).await.unwrap_or(true), "a second first write loses");
        assert!(store.put(&record("0xa", 200), Some(1)).await.unwrap_or(false));
        assert!(!store.put(&record("0xa", 300), Some(1)).await.unwrap_or(true), "a stale version loses");
        // A torn line (a crash mid-write) is ignored on reopening; the last whole write wins.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(b"{\"channelId\":\"0xa\",\"char"))
            .unwrap_or_default();
        drop(store);
        let reopened = FileChannels::open(&path).unwrap_or_else(|e| panic!("{e}"));
        let kept = reopened.get("0xa").await.ok().flatten().map(|r| (r.charged, r.version));
        assert_eq!(kept, Some((AtomicAmount(200), 2)));
        let memory = MemoryChannels::new();
        assert!(memory.put(&record("0xb", 1), None).await.unwrap_or(false));
        assert!(!memory.put(&record("0xb", 2), Some(7)).await.unwrap_or(true));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
