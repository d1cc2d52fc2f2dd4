//! [`PaymentStore`] in SQL: payments, their history index and counters, and the reconciler's
//! schedule.
//!
//! A payment's insert is one database transaction: the row (which claims its proof and its
//! transaction through unique indexes), its history entries and the per-wallet counters. The
//! counters are updated in one fixed order (sorted by key), so two payments between the same
//! wallets in opposite directions cannot deadlock each other on PostgreSQL.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::Row;
use tollgate_protocol::Network;
use tollgate_protocol::gateway::{Direction, PaymentStatus};

use super::batch::Batch;
use super::writer::Writer;
use super::{Backend, PAYMENT_COLUMNS, PAYMENT_COLUMNS_P, SqlStore, direction, opt_millis, payment_from_row, to_i64};
use crate::store::{HistoryPage, NewPayment, PaymentStore, PaymentUpdate, StoreError, StoreResult, StoredPayment};

const INSERT: &str = "INSERT INTO payments (id, owner_account, owner_side, counterparty_account, status, mode, network, \
     from_address, to_address, amount_atomic, asset, decimals, fee_atomic, tx_id, tx_raw, resource, metadata, proof_id, \
     expires_at, last_valid_block_height, next_check_at, checks, error, created_at, updated_at, confirmed_at) \
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, NULL, ?, ?, NULL) RETURNING seq";

/// What a transition wrote.
enum MoveOutcome {
    Moved(Box<StoredPayment>),
    /// The payment's status was not the one expected: nothing written.
    NotAsExpected,
    /// Its transaction is another payment's: nothing written.
    TransactionUsed,
}

impl SqlStore {
    /// Lists payment `p` in the history of each of `accounts`, under its payer's and payee's
    /// wallets, and counts it there (its insertion sequence read by its id, so this can go in the
    /// batch that inserts it).
    fn index_history(&self, batch: &mut Batch, accounts: &[&str], p: &NewPayment) {
        let mut entries: Vec<(&str, &str, Direction)> = accounts
            .iter()
            .flat_map(|a| [(*a, p.from.as_str(), Direction::Sent), (*a, p.to.as_str(), Direction::Received)])
            .collect();
        // One order for every writer: no two inserts wait on each other's counters in a cycle
        // (PostgreSQL takes a multi-row insert's rows in the order written).
        entries.sort_by(|a, b| (a.0, a.1, a.2.as_str()).cmp(&(b.0, b.1, b.2.as_str())));
        let n = entries.len();
        let rows = |row: &str| vec![row; n].join(", ");
        let mut index = Vec::new();
        let mut count = Vec::new();
        for (account, wallet, direction) in entries {
            index.extend([account.into(), wallet.into(), direction.as_str().into(), p.id.as_str().into()]);
            count.extend([account.into(), wallet.into(), direction.as_str().into()]);
        }
        batch.push(
            format!(
                "INSERT INTO wallet_payments (account_id, wallet, direction, seq) VALUES {}",
                rows("(?, ?, ?, (SELECT seq FROM payments WHERE id = ?))")
            ),
            index,
        );
        batch.push(
            format!(
                "INSERT INTO wallet_payment_counts (account_id, wallet, direction, n) VALUES {} \
                 ON CONFLICT (account_id, wallet, direction) DO UPDATE SET n = wallet_payment_counts.n + 1",
                rows("(?, ?, ?, 1)")
            ),
            count,
        );
    }

    /// Runs a payment's insert `batch` (its first statement returns the payment's sequence) as
    /// one transaction: the sequence, or `None` when a unique key refused it (nothing written).
    async fn insert_rows(writer: &mut Writer, batch: &Batch) -> StoreResult<Option<i64>> {
        match writer.transact(batch).await {
            Ok(rows) => {
                let row = rows.first().ok_or_else(|| StoreError::Database("the insert returned no sequence".into()))?;
                Ok(Some(row.try_get("seq")?))
            }
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                writer.rollback().await?;
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Applies `u` to payment `id` if its status is still `expected`, with the rows that go
    /// with the change, in one transaction.
    async fn move_rows(
        &self,
        writer: &mut Writer,
        id: &str,
        expected: PaymentStatus,
        u: &PaymentUpdate,
    ) -> StoreResult<MoveOutcome> {
        let at = u.at.timestamp_millis();
        let confirmed_at = (u.status == PaymentStatus::Confirmed).then_some(at);
        let mut update = Batch::default();
        update.push(
            format!(
                "UPDATE payments SET status = ?, tx_id = COALESCE(?, tx_id), fee_atomic = COALESCE(?, fee_atomic), \
                 amount_atomic = COALESCE(?, amount_atomic), counterparty_account = COALESCE(counterparty_account, ?), \
                 error = COALESCE(?, error), updated_at = ?, confirmed_at = COALESCE(?, confirmed_at), \
                 proof_id = CASE WHEN ? THEN NULL ELSE proof_id END, \
                 next_check_at = CASE WHEN ? THEN NULL ELSE next_check_at END \
                 WHERE id = ? AND status = ? RETURNING {PAYMENT_COLUMNS}"
            ),
            vec![
                u.status.as_str().into(),
                u.transaction.as_deref().into(),
                u.fee_atomic.map(|f| f.to_string()).into(),
                u.amount_atomic.map(|a| a.to_string()).into(),
                u.counterparty_account.as_deref().into(),
                u.error.as_deref().into(),
                at.into(),
                confirmed_at.into(),
                u.release_proof.into(),
                u.status.is_final().into(),
                id.into(),
                expected.as_str().into(),
            ],
        );
        // One transaction: the change and what goes with it commit together, and the row
        // returned is the one this change wrote.
        let moved = match writer.begin(&update).await {
            Ok(rows) => match rows.first() {
                Some(row) => payment_from_row(row)?,
                None => {
                    writer.rollback().await?;
                    return Ok(MoveOutcome::NotAsExpected);
                }
            },
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                writer.rollback().await?;
                return Ok(MoveOutcome::TransactionUsed);
            }
            Err(e) => return Err(e.into()),
        };
        // The other side learns of the payment now (a local build, once it is confirmed): it
        // enters that account's history with this change.
        let mut batch = Batch::default();
        if let Some(revealed) = u.counterparty_account.as_deref()
            && moved.payment.counterparty_account.as_deref() == Some(revealed)
            && revealed != moved.payment.owner_account
        {
            self.index_history(&mut batch, &[revealed], &moved.payment);
        }
        self.announce(&mut batch, &moved);
        self.queue_webhooks(&mut batch, &moved);
        writer.commit(&batch).await?;
        Ok(MoveOutcome::Moved(Box::new(moved)))
    }

    /// The payment whose own transfer `tx_id` is, on `p`'s side (of any account).
    async fn transaction_holder(&self, p: &NewPayment, tx_id: &str) -> StoreResult<Option<String>> {
        let row = sqlx::query(&self.sql("SELECT id FROM payments WHERE network = ? AND tx_id = ? AND owner_side = ?"))
            .bind(p.network.to_string())
            .bind(tx_id)
            .bind(p.owner_side.as_str())
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| r.try_get("id")).transpose().map_err(Into::into)
    }

    /// Why an insert of `p` wrote nothing: which unique key another payment holds.
    async fn insert_conflict(&self, p: &NewPayment) -> StoreError {
        if let Some(proof) = &p.proof_id {
            match self.payment_by_proof(proof).await {
                Ok(Some(holder)) => return StoreError::ProofUsed { payment_id: holder.payment.id },
                Ok(None) => {}
                Err(e) => return e,
            }
        }
        if let Some(tx) = &p.transaction {
            match self.transaction_holder(p, tx).await {
                Ok(Some(payment_id)) => return StoreError::TransactionUsed { payment_id },
                Ok(None) => {}
                Err(e) => return e,
            }
        }
        StoreError::Database(format!("payment {} could not be inserted (its id exists, or a holder left)", p.id))
    }
}

#[async_trait]
impl PaymentStore for SqlStore {
    async fn insert_payment(&self, p: &NewPayment) -> StoreResult<StoredPayment> {
        let metadata = p.metadata.as_ref().map(|m| serde_json::Value::Object(m.clone()).to_string());
        let created = p.created_at.timestamp_millis();
        let mut stored = StoredPayment {
            payment: p.clone(),
            // Read back from the insert below; the events queued with it do not carry it.
            seq: 0,
            updated_at: p.created_at,
            confirmed_at: None,
            error: None,
            checks: 0,
            answers: None,
        };
        // Every row of the payment in one batch: on SQLite one trip to the database.
        let mut batch = Batch::default();
        batch.push(
            INSERT,
            vec![
                p.id.as_str().into(),
                p.owner_account.as_str().into(),
                p.owner_side.as_str().into(),
                p.counterparty_account.as_deref().into(),
                p.status.as_str().into(),
                p.mode.as_str().into(),
                p.network.to_string().into(),
                p.from.as_str().into(),
                p.to.as_str().into(),
                p.amount_atomic.to_string().into(),
                p.asset.as_str().into(),
                i64::from(p.decimals).into(),
                p.fee_atomic.map(|f| f.to_string()).into(),
                p.transaction.as_deref().into(),
                p.tx_raw.clone().into(),
                p.resource.as_deref().into(),
                metadata.into(),
                p.proof_id.as_deref().into(),
                opt_millis(p.expires_at).into(),
                p.last_valid_block_height.map(|h| to_i64(h, "block height")).transpose()?.into(),
                opt_millis(p.next_check_at).into(),
                created.into(),
                created.into(),
            ],
        );
        let mut accounts = vec![p.owner_account.as_str()];
        if let Some(other) = p.counterparty_account.as_deref().filter(|o| *o != p.owner_account) {
            accounts.push(other);
        }
        self.index_history(&mut batch, &accounts, p);
        self.insert_first_answer(&mut batch, p)?;
        self.announce(&mut batch, &stored);
        self.queue_webhooks(&mut batch, &stored);

        let mut writer = self.writer().await?;
        let written = Self::insert_rows(&mut writer, &batch).await;
        let Some(seq) = writer.done(written).await? else {
            // Its id, proof or transaction is another payment's: nothing of it was written.
            return Err(self.insert_conflict(p).await);
        };
        stored.seq = seq;
        self.changed(&stored);
        Ok(stored)
    }

    async fn get_payment(&self, id: &str) -> StoreResult<Option<StoredPayment>> {
        let sql = format!("SELECT {PAYMENT_COLUMNS} FROM payments WHERE id = ?");
        let row = sqlx::query(&self.sql(&sql)).bind(id).fetch_optional(&self.pool).await?;
        row.as_ref().map(payment_from_row).transpose()
    }

    async fn payment_by_proof(&self, proof_id: &str) -> StoreResult<Option<StoredPayment>> {
        // Nearly every proof asked about is new: that answer comes without the pool.
        if let Some(false) = self.direct.as_ref().and_then(|direct| direct.holds(proof_id)) {
            return Ok(None);
        }
        let sql = format!("SELECT {PAYMENT_COLUMNS} FROM payments WHERE proof_id = ?");
        let row = sqlx::query(&self.sql(&sql)).bind(proof_id).fetch_optional(&self.pool).await?;
        row.as_ref().map(payment_from_row).transpose()
    }

    async fn transition_payment(
        &self,
        id: &str,
        expected: PaymentStatus,
        u: &PaymentUpdate,
    ) -> StoreResult<StoredPayment> {
        let mut writer = self.writer().await?;
        let moved = self.move_rows(&mut writer, id, expected, u).await;
        // The explanations of a refusal are read with the writer given back.
        match writer.done(moved).await? {
            MoveOutcome::Moved(moved) => {
                self.changed(&moved);
                Ok(*moved)
            }
            MoveOutcome::NotAsExpected => {
                let current = self.get_payment(id).await?.ok_or(StoreError::NotFound)?;
                Err(StoreError::Conflict { current: current.payment.status })
            }
            MoveOutcome::TransactionUsed => {
                let current = self.get_payment(id).await?.ok_or(StoreError::NotFound)?;
                let tx_id = u.transaction.as_deref().unwrap_or_default();
                let holder = self.transaction_holder(&current.payment, tx_id).await?.unwrap_or_default();
                Err(StoreError::TransactionUsed { payment_id: holder })
            }
        }
    }

    async fn claim_due_payments(
        &self,
        networks: &[Network],
        now: DateTime<Utc>,
        limit: u32,
        claim_until: DateTime<Utc>,
    ) -> StoreResult<Vec<StoredPayment>> {
        let served = if networks.is_empty() {
            String::new()
        } else {
            format!("network IN ({}) OR ", vec!["?"; networks.len()].join(", "))
        };
        // PostgreSQL: rows another instance is claiming right now are skipped, not waited for
        // (and rows it claimed already fail the `claimed_until` test when re-read).
        let skip_locked = if self.backend == Backend::Postgres { " FOR UPDATE SKIP LOCKED" } else { "" };
        let sql = format!(
            "UPDATE payments SET claimed_until = ? WHERE id IN (SELECT id FROM payments \
             WHERE next_check_at IS NOT NULL AND next_check_at <= ? AND (claimed_until IS NULL OR claimed_until <= ?) \
             AND status IN ('verified', 'submitted', 'pending') AND ({served}(status = 'verified' AND tx_id IS NULL)) \
             ORDER BY next_check_at, seq LIMIT ?{skip_locked}) RETURNING {PAYMENT_COLUMNS}"
        );
        let sql = self.sql(&sql);
        let mut query = sqlx::query(&sql)
            .bind(claim_until.timestamp_millis())
            .bind(now.timestamp_millis())
            .bind(now.timestamp_millis());
        for network in networks {
            query = query.bind(network.to_string());
        }
        let rows = query.bind(i64::from(limit)).fetch_all(&self.pool).await?;
        let mut claimed = rows.iter().map(payment_from_row).collect::<StoreResult<Vec<_>>>()?;
        claimed.sort_by_key(|p| (p.payment.next_check_at, p.seq));
        Ok(claimed)
    }

    async fn reschedule_payment(&self, id: &str, at: DateTime<Utc>) -> StoreResult<()> {
        sqlx::query(&self.sql(
            "UPDATE payments SET next_check_at = ?, checks = checks + 1, claimed_until = NULL \
             WHERE id = ? AND next_check_at IS NOT NULL",
        ))
        .bind(at.timestamp_millis())
        .bind(id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn unfinished_payments(&self) -> StoreResult<u64> {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM payments WHERE next_check_at IS NOT NULL")
            .fetch_one(&self.pool)
            .await?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    async fn bring_checks_forward(&self, at: DateTime<Utc>) -> StoreResult<u64> {
        let moved = sqlx::query(&self.sql(
            "UPDATE payments SET next_check_at = ? WHERE next_check_at > ? \
             AND (claimed_until IS NULL OR claimed_until <= ?)",
        ))
        .bind(at.timestamp_millis())
        .bind(at.timestamp_millis())
        .bind(at.timestamp_millis())
        .execute(&self.pool)
        .await?;
        Ok(moved.rows_affected())
    }

    async fn recent_payments(&self, limit: u32) -> StoreResult<Vec<StoredPayment>> {
        let sql = format!("SELECT {PAYMENT_COLUMNS} FROM payments ORDER BY seq DESC LIMIT ?");
        let rows = sqlx::query(&self.sql(&sql)).bind(i64::from(limit)).fetch_all(&self.pool).await?;
        rows.iter().map(payment_from_row).collect()
    }

    async fn history(
        &self,
        account: &str,
        wallet: &str,
        direction_filter: Option<Direction>,
        limit: u32,
        offset: u64,
    ) -> StoreResult<HistoryPage> {
        let filter = if direction_filter.is_some() { " AND direction = ?" } else { "" };
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
        if let Some(d) = direction_filter {
            total_q = total_q.bind(d.as_str());
        }
        let total: i64 = total_q.fetch_one(&mut *tx).await?.try_get("total")?;

        let page_text = self.sql(&page_sql);
        let mut page_q = sqlx::query(&page_text).bind(account).bind(wallet);
        if let Some(d) = direction_filter {
            page_q = page_q.bind(d.as_str());
        }
        let rows = page_q.bind(i64::from(limit)).bind(to_i64(offset, "offset")?).fetch_all(&mut *tx).await?;
        tx.commit().await?;
        let entries = rows
            .iter()
            .map(|row| {
                let side: String = row.try_get("wallet_direction")?;
                Ok((payment_from_row(row)?, direction(&side)?))
            })
            .collect::<StoreResult<Vec<_>>>()?;
        Ok(HistoryPage { total: u64::try_from(total).unwrap_or(0), entries })
    }
}
