//! SQLite: the reads every `/verify` makes, on the caller's thread.
//!
//! Every `/verify` asks whether a payment holds its proof (nearly always none does) and, for a
//! scheme whose fees the facilitator pays, what the account's sponsorship spent today; every
//! settlement, whether its payer is a custodial wallet here. Through
//! sqlx each read is a hop to a connection's worker thread and back, four context switches: on a
//! 2-core machine under load, about a quarter of a verify's own CPU each (issues 16 and 45). Here
//! each is one lookup in a unique index (`payments_proof`; the sponsorship table's key), made on
//! the caller's thread through connections of its own, opened read-only on the same file. In WAL
//! mode such a read sees every committed write, does not wait for the writer and takes
//! microseconds, so it does not hold up the async runtime.
//!
//! It never waits on a lock: when it cannot answer at once (the file busy, as during recovery
//! after a crash, or any other error), it answers "don't know" and the caller reads through the
//! pool. It only says whether a proof is held (the holder itself is read through the pool), and
//! what a sponsorship row holds.
//!
//! Two things keep it reading the pool's database and nothing else: a connection is opened only
//! while the path still names the file it was opened on (the same device and inode; a file
//! moved in its place answers "don't know"), and [`DirectReader::close`] drops its connections
//! before the pool closes.
//!
//! What can still hold up the caller: SQLite's own short retries of the WAL's read lock under
//! heavy contention, and re-reading the index pages from disk after a commit (from the OS's
//! page cache, unless the disk is slow).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

const HELD: &str = "SELECT 1 FROM payments WHERE proof_id = ?1";
const SPENT: &str = "SELECT spent, largest FROM sponsorship WHERE account_id = ?1 AND family = ?2 AND day = ?3";
const WALLET: &str = "SELECT account_id FROM wallets WHERE address = ?1";

/// Idle connections kept. Callers never wait on one another: one without an idle connection
/// opens its own. At most one per thread that reads at once, so about the runtime's workers.
const KEEP_IDLE: usize = 4;

pub(super) struct DirectReader {
    path: PathBuf,
    /// The file `path` named when the pool had it open: a connection is opened only on it.
    file: FileId,
    idle: Mutex<Vec<Connection>>,
    closed: AtomicBool,
}

/// What tells one file from another one moved to its path (device and inode on Unix).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId(u64, u64);

impl FileId {
    #[cfg(unix)]
    fn of(path: &Path) -> std::io::Result<Self> {
        use std::os::unix::fs::MetadataExt as _;
        let meta = std::fs::metadata(path)?;
        Ok(Self(meta.dev(), meta.ino()))
    }

    #[cfg(not(unix))]
    fn of(path: &Path) -> std::io::Result<Self> {
        std::fs::metadata(path).map(|_| Self(0, 0))
    }
}

/// Why a reader could not be opened.
#[derive(Debug, thiserror::Error)]
pub(super) enum OpenError {
    #[error("{0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("{0}")]
    File(#[from] std::io::Error),
    #[error("the path names another file than the database's")]
    Moved,
}

impl DirectReader {
    /// Opens a first connection on `path` (which must exist and hold the schema) and prepares
    /// the lookup, so that a wrong file fails here rather than at the first verify.
    pub(super) fn open(path: &Path) -> Result<Self, OpenError> {
        let reader = Self {
            path: path.to_owned(),
            file: FileId::of(path)?,
            idle: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
        };
        let conn = reader.connect()?;
        conn.prepare_cached(HELD)?;
        conn.prepare_cached(SPENT)?;
        conn.prepare_cached(WALLET)?;
        reader.keep(conn);
        Ok(reader)
    }

    fn connect(&self) -> Result<Connection, OpenError> {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(&self.path, flags)?;
        // Checked after opening: a file moved in between is caught either way.
        if FileId::of(&self.path)? != self.file {
            return Err(OpenError::Moved);
        }
        // Busy means "ask the pool", never a wait on the runtime's thread.
        conn.busy_timeout(Duration::ZERO)?;
        Ok(conn)
    }

    fn keep(&self, conn: Connection) {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < KEEP_IDLE && !self.closed.load(Ordering::Acquire) {
            idle.push(conn);
        }
    }

    /// Drops every connection; from now on every answer is "don't know".
    pub(super) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.idle.lock().unwrap_or_else(PoisonError::into_inner).clear();
    }

    /// Whether a payment holds `proof_id` now; `None` when that could not be read at once.
    pub(super) fn holds(&self, proof_id: &str) -> Option<bool> {
        self.read(|conn| conn.prepare_cached(HELD)?.exists([proof_id]))
    }

    /// The sponsorship row of `account` on chain family `family` (its namespace) on `day`: spent
    /// and largest, `(0, 0)` when there is none; `None` when that could not be read at once.
    pub(super) fn spent(&self, account: &str, family: &str, day: i64) -> Option<(i64, i64)> {
        use rusqlite::OptionalExtension as _;
        self.read(|conn| {
            let mut lookup = conn.prepare_cached(SPENT)?;
            let row = lookup.query_row(rusqlite::params![account, family, day], |r| Ok((r.get(0)?, r.get(1)?)));
            Ok(row.optional()?.unwrap_or((0, 0)))
        })
    }

    /// The account whose custodial wallet `address` is (`Some(None)`: none's), the question
    /// every settlement asks of its payer; `None` when that could not be read at once.
    pub(super) fn wallet_account(&self, address: &str) -> Option<Option<String>> {
        use rusqlite::OptionalExtension as _;
        self.read(|conn| conn.prepare_cached(WALLET)?.query_row([address], |r| r.get(0)).optional())
    }

    /// One read through an idle connection (or a new one); `None` when it cannot be made at once.
    fn read<T>(&self, lookup: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> Option<T> {
        if self.closed.load(Ordering::Acquire) {
            return None;
        }
        let idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner).pop();
        let conn = match idle {
            Some(conn) => conn,
            None => match self.connect() {
                Ok(conn) => conn,
                Err(e) => {
                    tracing::debug!(error = %e, "a direct read could not open the SQLite file; asking the pool");
                    return None;
                }
            },
        };
        match lookup(&conn) {
            Ok(answer) => {
                self.keep(conn);
                Some(answer)
            }
            Err(e) => {
                // The connection is dropped: the next read starts from a fresh one.
                tracing::debug!(error = %e, "a direct read could not read SQLite at once; asking the pool");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn database(dir: &Path) -> (PathBuf, Connection) {
        let path = dir.join("proofs.db");
        let writer = Connection::open(&path).unwrap();
        writer.pragma_update(None, "journal_mode", "WAL").unwrap();
        writer
            .execute_batch(
                "CREATE TABLE payments (id TEXT PRIMARY KEY, proof_id TEXT);
                 CREATE UNIQUE INDEX payments_proof ON payments (proof_id) WHERE proof_id IS NOT NULL;
                 CREATE TABLE sponsorship (account_id TEXT, family TEXT, day INTEGER, spent INTEGER, largest INTEGER,
                   PRIMARY KEY (account_id, family, day));
                 CREATE TABLE wallets (address TEXT PRIMARY KEY, account_id TEXT NOT NULL);",
            )
            .unwrap();
        (path, writer)
    }

    #[test]
    fn a_committed_claim_and_its_release_are_seen_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let (path, writer) = database(dir.path());
        let reader = DirectReader::open(&path).unwrap();
        assert_eq!(reader.holds("p1"), Some(false));
        writer.execute("INSERT INTO payments VALUES ('pay_1', 'p1')", []).unwrap();
        assert_eq!(reader.holds("p1"), Some(true));
        assert_eq!(reader.holds("p2"), Some(false));
        writer.execute("UPDATE payments SET proof_id = NULL WHERE id = 'pay_1'", []).unwrap();
        assert_eq!(reader.holds("p1"), Some(false));
    }

    #[test]
    fn a_sponsorship_row_is_read_as_committed() {
        let dir = tempfile::tempdir().unwrap();
        let (path, writer) = database(dir.path());
        let reader = DirectReader::open(&path).unwrap();
        assert_eq!(reader.spent("acc_1", "eip155", 20_000), Some((0, 0)), "nothing spent: no row");
        writer.execute("INSERT INTO sponsorship VALUES ('acc_1', 'eip155', 20000, 700, 400)", []).unwrap();
        assert_eq!(reader.spent("acc_1", "eip155", 20_000), Some((700, 400)));
        assert_eq!(reader.spent("acc_1", "solana", 20_000), Some((0, 0)), "another family");
        assert_eq!(reader.spent("acc_1", "eip155", 20_001), Some((0, 0)), "another day");
        assert_eq!(reader.spent("acc_2", "eip155", 20_000), Some((0, 0)), "another account");
        writer.execute_batch("BEGIN IMMEDIATE; UPDATE sponsorship SET spent = 900;").unwrap();
        assert_eq!(reader.spent("acc_1", "eip155", 20_000), Some((700, 400)), "uncommitted: not seen, not waited for");
        writer.execute_batch("COMMIT").unwrap();
        assert_eq!(reader.spent("acc_1", "eip155", 20_000), Some((900, 400)));
    }

    #[test]
    fn a_custodial_wallet_is_read_as_committed() {
        let dir = tempfile::tempdir().unwrap();
        let (path, writer) = database(dir.path());
        let reader = DirectReader::open(&path).unwrap();
        assert_eq!(reader.wallet_account("0xabc"), Some(None), "no such wallet");
        writer.execute_batch("BEGIN IMMEDIATE; INSERT INTO wallets VALUES ('0xabc', 'acc_1');").unwrap();
        assert_eq!(reader.wallet_account("0xabc"), Some(None), "uncommitted: not seen");
        writer.execute_batch("COMMIT").unwrap();
        assert_eq!(reader.wallet_account("0xabc"), Some(Some("acc_1".into())));
        assert_eq!(reader.wallet_account("0xABC"), Some(None), "addresses are compared as stored");
    }

    #[test]
    fn an_uncommitted_claim_is_not_seen_and_the_writer_is_not_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        let (path, writer) = database(dir.path());
        let reader = DirectReader::open(&path).unwrap();
        writer.execute_batch("BEGIN IMMEDIATE; INSERT INTO payments VALUES ('pay_1', 'p1');").unwrap();
        assert_eq!(reader.holds("p1"), Some(false), "a read during a write answers at once");
        writer.execute_batch("COMMIT").unwrap();
        assert_eq!(reader.holds("p1"), Some(true));
    }

    #[test]
    fn a_locked_file_is_a_dont_know_not_a_wait() {
        let dir = tempfile::tempdir().unwrap();
        let (path, writer) = database(dir.path());
        let reader = DirectReader::open(&path).unwrap();
        // A connection in exclusive locking mode keeps every other one out of the file, once
        // none is open on it.
        reader.idle.lock().unwrap().clear();
        writer.pragma_update(None, "locking_mode", "EXCLUSIVE").unwrap();
        writer.execute("INSERT INTO payments VALUES ('pay_1', 'p1')", []).unwrap();
        let started = std::time::Instant::now();
        assert_eq!(reader.holds("p1"), None);
        assert_eq!(reader.spent("acc_1", "eip155", 20_000), None, "the sponsorship read too: the pool answers");
        assert_eq!(reader.wallet_account("0xabc"), None, "and the wallet read");
        assert!(started.elapsed() < Duration::from_secs(1), "it did not wait for the lock");
        drop(writer);
        assert_eq!(reader.holds("p1"), Some(true), "a fresh connection reads again once the file is free");
    }

    #[test]
    fn a_file_moved_in_place_of_the_database_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let (path, writer) = database(dir.path());
        let reader = DirectReader::open(&path).unwrap();
        writer.execute("INSERT INTO payments VALUES ('pay_1', 'p1')", []).unwrap();
        // A restore by `mv` while running: the pool (here, the writer) keeps the old file.
        std::fs::rename(&path, dir.path().join("old.db")).unwrap();
        let other = tempfile::tempdir().unwrap();
        let (moved_in, _) = database(other.path());
        std::fs::rename(&moved_in, &path).unwrap();
        assert_eq!(reader.holds("p1"), Some(true), "an open connection reads the file it was opened on");
        reader.idle.lock().unwrap().clear();
        assert_eq!(reader.holds("p1"), None, "no connection on another file: don't know");
    }

    #[test]
    fn a_closed_reader_keeps_no_connection() {
        let dir = tempfile::tempdir().unwrap();
        let (path, _writer) = database(dir.path());
        let reader = DirectReader::open(&path).unwrap();
        reader.close();
        assert_eq!(reader.holds("p1"), None);
        assert!(reader.idle.lock().unwrap().is_empty());
    }

    #[test]
    fn a_file_without_the_schema_is_refused_at_opening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("empty.db");
        Connection::open(&path).unwrap();
        assert!(DirectReader::open(&path).is_err());
        assert!(DirectReader::open(&dir.path().join("missing.db")).is_err());
    }
}
