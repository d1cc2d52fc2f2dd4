//! The connection a payment's writes go through, and their transactions in as few trips to the
//! database as it allows.
//!
//! SQLite: one connection, kept out of the pool and lent in turn. SQLite lets one writer in at a
//! time anyway (others would wait in its busy handler), and a pooled connection costs a spawned
//! task and a trip to its worker thread each time it is given back (sqlx pings it then). A
//! transaction's statements go to that worker with its `BEGIN` and its `COMMIT`: a payment's
//! insert is one trip, a transition two (the rows that go with it depend on the row the update
//! returns), where sqlx's own transactions take one trip for `BEGIN`, one per statement and one
//! for `COMMIT` (issue 45). PostgreSQL: a connection of the pool, one statement after another.
//!
//! Transactions here are begun and ended by statements of ours, not by sqlx's `Transaction`, so
//! ending one that a failure or a cancelled caller left open is ours too: the kept connection
//! remembers that a transaction may be open on it and the next borrower rolls it back before
//! anything else; a pooled connection dropped with one open is closed instead of given back (the
//! server rolls it back).

use sqlx::any::{AnyArguments, AnyRow};
use sqlx::pool::PoolConnection;
use sqlx::query::Query;
use sqlx::{Any, AnyConnection, Connection as _, Executor as _};
use tokio::sync::OwnedMutexGuard;

use std::sync::Arc;

use super::batch::{Batch, Value};
use super::{Backend, SqlStore, number_placeholders};
use crate::store::StoreResult;

/// SQLite's kept connection, and whether a transaction begun on it may still be open.
pub(super) struct Kept {
    conn: AnyConnection,
    open: bool,
}

/// A connection lent for a payment's writes ([`SqlStore::writer`]); give it back with
/// [`Writer::done`].
pub(super) struct Writer {
    lent: Lent,
    backend: Backend,
}

enum Lent {
    /// The guard is `Some` until dropped, and holds `Some` while lent.
    Kept(Option<OwnedMutexGuard<Option<Kept>>>),
    Pooled {
        conn: PoolConnection<Any>,
        open: bool,
    },
}

impl SqlStore {
    /// Lends the connection for a payment's writes (see the module's documentation).
    pub(super) async fn writer(&self) -> StoreResult<Writer> {
        let Some(kept) = &self.kept else {
            let conn = self.pool.acquire().await?;
            return Ok(Writer { lent: Lent::Pooled { conn, open: false }, backend: self.backend });
        };
        let mut guard = Arc::clone(kept).lock_owned().await;
        match guard.as_mut() {
            // Left open by a failure or a cancelled borrower: undone before anything else. (An
            // error here means none was open, or the connection is lost: then the next statement
            // fails and the connection is replaced.)
            Some(kept) if kept.open => {
                let _ = kept.conn.execute("ROLLBACK").await;
                kept.open = false;
            }
            Some(_) => {}
            // Opened as the pool opens its own (its pragmas), and then kept apart from it.
            None => *guard = Some(Kept { conn: self.pool.acquire().await?.detach(), open: false }),
        }
        Ok(Writer { lent: Lent::Kept(Some(guard)), backend: self.backend })
    }

    /// Drops the kept connection (the store is closing).
    pub(super) async fn close_writer(&self) {
        if let Some(kept) = &self.kept
            && let Some(kept) = kept.lock().await.take()
        {
            let _ = kept.conn.close().await;
        }
    }
}

fn bind<'q>(query: Query<'q, Any, AnyArguments<'q>>, value: &'q Value) -> Query<'q, Any, AnyArguments<'q>> {
    match value {
        Value::Text(v) => query.bind(v.as_deref()),
        Value::Int(v) => query.bind(*v),
        Value::Bool(v) => query.bind(*v),
        Value::Bytes(v) => query.bind(v.as_deref()),
    }
}

impl Writer {
    /// The connection, for a statement of its own outside any transaction.
    pub(super) fn conn(&mut self) -> &mut AnyConnection {
        match &mut self.lent {
            Lent::Kept(guard) => {
                &mut guard.as_deref_mut().and_then(Option::as_mut).unwrap_or_else(|| unreachable!("lent open")).conn
            }
            Lent::Pooled { conn, .. } => conn,
        }
    }

    fn set_open(&mut self, now: bool) {
        match &mut self.lent {
            Lent::Kept(guard) => {
                if let Some(kept) = guard.as_deref_mut().and_then(Option::as_mut) {
                    kept.open = now;
                }
            }
            Lent::Pooled { open, .. } => *open = now,
        }
    }

    fn is_open(&self) -> bool {
        match &self.lent {
            Lent::Kept(guard) => guard.as_deref().and_then(Option::as_ref).is_some_and(|kept| kept.open),
            Lent::Pooled { open, .. } => *open,
        }
    }

    /// `batch` as one whole transaction: the rows its statements return. The first error stops
    /// it and leaves the transaction to [`Self::rollback`] (or to [`Self::done`]).
    pub(super) async fn transact(&mut self, batch: &Batch) -> Result<Vec<AnyRow>, sqlx::Error> {
        self.send(true, batch, true).await
    }

    /// Begins a transaction with `batch`'s statements: the rows they return.
    pub(super) async fn begin(&mut self, batch: &Batch) -> Result<Vec<AnyRow>, sqlx::Error> {
        self.send(true, batch, false).await
    }

    /// Ends the transaction with `batch`'s statements, committed.
    pub(super) async fn commit(&mut self, batch: &Batch) -> Result<Vec<AnyRow>, sqlx::Error> {
        self.send(false, batch, true).await
    }

    /// Undoes the open transaction.
    pub(super) async fn rollback(&mut self) -> Result<(), sqlx::Error> {
        let conn = self.conn();
        conn.execute("ROLLBACK").await?;
        self.set_open(false);
        Ok(())
    }

    /// `batch`, after `BEGIN` when `begin`, then `COMMIT` when `commit`: on SQLite one query (sqlx
    /// binds `?` parameters in order across its statements); on PostgreSQL, which prepares one
    /// statement per query, one after another.
    async fn send(&mut self, begin: bool, batch: &Batch, commit: bool) -> Result<Vec<AnyRow>, sqlx::Error> {
        if begin {
            // Marked before it is sent: a caller cancelled from here on leaves it to be undone.
            self.set_open(true);
        }
        let backend = self.backend;
        let conn = self.conn();
        let rows = match backend {
            Backend::Sqlite => {
                let mut statements: Vec<&str> = batch.statements().map(|(sql, _)| sql).collect();
                if begin {
                    statements.insert(0, "BEGIN IMMEDIATE");
                }
                if commit {
                    statements.push("COMMIT");
                }
                let sql = statements.join(";\n");
                let values = batch.statements().flat_map(|(_, values)| values);
                values.fold(sqlx::query(&sql), bind).fetch_all(&mut *conn).await?
            }
            Backend::Postgres => {
                if begin {
                    conn.execute("BEGIN").await?;
                }
                let mut rows = Vec::new();
                for (sql, values) in batch.statements() {
                    let sql = number_placeholders(sql);
                    rows.extend(values.iter().fold(sqlx::query(&sql), bind).fetch_all(&mut *conn).await?);
                }
                if commit {
                    conn.execute("COMMIT").await?;
                }
                rows
            }
        };
        if commit {
            self.set_open(false);
        }
        Ok(rows)
    }

    /// Gives the connection back after `result`: a transaction still open (a failure between
    /// its statements) is rolled back; after a failure a connection that no longer answers is
    /// dropped (the kept one: the next borrower opens another).
    pub(super) async fn done<T>(mut self, result: StoreResult<T>) -> StoreResult<T> {
        let mut suspect = result.is_err();
        // An error here may only mean that none was open (its `BEGIN` failed).
        if self.is_open() && self.rollback().await.is_err() {
            self.set_open(false);
            suspect = true;
        }
        if suspect && let Err(e) = self.conn().ping().await {
            tracing::warn!(error = %e, "the connection for payment writes failed; it is closed");
            self.lose();
        }
        result
    }

    /// Drops the connection instead of giving it back.
    fn lose(&mut self) {
        match &mut self.lent {
            Lent::Kept(guard) => {
                if let Some(guard) = guard.as_mut() {
                    **guard = None;
                }
            }
            Lent::Pooled { conn, .. } => conn.close_on_drop(),
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // Dropped inside a transaction (its borrower was cancelled): a pooled connection is not
        // given back with it open; the kept one is rolled back at once by a task that holds it
        // until then (it keeps SQLite's write lock meanwhile), or else by its next borrower.
        if !self.is_open() {
            return;
        }
        match &mut self.lent {
            Lent::Pooled { conn, .. } => conn.close_on_drop(),
            Lent::Kept(guard) => {
                if let Ok(runtime) = tokio::runtime::Handle::try_current()
                    && let Some(mut guard) = guard.take()
                {
                    runtime.spawn(async move {
                        if let Some(kept) = guard.as_mut() {
                            // An error: none was open any more, or the connection is lost (its
                            // next statement fails, and it is replaced).
                            let _ = kept.conn.execute("ROLLBACK").await;
                            kept.open = false;
                        }
                    });
                }
            }
        }
    }
}
